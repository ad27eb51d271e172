package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// Quantization is an MLX checkpoint's "quantization" block of config.json.
type Quantization struct {
	Bits      int    // default bits per weight
	GroupSize int    // default group size along the input dimension
	Mode      string // "affine" (scales and biases), or a mode without biases (mxfp4, mxfp8, nvfp4)
	// Modules holds the per-module overrides of mixed recipes, by module path
	// (e.g. "model.layers.0.mlp.down_proj"); an entry with Bits 0 marks a module left unquantized.
	Modules map[string]ModuleQuant
}

// ModuleQuant is one module's override in a mixed recipe.
type ModuleQuant struct {
	Bits      int
	GroupSize int
	Mode      string
}

// For returns the quantization of a module path: its override, else the default.
func (q *Quantization) For(module string) ModuleQuant {
	if m, ok := q.Modules[module]; ok {
		return m
	}
	return ModuleQuant{Bits: q.Bits, GroupSize: q.GroupSize, Mode: q.Mode}
}

// Level is a short name of the quantization, for list and show: "4bit", "4bit-g32", "mxfp4",
// "mixed-4/8bit" when modules use several bit widths.
func (q *Quantization) Level() string {
	if q.Mode != "" && q.Mode != "affine" {
		return q.Mode
	}
	bits := []int{q.Bits}
	for _, m := range q.Modules {
		if m.Bits != 0 && !slices.Contains(bits, m.Bits) {
			bits = append(bits, m.Bits)
		}
	}
	slices.Sort(bits)
	if len(bits) > 1 {
		s := make([]string, len(bits))
		for i, b := range bits {
			s[i] = strconv.Itoa(b)
		}
		return "mixed-" + strings.Join(s, "/") + "bit"
	}
	if q.GroupSize != 64 {
		return fmt.Sprintf("%dbit-g%d", q.Bits, q.GroupSize)
	}
	return fmt.Sprintf("%dbit", q.Bits)
}

// ModelInfo is what show reports about a checkpoint, read from config.json, the safetensors headers
// (never the weights), the tokenizer files, generation_config.json and README/LICENSE.
type ModelInfo struct {
	Architecture    string        // architectures[0], e.g. "Qwen3ForCausalLM"
	ModelType       string        // model_type, e.g. "qwen3" (Ollama's details.family)
	Parameters      int64         // weights counted unpacked (a 4-bit code is one parameter)
	DType           string        // the dtype of the unquantized tensors, e.g. "BF16"
	Quantization    *Quantization // nil when not quantized
	ContextLength   int           // max_position_embeddings (or the like)
	EmbeddingLength int           // hidden_size
	Layers          int           // num_hidden_layers
	Heads           int           // num_attention_heads
	KVHeads         int           // num_key_value_heads
	HeadDim         int           // head_dim, else hidden_size / heads
	VocabSize       int
	LayerKinds      []string // per layer: "full_attention", "sliding_attention", "linear_attention", ...
	SlidingWindow   int
	Tensors         []safetensors.TensorInfo
	ChatTemplate    string            // "" when the checkpoint has none
	License         string            // the LICENSE file, else the README's license: field
	Generation      map[string]any    // generation_config.json
	Config          map[string]any    // config.json as read
	Files           map[string]string // the files seen (name -> "")
}

// KVLayers lists the layers that keep a KV cache (attention layers; not the recurrent linear-attention
// or state-space layers of hybrid models).
func (m *ModelInfo) KVLayers() []int {
	var out []int
	for i, k := range m.LayerKinds {
		if hasKVCache(k) {
			out = append(out, i)
		}
	}
	return out
}

func hasKVCache(kind string) bool {
	k := strings.ToLower(kind)
	return strings.Contains(k, "attention") && !strings.Contains(k, "linear")
}

// ParameterSize is Ollama's rendering of a parameter count: "596.05M", "8B", "1.7B".
func (m *ModelInfo) ParameterSize() string { return HumanNumber(m.Parameters) }

// QuantizationLevel is the quantization's Level, else the dtype ("BF16", "F16").
func (m *ModelInfo) QuantizationLevel() string {
	if m.Quantization != nil {
		return m.Quantization.Level()
	}
	return m.DType
}

