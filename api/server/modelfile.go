package server

// What makes a Modelfile work as it does with Ollama: /api/create (`ollama create -f Modelfile`), the
// blobs it uploads first (/api/blobs/:digest), a created model's parameters, system prompt and messages
// applied to every request, and /api/show reporting them.

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/internal/files"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/runner"
)

// blobPath is where an uploaded blob waits for /api/create: $MLXG_HOME/blobs/sha256-<hex>.
func blobPath(store *registry.Store, digest string) (string, error) {
	h, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		h, ok = strings.CutPrefix(digest, "sha256-")
	}
	if _, err := hex.DecodeString(h); !ok || err != nil || len(h) != 64 || strings.ToLower(h) != h {
		return "", badRequest(fmt.Errorf("invalid digest %q: want sha256:<64 lowercase hex digits>", digest))
	}
	return filepath.Join(store.Home, "blobs", "sha256-"+h), nil
}

// isBlobUpload reports a POST /api/blobs/:digest, whose body (a model file) is bounded by the disk, not by
// the server's request-body limit.
func isBlobUpload(c *gin.Context) bool {
	return c.Request.Method == http.MethodPost && strings.HasPrefix(c.Request.URL.Path, "/api/blobs/")
}

// handleBlobHead answers 200 when the blob is here, else 404, as Ollama's HEAD /api/blobs/:digest.
func (s *Server) handleBlobHead(c *gin.Context) {
	p, err := blobPath(s.cfg.Store, c.Param("digest"))
	if err != nil {
		abortErr(c, notFound(err, ""))
		return
	}
	if _, err := os.Stat(p); err != nil {
		abort(c, http.StatusNotFound, fmt.Sprintf("blob %q not found", c.Param("digest")))
		return
	}
	c.Status(http.StatusOK)
}

// handleBlobPost stores the body as the blob named by its sha256 (201), verifying the digest as it is
// written; a blob already here is 200. A body whose sha256 differs is a 400 and nothing is kept.
func (s *Server) handleBlobPost(c *gin.Context) {
	digest := c.Param("digest")
	p, err := blobPath(s.cfg.Store, digest)
	if err != nil {
		abortErr(c, notFound(err, ""))
		return
	}
	if _, err := os.Stat(p); err == nil {
		c.Status(http.StatusOK)
		return
	}
	if err := writeBlob(p, c.Request.Body); err != nil {
		abortErr(c, err)
		return
	}
	c.Status(http.StatusCreated)
}

// writeBlob writes r to path through a temporary file, checking that its sha256 is the one path names.
func writeBlob(path string, r io.Reader) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the blob folder: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".upload-*")
	if err != nil {
		return fmt.Errorf("creating a blob: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), r)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("receiving the blob: %w", err)
	}
	want := strings.TrimPrefix(filepath.Base(path), "sha256-")
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return errorf(http.StatusBadRequest, "digest mismatch: the body's digest is sha256:%s, not sha256:%s", got, want)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("storing the blob: %w", err)
	}
	return nil
}

// handleCreate is POST /api/create: progress lines, then {"status":"success"} (one object without stream).
func (s *Server) handleCreate(c *gin.Context) {
	var req api.CreateRequest
	if err := decode(c, &req); err != nil {
		abortErr(c, err)
		return
	}
	stream := req.Stream == nil || *req.Stream
	nd := newNDJSON(c)
	err := s.models.Create(c.Request.Context(), &req, func(p api.ProgressResponse) error {
		if !stream {
			return nil
		}
		return nd.send(p)
	})
	if err != nil {
		s.log.Warn("create failed", "model", cmp.Or(req.Model, req.Name), "error", err)
		nd.fail(notFound(err, cmp.Or(req.From, req.Model, req.Name)))
		return
	}
	if !stream {
		c.JSON(http.StatusOK, api.ProgressResponse{Status: "success"})
		return
	}
	_ = nd.send(api.ProgressResponse{Status: "success"})
}

