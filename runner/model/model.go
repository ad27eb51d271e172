// Package model loads a checkpoint directory (config.json plus safetensors, MLX-quantized
// or bf16/fp16/fp32) onto a compute backend through the architecture its model_type
// names, and runs forward passes for the generation loop.
//
// Architectures live in their own packages (runner/llama, runner/qwen2, runner/qwen3)
// and register themselves with Register; import runner/model/all for every one.
package model

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"

	"github.com/mlxg/mlxg/internal/crew"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/residency"
)

// Network is a built architecture.
type Network interface {
	// Forward runs tokens through the network at positions caches[0].Len() onwards,
	// appending their keys and values to the per-layer caches, and returns the logits:
	// one row per token, or only the last token's row when lastOnly.
	Forward(c compute.Context, tokens []int32, caches []kvstore.Layer, lastOnly bool) compute.Tensor
}

// Builder binds an architecture's weights through a Loader.
type Builder func(l *Loader) (Network, error)

var (
	regMu    sync.Mutex
	builders = map[string]Builder{}
)

// Register makes an architecture available under a config.json model_type.
func Register(modelType string, b Builder) {
	regMu.Lock()
	defer regMu.Unlock()
	if _, dup := builders[modelType]; dup {
		panic("model: architecture registered twice: " + modelType)
	}
	builders[modelType] = b
}

// KVSourcesFunc reads from a model's config the layer whose keys and values each layer
// attends over: its own index, or an earlier layer's for a KV-shared layer.
type KVSourcesFunc func(c *Config) ([]int, error)

var kvSources = map[string]KVSourcesFunc{}

// RegisterKVSources tells, for an architecture with KV-shared layers, which layer each
// reads (as its network's KVSharer does once loaded): a pipeline reads it before any
// weight is bound, to keep each such layer on the rank of the layer it reads.
func RegisterKVSources(modelType string, f KVSourcesFunc) {
	regMu.Lock()
	defer regMu.Unlock()
	kvSources[modelType] = f
}

// KVSources is the layer whose KV each layer of the model with config c attends over;
// nil when every layer attends over its own.
func KVSources(c *Config) ([]int, error) {
	regMu.Lock()
	f := kvSources[c.ModelType]
	regMu.Unlock()
	if f == nil {
		return nil, nil
	}
	return f(c)
}

// Supported lists the registered model types, sorted.
func Supported() []string {
	regMu.Lock()
	defer regMu.Unlock()
	types := make([]string, 0, len(builders))
	for t := range builders {
		types = append(types, t)
	}
	sort.Strings(types)
	return types
}

func lookup(c *Config) (Builder, error) {
	regMu.Lock()
	b, ok := builders[c.ModelType]
	regMu.Unlock()
	if !ok {
		return nil, &UnsupportedError{ModelType: c.ModelType, Architectures: c.Architectures, Supported: Supported()}
	}
	return b, nil
}

// UnsupportedError is a checkpoint whose model_type no registered architecture has. It is
// registry.ErrUnsupported (errors.Is), which the server answers with a 400.
type UnsupportedError struct {
	ModelType     string   // the model_type Load looks up ("" when config.json names none)
	TextModelType string   // text_config's own model_type, when a multimodal wrapper's differs
	Architectures []string // config.json's architectures
	Supported     []string // the registered model types, sorted
}

func (e *UnsupportedError) Error() string {
	var about []string
	if e.TextModelType != "" && e.TextModelType != e.ModelType {
		about = append(about, fmt.Sprintf("text_config's model_type %q", e.TextModelType))
	}
	if len(e.Architectures) > 0 {
		about = append(about, "architectures "+strings.Join(e.Architectures, ", "))
	}
	what := fmt.Sprintf("model_type %q", e.ModelType)
	if e.ModelType == "" {
		what = "a config.json that names no model_type"
	}
	if len(about) > 0 {
		what += " (" + strings.Join(about, "; ") + ")"
	}
	return fmt.Sprintf("%s is not supported; supported model types: %s", what, strings.Join(e.Supported, ", "))
}

// Is makes errors.Is(err, registry.ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == registry.ErrUnsupported }

