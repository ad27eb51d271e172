package server

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/text/parser"
)

// Models runs the model-management endpoints over a local store: the server's handlers call it, and so
// does the CLI when no server answers. Its methods have the same signatures as Client's.
type Models struct {
	Store       *registry.Store
	PullOptions registry.PullOptions // how pulls reach the Hub (zero value: the environment's)
}

// NewModels serves the store the environment names (HF_HUB_CACHE/HF_HOME, MLXG_HOME).
func NewModels() (*Models, error) {
	s, err := registry.DefaultStore()
	if err != nil {
		return nil, err
	}
	return &Models{Store: s}, nil
}

// badRequest wraps a bad name as the 400 a server would answer.
func badRequest(err error) error {
	return api.StatusError{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", ErrorMessage: err.Error()}
}

func parse(model, deprecated string) (registry.Name, error) {
	if model == "" {
		model = deprecated
	}
	n, err := registry.ParseName(model)
	if err != nil {
		return n, badRequest(err)
	}
	return n, nil
}

// Pull downloads a model, calling fn with each progress event. A model made on this machine (mlxg create,
// an import) has nothing to download: when it is here, pulling it succeeds at once, as pulling an
// up-to-date model does (clients such as Codex pull the model they are given before they use it).
func (m *Models) Pull(ctx context.Context, req *api.PullRequest, fn func(api.ProgressResponse) error) error {
	n, err := parse(req.Model, req.Name)
	if err != nil {
		return err
	}
	if m.isLocal(n) {
		return fn(api.ProgressResponse{Status: "success"})
	}
	var fnErr error
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	_, err = m.Store.Pull(ctx, n, m.PullOptions, func(p registry.Progress) {
		if fnErr == nil {
			if fnErr = fn(p); fnErr != nil {
				cancel()
			}
		}
	})
	if fnErr != nil {
		return fnErr
	}
	return err
}

// isLocal reports whether n names a model made on this machine, which has no remote, and it is here.
func (m *Models) isLocal(n registry.Name) bool {
	target, err := m.Store.Lookup(n)
	if err != nil {
		return false
	}
	if org, _, _ := strings.Cut(target.Repo, "/"); org != registry.LocalOrg {
		return false
	}
	_, err = m.Store.Resolve(n)
	return err == nil
}

// List lists the models in the store, newest first.
func (m *Models) List(ctx context.Context) (*api.ListResponse, error) {
	models, err := m.Store.List()
	if err != nil {
		return nil, err
	}
	out := &api.ListResponse{Models: []api.ListModelResponse{}}
	for _, lm := range models {
		var d api.ModelDetails
		if info, err := registry.ReadInfo(lm.Dir); err == nil {
			d = details(info)
		}
		out.Models = append(out.Models, api.ListModelResponse{Name: lm.Name, Model: lm.Name, ModifiedAt: lm.Modified,
			Size: lm.Size, Digest: lm.Commit, Details: d})
	}
	return out, nil
}

func details(info *registry.ModelInfo) api.ModelDetails {
	d := api.ModelDetails{Format: "safetensors", Family: info.ModelType, ParameterSize: info.ParameterSize(),
		QuantizationLevel: info.QuantizationLevel()}
	if info.ModelType != "" {
		d.Families = []string{info.ModelType}
	}
	return d
}

// Show describes a model from its config.json, safetensors headers and tokenizer files.
func (m *Models) Show(ctx context.Context, req *api.ShowRequest) (*api.ShowResponse, error) {
	n, err := parse(req.Model, req.Name)
	if err != nil {
		return nil, err
	}
	lm, err := m.Store.Resolve(n)
	if err != nil {
		return nil, err
	}
	info, err := registry.ReadInfo(lm.Dir)
	if err != nil {
		return nil, err
	}
	resp := ShowModel(lm, info, req.Verbose)
	if req.System != "" { // as Ollama: show the model as it would run with this system prompt
		resp.System = req.System
	}
	return resp, nil
}

// ShowModel builds /api/show's answer for a model; verbose adds the tensor list.
func ShowModel(lm *registry.LocalModel, info *registry.ModelInfo, verbose bool) *api.ShowResponse {
	arch := info.ModelType
	if arch == "" {
		arch = "unknown"
	}
	mi := map[string]any{
		"general.architecture":    arch,
		"general.parameter_count": info.Parameters,
		"general.basename":        lm.Repo,
		"general.commit":          lm.Commit,
	}
	if info.Architecture != "" {
		mi["general.architectures"] = []string{info.Architecture}
	}
	set := func(key string, v int) {
		if v > 0 {
			mi[arch+"."+key] = v
		}
	}
	set("context_length", info.ContextLength)
	set("embedding_length", info.EmbeddingLength)
	set("block_count", info.Layers)
	set("attention.head_count", info.Heads)
	set("attention.head_count_kv", info.KVHeads)
	set("attention.key_length", info.HeadDim)
	set("attention.sliding_window", info.SlidingWindow)
	set("vocab_size", info.VocabSize)
	mi["mlx.kv_cache_layers"] = info.KVLayers()
	mi["mlx.layer_types"] = info.LayerKinds
	if q := info.Quantization; q != nil {
		mi["mlx.quantization.bits"] = q.Bits
		mi["mlx.quantization.group_size"] = q.GroupSize
		mi["mlx.quantization.mode"] = q.Mode
		if len(q.Modules) > 0 {
			mods := map[string]any{}
			for k, v := range q.Modules {
				if v.Bits == 0 {
					mods[k] = false
				} else {
					mods[k] = map[string]any{"bits": v.Bits, "group_size": v.GroupSize, "mode": v.Mode}
				}
			}
			mi["mlx.quantization.modules"] = mods
		}
	}
	resp := &api.ShowResponse{
		License:    info.License,
		Template:   info.ChatTemplate,
		Parameters: showParameters(info.Generation, lm.Modelfile), // modelfile.go
		Details:    details(info),
		ModelInfo:  mi,
		ModifiedAt: lm.Modified,
	}
	if mf := lm.Modelfile; mf != nil { // what ollama create added
		resp.System = mf.System
		resp.License = strings.Join(append(slices.DeleteFunc([]string{info.License}, func(s string) bool { return s == "" }), mf.License...), "\n")
		for _, m := range mf.Messages {
			resp.Messages = append(resp.Messages, api.Message{Role: m.Role, Content: m.Content})
		}
		resp.Details.ParentModel = mf.From
	}
	resp.Capabilities = capabilities(lm.Dir, info)
	resp.Modelfile = showModelfile(lm, resp.Parameters)
	if verbose {
		for _, t := range info.Tensors {
			shape := make([]uint64, len(t.Shape))
			for i, d := range t.Shape {
				shape[i] = uint64(d)
			}
			resp.Tensors = append(resp.Tensors, api.Tensor{Name: t.Name, Type: string(t.DType), Shape: shape})
		}
	}
	return resp
}

// capabilities follow Ollama's names. An embedding model (embeddingModel) has "embedding" alone, as
// Ollama lists it for a model with a pooling type; any other model has completion, tools and thinking
// when the chat template teaches a tool-call or thinking syntax the server parses (text/parser.Detect,
// the same test the server uses), vision when the checkpoint holds a vision tower mlxg runs
// (runner/model.HasVision), and insert when its tokenizer has fill-in-the-middle tokens. The ollama
// CLI reads the list: with "embedding" in it, `ollama run` prints an embedding instead of chatting.
// /api/embed serves every model either way (last-token pooling).
func capabilities(dir string, info *registry.ModelInfo) []string {
	if embeddingModel(dir, info) {
		return []string{"embedding"}
	}
	caps := []string{"completion"}
	pc := parser.Detect(info.ChatTemplate)
	if pc.Tools != parser.ToolsNone {
		caps = append(caps, "tools")
	}
	if pc.Thinking {
		caps = append(caps, "thinking")
	}
	if model.HasVision(dir) {
		caps = append(caps, "vision") // a tower mlxg runs, in the checkpoint
	}
	return append(caps, insertCapability(dir)...)
}

// embeddingModel reports whether a checkpoint is an embedding model rather than a generative one, from
// what its files say, since Ollama's test (a pooling type in the GGUF) has no counterpart in a
// safetensors checkpoint: a sentence-transformers pooling stage (1_Pooling/, or modules.json naming a
// Pooling module, which Qwen3-Embedding ships), an architecture without a language-model head
// (Qwen3Model, BertModel, Gemma3TextModel; a generative one ends ForCausalLM, ForConditionalGeneration or
// LMHeadModel) or named for embeddings, or the README's Hub pipeline tag (feature-extraction,
// sentence-similarity), which the MLX conversions of such models keep.
func embeddingModel(dir string, info *registry.ModelInfo) bool {
	if _, ok := info.Files["1_Pooling"]; ok {
		return true
	}
	if b, err := os.ReadFile(filepath.Join(dir, "modules.json")); err == nil && bytes.Contains(b, []byte("Pooling")) {
		return true
	}
	arch := info.Architecture
	switch {
	case strings.Contains(arch, "Embedding"):
		return true
	case strings.HasSuffix(arch, "Model") && !strings.HasSuffix(arch, "LMHeadModel"):
		return true
	}
	switch readmeField(dir, "pipeline_tag") {
	case "feature-extraction", "sentence-similarity":
		return true
	}
	return false
}

// readmeField is a top-level field of README.md's YAML front matter (the Hub's model card metadata), ""
// when there is none.
func readmeField(dir, key string) string {
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		return ""
	}
	front, ok := strings.CutPrefix(strings.ReplaceAll(string(b), "\r\n", "\n"), "---\n")
	if !ok {
		return ""
	}
	front, _, _ = strings.Cut(front, "\n---")
	for _, line := range strings.Split(front, "\n") {
		if v, ok := strings.CutPrefix(line, key+":"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}

// generationParameters renders generation_config.json's sampling defaults as Ollama's parameter lines.
func generationParameters(g map[string]any) string {
	names := map[string]string{"temperature": "temperature", "top_p": "top_p", "top_k": "top_k", "min_p": "min_p",
		"repetition_penalty": "repeat_penalty", "presence_penalty": "presence_penalty", "frequency_penalty": "frequency_penalty"}
	var lines []string
	for k, name := range names {
		if f, ok := g[k].(float64); ok {
			lines = append(lines, fmt.Sprintf("%-16s %s", name, strconv.FormatFloat(f, 'g', -1, 64)))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// Delete removes a model (see registry.Store.Remove).
func (m *Models) Delete(ctx context.Context, req *api.DeleteRequest) error {
	n, err := parse(req.Model, req.Name)
	if err != nil {
		return err
	}
	_, err = m.Store.Remove(ctx, n)
	return err
}

// Copy makes Destination an alias of Source.
func (m *Models) Copy(ctx context.Context, req *api.CopyRequest) error {
	src, err := parse(req.Source, "")
	if err != nil {
		return err
	}
	dst, err := parse(req.Destination, "")
	if err != nil {
		return err
	}
	_, err = m.Store.Copy(src, dst)
	return err
}