// Create makes a model as `ollama create` does: FROM an existing model (pulled first when it is a Hub or
// library name not here yet) with the request's parameters, system prompt, messages and licenses on top
// of that model's own, sharing its weights; or from uploaded files (a safetensors checkpoint: an MLX one
// is imported as it is, a Hugging Face one converted, quantized with Quantize). fn receives progress.
func (m *Models) Create(ctx context.Context, req *api.CreateRequest, fn func(api.ProgressResponse) error) error {
	name := cmp.Or(req.Model, req.Name)
	if strings.TrimSpace(name) == "" {
		return badRequest(errors.New("model is required: the name to create"))
	}
	dst, err := registry.ParseName(name)
	if err != nil {
		return badRequest(err)
	}
	add, bits, err := checkCreate(req)
	if err != nil {
		return badRequest(err)
	}
	switch {
	case req.From != "":
		from, err := registry.ParseName(req.From)
		if err != nil {
			return badRequest(fmt.Errorf("FROM %q: %w", req.From, err))
		}
		if !dst.IsBare() {
			return badRequest(fmt.Errorf("create FROM a model makes a name without '/', such as mymodel or mymodel:v1, not %q", name))
		}
		base, err := m.Store.Resolve(from)
		if _, library := registry.LibraryRepo(from.Bare); errors.Is(err, registry.ErrNotFound) && (!from.IsBare() || library) {
			// A Hub or library name not here yet is pulled first, as Ollama pulls a FROM model.
			if err = m.Pull(ctx, &api.PullRequest{Model: req.From}, fn); err == nil {
				base, err = m.Store.Resolve(from)
			}
		}
		if err != nil {
			return err
		}
		mf := base.Modelfile.Merge(add)
		if bits > 0 {
			info, err := registry.ReadInfo(base.Dir)
			if err != nil {
				return err
			}
			if info.Quantization != nil {
				return badRequest(fmt.Errorf("quantize %s: %s is already quantized (%s); create FROM its unquantized weights", req.Quantize, req.From, info.QuantizationLevel()))
			}
			if err := fn(api.ProgressResponse{Status: fmt.Sprintf("quantizing %s to %d bits", req.From, bits)}); err != nil {
				return err
			}
			if base, _, err = create.Create(ctx, m.Store, dst, base.Dir, create.Options{Bits: bits}); err != nil {
				return err
			}
		} else if err := fn(api.ProgressResponse{Status: fmt.Sprintf("using existing model %s (commit %s)", base.Repo, base.ID())}); err != nil {
			return err
		}
		if err := fn(api.ProgressResponse{Status: "writing manifest"}); err != nil {
			return err
		}
		if _, err := m.Store.Derive(base, dst, mf); err != nil {
			return badRequest(err)
		}
	case len(req.Files) > 0:
		made, err := m.createFromFiles(ctx, dst, req.Files, bits, fn)
		if err != nil {
			return err
		}
		if add.Parameters != nil || add.System != "" || len(add.Messages) > 0 || len(add.License) > 0 {
			if !dst.IsBare() {
				return badRequest(fmt.Errorf("PARAMETER, SYSTEM, MESSAGE and LICENSE need a name without '/', such as mymodel, not %q", name))
			}
			if _, err := m.Store.Derive(made, dst, add); err != nil {
				return err
			}
		}
		// The checkpoint is in the store now: the uploads would only double the disk they take.
		for _, digest := range req.Files {
			if p, err := blobPath(m.Store, digest); err == nil {
				os.Remove(p)
			}
		}
	default:
		return badRequest(errors.New("neither 'from' or 'files' was specified: give FROM a model name, or upload a checkpoint's files"))
	}
	return nil
}