// CheckConfig reports whether the bytes of a config.json name an architecture registered here: nil, or an
// *UnsupportedError naming its model_type and listing the supported ones. It reads the model_type as Load
// does (ParseConfig): the top level's, else, for a multimodal wrapper whose language model is its
// text_config, text_config's. Pull and create ask it through registry.SetArchitectureCheck before any
// weight is downloaded or converted.
func CheckConfig(data []byte) error {
	var c struct {
		ModelType     string          `json:"model_type"`
		Architectures []string        `json:"architectures"`
		NumLayers     json.RawMessage `json:"num_hidden_layers"`
		TextConfig    *struct {
			ModelType     string   `json:"model_type"`
			Architectures []string `json:"architectures"`
		} `json:"text_config"`
	}
	if err := json.Unmarshal(data, &c); err != nil {
		return fmt.Errorf("config.json is not valid JSON: %w", err)
	}
	e := &UnsupportedError{ModelType: c.ModelType, Architectures: c.Architectures}
	if t := c.TextConfig; t != nil {
		e.TextModelType = t.ModelType
		if c.NumLayers == nil && c.ModelType == "" {
			// ParseConfig reads text_config as the model, keeping only the keys the top level sets.
			e.ModelType = t.ModelType
			if len(e.Architectures) == 0 {
				e.Architectures = t.Architectures
			}
		}
	}
	regMu.Lock()
	_, ok := builders[e.ModelType]
	regMu.Unlock()
	if ok && e.ModelType != "" {
		return nil
	}
	e.Supported = Supported()
	return e
}

// Model is a loaded checkpoint ready to run.
type Model struct {
	Config  *Config
	Dir     string
	backend compute.Backend
	ckpt    *safetensors.Checkpoint
	net     Network
	bytes   int64
	exec    Executor // a part of a split model's (LoadWith); nil for a whole model
	res     *residency.Manager
	loan    loan // SetDecodeLoan
}

// Load reads dir's config, maps its weights and binds them on backend.
func Load(dir string, backend compute.Backend) (*Model, error) {
	return load(dir, backend, nil, nil)
}