// HumanNumber renders a count as Ollama does: whole numbers without decimals, else one decimal
// for billions and two for millions.
func HumanNumber(n int64) string {
	f := float64(n)
	switch {
	case n >= 1e9:
		if v := f / 1e9; v == math.Floor(v) {
			return fmt.Sprintf("%.0fB", v)
		} else {
			return fmt.Sprintf("%.1fB", v)
		}
	case n >= 1e6:
		if v := f / 1e6; v == math.Floor(v) {
			return fmt.Sprintf("%.0fM", v)
		} else {
			return fmt.Sprintf("%.2fM", v)
		}
	case n >= 1e3:
		return fmt.Sprintf("%.0fK", f/1e3)
	}
	return strconv.FormatInt(n, 10)
}

// ReadInfo reads a checkpoint directory's metadata for show.
func ReadInfo(dir string) (*ModelInfo, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("%s has no readable config.json: %w", dir, err)
	}
	m := &ModelInfo{Files: map[string]string{}}
	if err := json.Unmarshal(raw, &m.Config); err != nil {
		return nil, fmt.Errorf("%s: config.json is not valid JSON: %w", dir, err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		m.Files[e.Name()] = ""
	}
	cfg := configView{top: m.Config}
	if tc, ok := m.Config["text_config"].(map[string]any); ok { // multimodal configs nest the language model
		cfg.text = tc
	}
	if a, ok := m.Config["architectures"].([]any); ok && len(a) > 0 {
		m.Architecture, _ = a[0].(string)
	}
	m.ModelType = cfg.str("model_type")
	m.ContextLength = cfg.firstInt("max_position_embeddings", "max_sequence_length", "seq_length", "n_positions", "max_seq_len")
	m.EmbeddingLength = cfg.firstInt("hidden_size", "d_model", "n_embd")
	m.Layers = cfg.firstInt("num_hidden_layers", "n_layer", "num_layers")
	m.Heads = cfg.firstInt("num_attention_heads", "n_head")
	m.KVHeads = cfg.firstInt("num_key_value_heads")
	if m.KVHeads == 0 {
		m.KVHeads = m.Heads
	}
	m.HeadDim = cfg.firstInt("head_dim")
	if m.HeadDim == 0 && m.Heads > 0 {
		m.HeadDim = m.EmbeddingLength / m.Heads
	}
	m.VocabSize = cfg.firstInt("vocab_size")
	m.SlidingWindow = cfg.firstInt("sliding_window")
	m.LayerKinds = layerKinds(cfg, m.Layers)
	if q, err := parseQuantization(m.Config["quantization"]); err != nil {
		return nil, fmt.Errorf("%s: config.json: %w", dir, err)
	} else {
		m.Quantization = q
	}

	headers, err := safetensors.ReadDirHeaders(dir)
	if err != nil {
		return nil, err
	}
	for _, h := range headers {
		m.Tensors = append(m.Tensors, h.Tensors...)
	}
	slices.SortFunc(m.Tensors, func(a, b safetensors.TensorInfo) int { return strings.Compare(a.Name, b.Name) })
	m.Parameters, m.DType = countParameters(m.Tensors, m.Quantization)

	m.ChatTemplate = readChatTemplate(dir)
	m.License = readLicense(dir)
	if b, err := os.ReadFile(filepath.Join(dir, "generation_config.json")); err == nil {
		_ = json.Unmarshal(b, &m.Generation)
	}
	return m, nil
}

// configView reads config.json fields, falling back to text_config.
type configView struct{ top, text map[string]any }

func (c configView) get(key string) (any, bool) {
	if v, ok := c.top[key]; ok && v != nil {
		return v, true
	}
	v, ok := c.text[key]
	return v, ok && v != nil
}

func (c configView) str(key string) string {
	v, _ := c.get(key)
	s, _ := v.(string)
	return s
}

func (c configView) firstInt(keys ...string) int {
	for _, k := range keys {
		if v, ok := c.get(k); ok {
			if f, ok := v.(float64); ok && f > 0 {
				return int(f)
			}
		}
	}
	return 0
}

// layerKinds says what each layer is: from layer_types, else full_attention_interval (Qwen3-Next style
// hybrids: every n-th layer is full attention, the rest linear attention), else sliding_window_pattern
// (Gemma 3: every n-th layer global, the rest sliding), else every layer full attention.
func layerKinds(cfg configView, n int) []string {
	if v, ok := cfg.get("layer_types"); ok {
		if list, ok := v.([]any); ok && len(list) > 0 {
			out := make([]string, len(list))
			for i, k := range list {
				out[i], _ = k.(string)
			}
			return out
		}
	}
	kinds := make([]string, n)
	interval := cfg.firstInt("full_attention_interval")
	pattern := cfg.firstInt("sliding_window_pattern")
	for i := range kinds {
		switch {
		case interval > 0 && (i+1)%interval != 0:
			kinds[i] = "linear_attention"
		case pattern > 0 && (i+1)%pattern != 0:
			kinds[i] = "sliding_attention"
		default:
			kinds[i] = "full_attention"
		}
	}
	return kinds
}