// checkCreate reads what the request adds to a model, refusing what mlxg cannot do.
func checkCreate(req *api.CreateRequest) (*registry.Modelfile, int, error) {
	switch {
	case req.Template != "":
		return nil, 0, errors.New("TEMPLATE is not supported: mlxg renders the checkpoint's own chat template (tokenizer_config.json's chat_template); remove the TEMPLATE line")
	case len(req.Adapters) > 0:
		return nil, 0, errors.New("ADAPTER is not supported: mlxg does not apply LoRA adapters; fuse the adapter into the weights (mlx_lm.fuse) and create FROM the result")
	case len(req.DraftFiles) > 0 || req.DraftQuantize != "":
		return nil, 0, errors.New("DRAFT (a draft model's own files) is not supported: put the draft model in the store (pull or create it) and name it with PARAMETER draft_model")
	case req.RemoteHost != "":
		return nil, 0, errors.New("remote models (remote_host) are not supported by mlxg")
	case req.Renderer != "" || req.Parser != "":
		return nil, 0, errors.New("RENDERER and PARSER are not supported: mlxg renders the checkpoint's chat template and detects its tool-call and thinking syntax from it")
	}
	if req.Requires != "" && versionLess(api.OllamaVersion, req.Requires) {
		return nil, 0, fmt.Errorf("the model requires Ollama %s; this server provides the Ollama %s API", req.Requires, api.OllamaVersion)
	}
	add := &registry.Modelfile{From: req.From, System: req.System}
	if len(req.Parameters) > 0 {
		// As JSON has them (numbers float64, lists []any), however the request was made (in-process too).
		var params map[string]any
		if b, err := json.Marshal(req.Parameters); err != nil || json.Unmarshal(b, &params) != nil {
			return nil, 0, fmt.Errorf("PARAMETER: values must be numbers, booleans, strings or lists of strings")
		}
		if err := checkDraftParameter(params[api.DraftModelParameter]); err != nil {
			return nil, 0, err
		}
		o := api.DefaultOptions()
		if err := o.FromMap(optionParameters(params)); err != nil {
			var unknown *api.UnknownOptionError
			if errors.As(err, &unknown) {
				return nil, 0, fmt.Errorf("PARAMETER %s: unknown parameter (use Ollama's option names: num_ctx, temperature, top_k, top_p, min_p, stop, seed, num_predict, repeat_penalty, ...)", unknown.Key)
			}
			return nil, 0, fmt.Errorf("PARAMETER: %w", err)
		}
		if err := toRunnerOptions(o).Validate(); err != nil {
			return nil, 0, fmt.Errorf("PARAMETER: %w", err)
		}
		add.Parameters = params
	}
	for i, msg := range req.Messages {
		switch msg.Role {
		case "system", "user", "assistant":
		default:
			return nil, 0, fmt.Errorf("MESSAGE %d: role %q: use system, user or assistant", i+1, msg.Role)
		}
		add.Messages = append(add.Messages, registry.Message{Role: msg.Role, Content: msg.Content})
	}
	switch l := req.License.(type) {
	case nil:
	case string:
		if l != "" {
			add.License = []string{l}
		}
	case []any:
		for _, v := range l {
			s, ok := v.(string)
			if !ok {
				return nil, 0, errors.New("license must be a string or a list of strings")
			}
			add.License = append(add.License, s)
		}
	default:
		return nil, 0, errors.New("license must be a string or a list of strings")
	}
	bits, err := quantizeBits(cmp.Or(req.Quantize, req.Quantization))
	return add, bits, err
}

// quantizeBits reads Ollama's quantize values ("q4_K_M", "q8_0", "q4_0") as well as mlxg's ("q4", "q8"):
// the number after q is the bits per weight of MLX's affine quantization.
func quantizeBits(q string) (int, error) {
	if q == "" {
		return 0, nil
	}
	t := strings.ToLower(q)
	if i := strings.IndexByte(t, '_'); i > 0 {
		t = t[:i]
	}
	bits, err := create.ParseQuantize(t)
	if err != nil {
		return 0, fmt.Errorf("quantize %q: use q2, q3, q4, q5, q6 or q8 (or Ollama's q4_K_M, q8_0...: the bits are kept, MLX's affine quantization is used)", q)
	}
	return bits, nil
}

// versionLess compares dotted version numbers ("0.6.4" < "0.33.0").
func versionLess(a, b string) bool {
	pa, pb := strings.Split(strings.TrimPrefix(a, "v"), "."), strings.Split(strings.TrimPrefix(b, "v"), ".")
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(strings.SplitN(pa[i], "-", 2)[0])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(strings.SplitN(pb[i], "-", 2)[0])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

// createFromFiles gathers uploaded blobs into a checkpoint folder and stores it under dst: an MLX
// checkpoint as it is, a Hugging Face one converted (quantized to bits when not 0).
func (m *Models) createFromFiles(ctx context.Context, dst registry.Name, files map[string]string, bits int, fn func(api.ProgressResponse) error) (*registry.LocalModel, error) {
	if err := os.MkdirAll(m.Store.Home, 0o755); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(m.Store.Home, ".create-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range files {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		if !fs.ValidPath(name) || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
			return nil, badRequest(fmt.Errorf("file name %q: give a plain file name of the checkpoint's folder (no path, no leading '.')", name))
		}
		if strings.HasSuffix(strings.ToLower(name), ".gguf") {
			return nil, badRequest(fmt.Errorf("%s: GGUF files are not supported; mlxg runs safetensors checkpoints (FROM a folder with config.json and *.safetensors, or a Hugging Face name such as mlx-community/Qwen3-8B-4bit)", name))
		}
		src, err := blobPath(m.Store, files[name])
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(src); err != nil {
			return nil, badRequest(fmt.Errorf("file %s: blob %s not found: upload it first (POST /api/blobs/%s)", name, files[name], files[name]))
		}
		if err := linkOrCopy(src, filepath.Join(dir, name)); err != nil {
			return nil, fmt.Errorf("gathering %s: %w", name, err)
		}
	}
	cfgData, err := os.ReadFile(filepath.Join(dir, "config.json"))
	hasWeights := slices.ContainsFunc(names, func(n string) bool { return strings.HasSuffix(n, ".safetensors") })
	if err != nil || !hasWeights {
		return nil, badRequest(fmt.Errorf("the files are not a safetensors checkpoint: it needs config.json and *.safetensors (got %s)", strings.Join(names, ", ")))
	}
	var cfg map[string]any
	if err := json.Unmarshal(cfgData, &cfg); err != nil {
		return nil, badRequest(fmt.Errorf("config.json: %v", err))
	}
	if err := registry.CheckArchitecture(cfgData); err != nil {
		return nil, badRequest(err)
	}
	if _, quantized := cfg["quantization"]; quantized {
		if bits > 0 {
			return nil, badRequest(errors.New("quantize: the checkpoint is already MLX-quantized (config.json has a quantization block); leave quantize out"))
		}
		if err := fn(api.ProgressResponse{Status: "importing the MLX checkpoint"}); err != nil {
			return nil, err
		}
		return m.Store.ImportDir(ctx, dst, dir)
	}
	status := "converting model"
	if bits > 0 {
		status = fmt.Sprintf("converting model (quantizing to %d bits)", bits)
	}
	if err := fn(api.ProgressResponse{Status: status}); err != nil {
		return nil, err
	}
	made, _, err := create.Create(ctx, m.Store, dst, dir, create.Options{Bits: bits})
	if err != nil {
		return nil, badRequest(err)
	}
	return made, nil
}