// load is Load, with the weights skip names left unbound (LoadWith), and the experts
// read through res when it is set.
func load(dir string, backend compute.Backend, skip func(*Loader, string) bool, res *residency.Manager) (*Model, error) {
	cfg, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	build, err := lookup(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	ckpt, err := safetensors.OpenDir(dir)
	if err != nil {
		return nil, err
	}
	l := &Loader{Config: cfg, Backend: backend, Dir: dir, ckpt: ckpt, src: ckpt, skip: skip}
	var ss streamSource
	if res != nil {
		// A model with no stacked experts streams its decoder layers instead.
		experts, eerr := residency.ExpertBytes(dir)
		if eerr != nil {
			ckpt.Close()
			return nil, eerr
		}
		ss = streamSource{ckpt, res, experts == 0}
		l.src = ss
	}
	net, err := build(l)
	if err == nil {
		err = l.err
	}
	if f, ok := backend.(compute.StreamFinisher); ok && err == nil && res != nil {
		err = f.FinishStream(ss)
	}
	if err != nil {
		ckpt.Close()
		if res != nil {
			forgetStream(backend, res)
		}
		return nil, fmt.Errorf("loading %s (%s): %w", dir, cfg.ModelType, err)
	}
	m := &Model{Config: cfg, Dir: dir, backend: backend, ckpt: ckpt, net: net, bytes: boundBytes(l, skip), res: res}
	if res != nil && res.Stats().Units == 0 {
		// Nothing to stream (no quantized matrices, or a backend that maps every
		// weight): the model runs from the mapping.
		forgetStream(backend, res)
		res.Close()
		m.res = nil
	} else if res != nil {
		// What the backend did not bind to units is read through the mapping on every
		// pass: it counts against the budget first.
		res.Pin(m.bytes - res.Stats().Streamed)
	}
	return m, nil
}

// streamSource is a checkpoint whose experts, or a dense model's layers, a backend may
// read through a residency manager (compute.StreamSource, compute.LayerStreamSource).
type streamSource struct {
	*safetensors.Checkpoint
	res    *residency.Manager
	layers bool // a dense model: its decoder layers stream (compute.LayerStreamSource)
}

func (s streamSource) Residency() *residency.Manager { return s.res }
func (s streamSource) StreamsLayers() bool           { return s.layers }

func forgetStream(b compute.Backend, res *residency.Manager) {
	if f, ok := b.(interface{ ForgetStream(*residency.Manager) }); ok {
		f.ForgetStream(res)
	}
}

// Residency is the manager the model streams its experts through, nil when its
// weights are all mapped.
func (m *Model) Residency() *residency.Manager { return m.res }

// WeightBytes is the size of the checkpoint's tensors on disk (those bound here, for a
// part of a split model).
func (m *Model) WeightBytes() int64 { return m.bytes }

// Backend returns the backend the model runs on.
func (m *Model) Backend() compute.Backend { return m.backend }

// NewCaches returns empty caches, one per layer, fp16 unless fp32: full attention,
// or the kinds a CacheMaker network asks for.
func (m *Model) NewCaches(fp32 bool) ([]kvstore.Layer, error) {
	if cm, ok := m.net.(CacheMaker); ok {
		return cm.NewCaches(fp32)
	}
	caches := make([]kvstore.Layer, m.Config.NumLayers)
	for i := range caches {
		c, err := kvstore.NewFull(m.Config.NumKVHeads, m.Config.HeadDim, m.Config.HeadDim, fp32)
		if err != nil {
			return nil, err
		}
		caches[i] = c
	}
	return caches, nil
}

// Forward runs tokens (at positions caches[0].Len() onwards) and returns the logits,
// vocab-sized rows: every position when all, else the last only. On error or
// cancellation the caches are truncated back to where they were.
func (m *Model) Forward(ctx context.Context, tokens []int32, caches []kvstore.Layer, all bool) ([]float32, error) {
	if m.exec != nil {
		return m.exec.Forward(ctx, tokens, caches, all)
	}
	return m.forward(ctx, tokens, caches, all, false)
}

// ForwardRows runs tokens and returns every position's logits, each row computed as a
// pass of that one token at its position computes it, on a backend whose arithmetic
// depends on a pass's row count (the CPU backend, bit for bit; MLX within its batching
// tolerance): products per row (compute.BatchContext.Segments of one row each) and
// attention per row (kvstore.SetExactRows). Speculative decoding verifies drafted tokens
// with it, so that what it keeps is what decoding one token at a time gives. A model split
// over machines has none (Verifies).
func (m *Model) ForwardRows(ctx context.Context, tokens []int32, caches []kvstore.Layer) ([]float32, error) {
	if m.exec != nil {
		return nil, fmt.Errorf("model: a model split over machines runs no verification passes")
	}
	return m.forward(ctx, tokens, caches, true, len(tokens) > 1)
}

// Verifies reports whether ForwardRows runs: not on a model split over machines.
func (m *Model) Verifies() bool { return m.exec == nil }

func (m *Model) forward(ctx context.Context, tokens []int32, caches []kvstore.Layer, all, exact bool) ([]float32, error) {
	if len(tokens) == 0 {
		return nil, fmt.Errorf("model: Forward with no tokens")
	}
	defer m.pass(len(tokens))()
	if len(caches) != m.Config.NumLayers {
		return nil, fmt.Errorf("model: %d layer caches for a model of %d layers", len(caches), m.Config.NumLayers)
	}
	if err := m.PrepareCaches(caches); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	start := caches[0].Len()
	if err := checkIDs(tokens, caches, m.Config.VocabSize); err != nil {
		return nil, err
	}
	c := m.backend.NewContext()
	defer c.Close()
	if exact {
		if vc, ok := compute.Ext[compute.VerifyContext](c); ok {
			vc.VerifyRows(len(tokens))
		} else if bc, ok := compute.Ext[compute.BatchContext](c); ok {
			ones := make([]int, len(tokens))
			for i := range ones {
				ones[i] = 1
			}
			bc.Segments(ones)
		}
		kvstore.SetExactRows(caches, true)
		defer kvstore.SetExactRows(caches, false)
	}
	logits, err := c.Float32s(m.net.Forward(&cancellable{Context: c, ctx: ctx}, tokens, caches, !all))
	if ctx.Err() != nil {
		err = ctx.Err() // whatever the stopped ops reported
	}
	if err != nil {
		for _, l := range caches {
			if l.Len() > start {
				l.Truncate(start)
			}
		}
		return nil, err
	}
	return logits, nil
}

// Recycle hands logits that Forward returned back to the backend once the caller is done
// with them, for a later Forward to reuse (the CPU backend's Float32s draws from a pool),
// so that decoding does not allocate a vocabulary-sized slice per token. Only a whole
// Forward result may be given, once; a backend without such a pool ignores it.
func (m *Model) Recycle(logits []float32) {
	if r, ok := m.backend.(interface{ Recycle([]float32) }); ok && m.exec == nil {
		r.Recycle(logits)
	}
}

// cancellable stops a forward pass once ctx is done: the attention op, once per layer,
// checks it and then returns a tensor no backend accepts, so every later op is skipped
// (the backend records an error, which Forward replaces with ctx.Err()).
type cancellable struct {
	compute.Context
	ctx context.Context
}

type stopped struct{}

func (stopped) Dims() (int, int) { return 0, 0 }

func (c *cancellable) Free(keep ...compute.Tensor) { compute.Free(c.Context, keep...) }

func (c *cancellable) Attention(q, k, v compute.Tensor, cache kvstore.Layer, heads int, scale float32) compute.Tensor {
	if c.ctx.Err() != nil {
		return stopped{}
	}
	return c.Context.Attention(q, k, v, cache, heads, scale)
}

// Close releases the weights' mappings.
func (m *Model) Close() error {
	if m.exec != nil {
		m.exec.Close()
	}
	crew.StopWarm() // no worker may read the weights' mapping after it is gone
	if m.res != nil {
		m.endLoan()
		forgetStream(m.backend, m.res)
		m.res.Close()
	}
	return m.ckpt.Close()
}

// Loader binds weights for an architecture's Builder. Errors are sticky: after the
// first, binders return nil and Load reports it, so a builder reads like the model's
// definition without error checks on every line.
type Loader struct {
	Config  *Config
	Backend compute.Backend
	Dir     string // the checkpoint's folder (its preprocessor_config.json, say)
	ckpt    *safetensors.Checkpoint
	src     compute.Source // ckpt, or ckpt with a residency manager
	err     error
	skip    func(l *Loader, name string) bool // weights another process binds (LoadConfig.Unbound)
}

// Err returns the first binding error.
func (l *Loader) Err() error { return l.err }

// Has reports whether the checkpoint holds a tensor.
func (l *Loader) Has(name string) bool { _, ok := l.ckpt.Tensor(name); return ok }

// Fail records an error found by a builder (the first one wins).
func (l *Loader) Fail(err error) {
	if l.err == nil {
		l.err = err
	}
}

// Linear binds prefix.weight (quantized as config.json says) as an out × in matrix.
func (l *Loader) Linear(prefix string, out, in int) compute.Weight {
	if l.err != nil {
		return nil
	}
	if l.skip != nil && l.skip(l, prefix+".weight") {
		return &Unbound{Out: out, In: in, Q: l.Config.Quantization.For(prefix, l.Has)}
	}
	w, err := l.Backend.Weight(l.src, prefix, l.Config.Quantization.For(prefix, l.Has))
	if err != nil {
		l.Fail(err)
		return nil
	}
	if o, i := w.Dims(); o != out || i != in {
		l.Fail(fmt.Errorf("%s.weight is %d×%d, the config implies %d×%d", prefix, o, i, out, in))
		return nil
	}
	return w
}

// LinearRows binds rows start .. start+n-1 of the matrix prefix.weight (with the same
// rows of its scales, biases and bias) as an n × in matrix named prefix+"#"+part: one
// part of a fused projection (Phi-3's qkv_proj and gate_up_proj), so that each part is
// an ordinary weight (decode steps still read the parts together: compute.Linears).
// Rows are independent in every storage format, quantization groups running along the
// input, so a part is its rows' bytes where they lie. The parts are bound from the
// mapping, not through a residency manager: a streamed model keeps them resident.
func (l *Loader) LinearRows(prefix, part string, start, n, in int) compute.Weight {
	if l.err != nil {
		return nil
	}
	q := l.Config.Quantization.For(prefix, l.Has)
	if l.skip != nil && l.skip(l, prefix+".weight") {
		return &Unbound{Out: n, In: in, Q: q}
	}
	t, ok := l.ckpt.Tensor(prefix + ".weight")
	if !ok {
		l.Fail(fmt.Errorf("checkpoint has no tensor %q", prefix+".weight"))
		return nil
	}
	if len(t.Shape) != 2 || start < 0 || n <= 0 || start+n > t.Shape[0] {
		l.Fail(fmt.Errorf("%s.weight has shape %v: it has no rows %d to %d", prefix, t.Shape, start, start+n-1))
		return nil
	}
	name := prefix + "#" + part
	w, err := l.Backend.Weight(rowSource{Source: l.ckpt, from: prefix, as: name, start: start, n: n}, name, q)
	if err != nil {
		l.Fail(err)
		return nil
	}
	if o, i := w.Dims(); o != n || i != in {
		l.Fail(fmt.Errorf("%s.weight rows %d to %d are %d×%d, the config implies %d×%d", prefix, start, start+n-1, o, i, n, in))
		return nil
	}
	return w
}

// rowSource serves the tensors of as (as.weight, as.scales, ...) as rows start ..
// start+n-1 of from's.
type rowSource struct {
	compute.Source
	from, as string
	start, n int
}

// MappedSource tells a backend that the tensors it serves lie in the checkpoint's
// mapping (the MLX backend then wraps their pages rather than copying them).
func (s rowSource) MappedSource() bool { return true }

func (s rowSource) Tensor(name string) (*safetensors.Tensor, bool) {
	suffix, ok := strings.CutPrefix(name, s.as)
	if !ok {
		return s.Source.Tensor(name)
	}
	t, ok := s.Source.Tensor(s.from + suffix)
	if !ok || len(t.Shape) == 0 || t.Shape[0] < s.start+s.n {
		return nil, false
	}
	row := len(t.Data) / t.Shape[0]
	c := *t
	c.Name = name
	c.Shape = append([]int{s.n}, t.Shape[1:]...)
	c.Data = t.Data[s.start*row : (s.start+s.n)*row : (s.start+s.n)*row]
	c.Begin += int64(s.start * row)
	c.End = c.Begin + int64(len(c.Data))
	return &c, true
}

// Vector binds a 1-D weight of n values.
func (l *Loader) Vector(name string, n int) compute.Vector {
	if l.err != nil {
		return nil
	}
	if l.skip != nil && l.skip(l, name) {
		return &Unbound{Out: n}
	}
	v, err := l.Backend.Vector(l.src, name)
	if err != nil {
		l.Fail(err)
		return nil
	}
	if v.Len() != n {
		l.Fail(fmt.Errorf("%s has %d values, the config implies %d", name, v.Len(), n))
		return nil
	}
	return v
}

// Tensor is the checkpoint's tensor name as it is stored, for an architecture that
// derives a weight from it at load (the weight then bound from a compute.Source of its
// own through Backend).
func (l *Loader) Tensor(name string) (*safetensors.Tensor, bool) { return l.ckpt.Tensor(name) }

// Floats reads the 1-D tensor name (n values) as float32 on the host, for a value the
// architecture uses outside the backend's ops: a scalar such as Gemma 4's layer_scalar,
// a router's correction bias or per-expert scales. A weight another process binds (a
// part of a split model) reads as ones: this process never runs the layer it belongs to.
func (l *Loader) Floats(name string, n int) []float32 {
	if l.err != nil {
		return nil
	}
	if l.skip != nil && l.skip(l, name) {
		out := make([]float32, n)
		for i := range out {
			out[i] = 1
		}
		return out
	}
	t, err := compute.VectorTensor(l.src, name)
	if err != nil {
		l.Fail(err)
		return nil
	}
	v, err := t.Float32s()
	if err != nil {
		l.Fail(fmt.Errorf("%s: %w", name, err))
		return nil
	}
	if len(v) != n {
		l.Fail(fmt.Errorf("%s has %d values, the config implies %d", name, len(v), n))
		return nil
	}
	return v
}

// Ones binds a vector of n ones, for a norm without a learned scale (Gemma 4's value
// norm and router norm), which RMSNorm then computes exactly.
func (l *Loader) Ones(n int) compute.Vector {
	if l.err != nil {
		return nil
	}
	data := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(1))
	}
	name := fmt.Sprintf("ones.%d", n)
	t := &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.F32, Shape: []int{n}}, Data: data}
	v, err := l.Backend.Vector(oneTensor{t}, name)
	if err != nil {
		l.Fail(err)
		return nil
	}
	return v
}

// oneTensor is a Source of one tensor made in memory.
type oneTensor struct{ t *safetensors.Tensor }

func (o oneTensor) Tensor(name string) (*safetensors.Tensor, bool) {
	return o.t, name == o.t.Name
}

// Head binds the output projection: lm_head, or the embedding table when the
// embeddings are tied (tie_word_embeddings, or no lm_head.weight when config.json is
// silent, as mlx-lm saves tied models).
func (l *Loader) Head(embed compute.Weight, out, in int) compute.Weight {
	return l.HeadAt("lm_head", embed, out, in)
}

// HeadAt is Head for a checkpoint whose output projection is name (a multimodal
// checkpoint's language_model.lm_head, say).
func (l *Loader) HeadAt(name string, embed compute.Weight, out, in int) compute.Weight {
	tied := !l.Has(name + ".weight")
	if t := l.Config.TieWordEmbeddings; t != nil {
		tied = *t
		if !tied && !l.Has(name+".weight") {
			l.Fail(fmt.Errorf("tie_word_embeddings is false but the checkpoint has no %s.weight", name))
			return nil
		}
	}
	if tied {
		return embed
	}
	return l.Linear(name, out, in)
}