// parseQuantization reads {"group_size": 64, "bits": 4, "mode": "affine", "<module>": {...} | false}.
func parseQuantization(v any) (*Quantization, error) {
	if v == nil {
		return nil, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("quantization is %T, want an object", v)
	}
	num := func(o map[string]any, k string) int {
		f, _ := o[k].(float64)
		return int(f)
	}
	q := &Quantization{Bits: num(obj, "bits"), GroupSize: num(obj, "group_size"), Mode: "affine", Modules: map[string]ModuleQuant{}}
	if s, ok := obj["mode"].(string); ok && s != "" {
		q.Mode = s
	}
	if q.Bits <= 0 || q.GroupSize <= 0 {
		return nil, fmt.Errorf("quantization needs positive bits and group_size, got bits %d, group_size %d", q.Bits, q.GroupSize)
	}
	for k, mv := range obj {
		switch mv := mv.(type) {
		case bool:
			if !mv {
				q.Modules[k] = ModuleQuant{}
			}
		case map[string]any:
			mq := ModuleQuant{Bits: num(mv, "bits"), GroupSize: num(mv, "group_size"), Mode: q.Mode}
			if s, ok := mv["mode"].(string); ok && s != "" {
				mq.Mode = s
			}
			if mq.Bits == 0 {
				mq.Bits = q.Bits
			}
			if mq.GroupSize == 0 {
				mq.GroupSize = q.GroupSize
			}
			q.Modules[k] = mq
		}
	}
	return q, nil
}

// countParameters counts weights as the model sees them: a packed uint32 weight with scales beside it
// holds 32/bits codes per element; scales and biases are not counted. It also returns the dtype most of
// the unquantized elements have.
func countParameters(tensors []safetensors.TensorInfo, q *Quantization) (int64, string) {
	names := map[string]bool{}
	for _, t := range tensors {
		names[t.Name] = true
	}
	var total int64
	byType := map[string]int64{}
	for _, t := range tensors {
		module, leaf, _ := cutLast(t.Name, ".")
		quantized := names[module+".scales"]
		switch {
		case quantized && (leaf == "scales" || leaf == "biases"):
			byType[string(t.DType)] += t.NumElements()
			continue
		case quantized && leaf == "weight" && q != nil && t.DType == safetensors.U32:
			mq := q.For(module)
			if mq.Bits == 0 {
				mq.Bits = q.Bits
			}
			total += t.NumElements() * 32 / int64(mq.Bits)
			continue
		}
		total += t.NumElements()
		byType[string(t.DType)] += t.NumElements()
	}
	dtype, most := "", int64(-1)
	for _, d := range sortedKeys(byType) {
		if byType[d] > most && d != "U32" {
			dtype, most = d, byType[d]
		}
	}
	return total, dtype
}

func cutLast(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// readChatTemplate finds the chat template: chat_template.jinja, chat_template.json, or tokenizer_config.json
// (a string, or a list of named templates of which "default" is used).
func readChatTemplate(dir string) string {
	if b, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		return string(b)
	}
	for _, f := range []string{"chat_template.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		var v struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if json.Unmarshal(b, &v) != nil || v.ChatTemplate == nil {
			continue
		}
		var s string
		if json.Unmarshal(v.ChatTemplate, &s) == nil && s != "" {
			return s
		}
		var named []struct{ Name, Template string }
		if json.Unmarshal(v.ChatTemplate, &named) == nil {
			for _, t := range named {
				if t.Name == "default" {
					return t.Template
				}
			}
		}
	}
	return ""
}

// readLicense returns the LICENSE file (LICENSE, LICENSE.txt, LICENSE.md...), else the license: field
// of the README's YAML front matter.
func readLicense(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if strings.HasPrefix(strings.ToLower(e.Name()), "license") {
			if b, err := os.ReadFile(filepath.Join(dir, e.Name())); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if errors.Is(err, fs.ErrNotExist) || err != nil {
		return ""
	}
	text := strings.ReplaceAll(string(b), "\r\n", "\n")
	front, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return ""
	}
	front, _, _ = strings.Cut(front, "\n---")
	for _, line := range strings.Split(front, "\n") {
		if v, ok := strings.CutPrefix(line, "license:"); ok {
			return strings.Trim(strings.TrimSpace(v), `"'`)
		}
	}
	return ""
}