// linkOrCopy hard-links src to dst (same disk: no copy), copying where links are not possible.
func linkOrCopy(src, dst string) error {
	if os.Link(src, dst) == nil {
		return nil
	}
	return files.Copy(src, dst)
}

// modelOptions applies the parameters a Modelfile gave the model (after the checkpoint's generation
// defaults, before the request's own options).
// draftFor resolves lm's draft model: its Modelfile's draft_model, else the server's default
// (byDefault). A model named as the server's default runs without a draft, and so does every
// model of a server that splits its models over several machines: a split model does not
// speculate, so its draft would only take memory.
func (s *Server) draftFor(lm *registry.LocalModel) (d *registry.LocalModel, byDefault bool, err error) {
	if l, ok := s.cfg.Loader.(*EngineLoader); ok && l.Pipeline != nil {
		return nil, false, nil
	}
	name := s.cfg.DraftModel
	if v, ok := lm.Modelfile.Param(api.DraftModelParameter).(string); ok && v != "" {
		name = v
	} else {
		byDefault = true
	}
	if name == "" {
		return nil, false, nil
	}
	if d, err = s.resolve(name); err != nil {
		return nil, false, errorf(http.StatusBadRequest, "model %s: its draft model %s: %v (pull it, or set another draft_model)", lm.Name, name, err)
	}
	if byDefault && d.Dir == lm.Dir {
		return nil, false, nil // the server's default draft model, asked for itself: it runs alone
	}
	return d, byDefault, nil
}

// optionParameters are a Modelfile's parameters that are request options: all but draft_model.
func optionParameters(params map[string]any) map[string]any {
	if _, ok := params[api.DraftModelParameter]; !ok {
		return params
	}
	out := maps.Clone(params)
	delete(out, api.DraftModelParameter)
	return out
}

// checkDraftParameter checks a PARAMETER draft_model value (nil: none): a model name. The model
// need not be in the store yet; a request finds it missing.
func checkDraftParameter(v any) error {
	if v == nil {
		return nil
	}
	name, ok := v.(string)
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("PARAMETER %s: want a model name, such as qwen3:0.6b", api.DraftModelParameter)
	}
	if _, err := registry.ParseName(name); err != nil {
		return fmt.Errorf("PARAMETER %s: %w", api.DraftModelParameter, err)
	}
	return nil
}

func modelOptions(o *api.Options, lm *registry.LocalModel) error {
	if lm.Modelfile == nil || len(lm.Modelfile.Parameters) == 0 {
		return nil
	}
	if err := o.FromMap(optionParameters(lm.Modelfile.Parameters)); err != nil {
		return errorf(http.StatusInternalServerError, "model %s: its parameters: %v (create it again)", lm.Name, err)
	}
	return nil
}

// useModelfile puts the model's system prompt and messages (a Modelfile's SYSTEM and MESSAGE) into the
// request as Ollama does: a chat gets the messages first and the system prompt unless it starts with its
// own; a generate request uses the system prompt when it has none (the messages: modelMessages). Raw
// requests get neither.
func (j *job) useModelfile() {
	mf := j.lm.Modelfile
	if mf == nil || j.raw {
		return
	}
	if !j.chat {
		if j.system == "" {
			j.system = mf.System
		}
		return
	}
	var msgs []api.Message
	if mf.System != "" && (len(j.messages) == 0 || j.messages[0].Role != "system") {
		msgs = append(msgs, api.Message{Role: "system", Content: mf.System})
	}
	for _, m := range mf.Messages {
		msgs = append(msgs, api.Message{Role: m.Role, Content: m.Content})
	}
	j.messages = append(msgs, j.messages...)
}

// modelMessages are the Modelfile's messages a generate request puts before its prompt (not when it
// continues from a context, as Ollama).
func (j *job) modelMessages() []api.Message {
	mf := j.lm.Modelfile
	if mf == nil || j.chat || j.raw || len(j.context) > 0 {
		return nil
	}
	var out []api.Message
	for _, m := range mf.Messages {
		out = append(out, api.Message{Role: m.Role, Content: m.Content})
	}
	return out
}

// isFalse reports a JSON boolean sent as false (truncate, shift: absent means true).
func isFalse(b *bool) bool { return b != nil && !*b }

// isTrue reports a JSON boolean sent as true (the OpenAI and Anthropic routes' truncate: absent means false).
func isTrue(b *bool) bool { return b != nil && *b }

// contextOverflow reports a prompt that does not fit num_ctx with truncate false: the client's 400.
func contextOverflow(err error) bool {
	var ce *runner.ContextError
	return errors.As(err, &ce)
}

// showParameters are /api/show's parameters: generation_config.json's sampling defaults, with the
// Modelfile's parameters over them, one "name value" line each (a list, such as stop, one line per value).
func showParameters(gen map[string]any, mf *registry.Modelfile) string {
	vals := map[string][]string{}
	for _, line := range strings.Split(generationParameters(gen), "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			vals[k] = []string{strings.TrimSpace(v)}
		}
	}
	if mf != nil {
		for k, v := range mf.Parameters {
			vals[k] = nil
			list, ok := v.([]any)
			if !ok {
				list = []any{v}
			}
			for _, x := range list {
				vals[k] = append(vals[k], paramValue(x))
			}
		}
	}
	var lines []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range vals {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, v := range vals[k] {
			lines = append(lines, fmt.Sprintf("%-16s %s", k, v))
		}
	}
	return strings.Join(lines, "\n")
}

func paramValue(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// showModelfile is /api/show's modelfile: FROM the snapshot, then what create added.
func showModelfile(lm *registry.LocalModel, params string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Modelfile generated by \"mlxg show\"\nFROM %s\n", lm.Dir)
	mf := lm.Modelfile
	if mf == nil {
		return b.String()
	}
	if params != "" {
		for _, line := range strings.Split(params, "\n") {
			k, v, _ := strings.Cut(line, " ")
			fmt.Fprintf(&b, "PARAMETER %s %s\n", k, strings.TrimSpace(v))
		}
	}
	if mf.System != "" {
		fmt.Fprintf(&b, "SYSTEM \"\"\"%s\"\"\"\n", mf.System)
	}
	for _, m := range mf.Messages {
		fmt.Fprintf(&b, "MESSAGE %s \"\"\"%s\"\"\"\n", m.Role, m.Content)
	}
	for _, l := range mf.License {
		fmt.Fprintf(&b, "LICENSE \"\"\"%s\"\"\"\n", l)
	}
	return b.String()
}

// insertCapability is "insert" when tokenizer.json has one of the fill-in-the-middle token sets the
// server's suffix support uses (fimConventions), else nothing.
func insertCapability(dir string) []string {
	tok, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil
	}
	has := func(t string) bool { // as written by HF (UTF-8) or with \u escapes
		return bytes.Contains(tok, []byte(strconv.Quote(t))) || bytes.Contains(tok, []byte(strconv.QuoteToASCII(t)))
	}
	if slices.ContainsFunc(fimConventions, func(set [3]string) bool { return has(set[0]) && has(set[1]) && has(set[2]) }) {
		return []string{"insert"}
	}
	return nil
}

// CreateBlob stores r as the blob digest names (in-process, as POST /api/blobs/:digest does).
func (m *Models) CreateBlob(ctx context.Context, digest string, r io.Reader) error {
	p, err := blobPath(m.Store, digest)
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := writeBlob(p, r); err != nil {
		return fmt.Errorf("blob %s: %w", digest, err)
	}
	return nil
}
