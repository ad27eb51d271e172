package pipeline

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
)

// A stage runs the network's ordinary Forward in a stage context that wraps the
// backend's, so that no architecture needs code of its own for the pipeline: an op on
// an unbound weight (model.Unbound), or on a tensor derived from one, is not run but
// yields a void tensor of the right dims. Where the residual stream, real, first meets
// an unbound weight (entering the first layer past this rank's range), the stage sends
// it on; where the stream, void, first meets a real weight (entering this rank's first
// layer), the stage receives it from the rank before. Every layer's arithmetic is then
// the single-process arithmetic on the same float32 values, which is why a pipeline's
// logits equal one process's.
//
// The stage knows the stream by where it comes from, never by its width: it is the
// pass's first embedding (the token embeddings every architecture starts from), or
// what the network marks as such (compute.StreamContext: the rows model.Batch.EmbedWith
// puts together, image features among them), and whatever the weightless ops (the residual adds, a layer's scale, the rows of the
// last positions) make of it; an op with a weight (a norm, a projection) starts a
// branch, not the stream. A weight every rank holds (Gemma 4's unit value norm, which
// no checkpoint stores) then meets, inside another rank's layer, a void branch and is
// skipped, however wide that branch is.

// Stage is the part of a model one rank of a pipeline runs: layers [Lo, Hi).
type Stage struct {
	Rank, Size int
	Lo, Hi     int
}

// First reports whether the stage embeds the tokens (rank 0).
func (s Stage) First() bool { return s.Rank == 0 }

// Last reports whether the stage applies the head (the last rank).
func (s Stage) Last() bool { return s.Rank == s.Size-1 }

func (s Stage) String() string {
	if s.Hi == s.Lo {
		return fmt.Sprintf("rank %d/%d: the head only", s.Rank, s.Size)
	}
	return fmt.Sprintf("rank %d/%d: layers %d-%d", s.Rank, s.Size, s.Lo, s.Hi-1)
}

// Split divides layers into size contiguous stages, as even as they go (the first ranks
// take one more when they do not divide). With one layer fewer than ranks, the last
// rank holds only the final norm and the head.
func Split(layers, size int) ([]Stage, error) {
	if size < 1 || layers < size-1 || layers < 1 {
		return nil, fmt.Errorf("model: %d layers cannot be split over %d ranks", layers, size)
	}
	out := make([]Stage, size)
	lo := 0
	for r := range out {
		n := layers / size
		if r < layers%size {
			n++
		}
		if layers == size-1 {
			n = 1
			if r == size-1 {
				n = 0
			}
		}
		out[r] = Stage{Rank: r, Size: size, Lo: lo, Hi: lo + n}
		lo += n
	}
	return out, nil
}

// SplitShared is Split for a model whose layer i attends over the keys and values of
// layer sources[i] (its own index, or an earlier layer's: Gemma 4's KV-shared layers).
// A rank keeps only its own layers' KV, so no cut falls between a layer and the layer
// whose KV it reads; each cut goes as near Split's as that allows, and the last rank
// may be left the head only. A model that leaves too few places to cut for size ranks
// is refused (SplitError).
func SplitShared(layers, size int, sources []int) ([]Stage, error) {
	even, err := Split(layers, size)
	if err != nil || sources == nil {
		return even, err
	}
	if len(sources) != layers {
		return nil, fmt.Errorf("model: KV sources of %d layers for a model of %d", len(sources), layers)
	}
	// cuts are the places a stage may begin: before layer b when no layer from b on
	// reads the KV of a layer before b, and past the last layer (a last rank holding
	// the head only).
	var cuts []int
	low := layers // the least source of the layers from b on
	for b := layers - 1; b >= 1; b-- {
		if sources[b] < 0 || sources[b] > b {
			return nil, fmt.Errorf("model: layer %d reads the KV of layer %d", b, sources[b])
		}
		low = min(low, sources[b])
		if low >= b {
			cuts = append(cuts, b)
		}
	}
	slices.Reverse(cuts)
	cuts = append(cuts, layers)
	out := make([]Stage, size)
	lo, prev := 0, -1
	for r := range size - 1 {
		// The cut after rank r: nearest Split's, leaving a cut for each rank after it;
		// only the last may leave its rank the head only.
		best := -1
		for j := prev + 1; j <= len(cuts)-(size-1-r); j++ {
			if j == len(cuts) || cuts[j] == layers && r < size-2 {
				break
			}
			if best < 0 || abs(cuts[j]-even[r].Hi) < abs(cuts[best]-even[r].Hi) {
				best = j
			}
		}
		if best < 0 {
			return nil, &SplitError{Err: fmt.Errorf("model: %d layers cannot be split over %d ranks: a layer that reads another layer's KV runs on that layer's rank, which leaves %d places to cut", layers, size, len(cuts))}
		}
		out[r] = Stage{Rank: r, Size: size, Lo: lo, Hi: cuts[best]}
		lo, prev = cuts[best], best
	}
	out[size-1] = Stage{Rank: size - 1, Size: size, Lo: lo, Hi: layers}
	return out, nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// SplitModel splits the model whose config is cfg over size ranks: SplitShared with the
// KV sources its architecture registered (model.RegisterKVSources).
func SplitModel(cfg *model.Config, size int) ([]Stage, error) {
	sources, err := model.KVSources(cfg)
	if err != nil {
		return nil, err
	}
	return SplitShared(cfg.NumLayers, size, sources)
}

// Comm is what a backend's context offers for a pipeline (metal's contexts, over an MLX
// distributed group): float32 activations to and from the neighbouring ranks, as ops of
// the pass, performed when it is evaluated.
type Comm interface {
	// Send returns x, sent to rank dst once evaluated.
	Send(x compute.Tensor, dst int) compute.Tensor
	// Recv is a rows × cols tensor received from rank src.
	Recv(rows, cols, src int) compute.Tensor
	// Zeros is a rows × cols tensor of zeros (what a rank that could not run its pass
	// sends, so that the others are not left waiting).
	Zeros(rows, cols int) compute.Tensor
}

// isStub reports whether w is a weight of another rank's layers: dims only.
func isStub(w any) bool { _, ok := w.(*model.Unbound); return ok }

var layerIndex = regexp.MustCompile(`(?:^|\.)layers\.(\d+)\.`)

// holds reports whether the stage binds the weight name: its own layers' weights; the
// embeddings on rank 0 (and on the last rank when the head is tied to them); the final
// norm and the head on the last rank; any other weight everywhere.
func (s Stage) holds(l *model.Loader, name string) bool {
	if isVision(l, name) {
		// The vision tower and its projector: rank 0, which embeds, encodes the images.
		return s.First()
	}
	if m := layerIndex.FindStringSubmatch(name); m != nil {
		i, _ := strconv.Atoi(m[1])
		return i >= s.Lo && i < s.Hi
	}
	switch {
	case strings.Contains(name, "embed_tokens."):
		tied := !l.Has("lm_head.weight")
		if t := l.Config.TieWordEmbeddings; t != nil {
			tied = *t
		}
		return s.First() || s.Last() && tied
	case strings.HasPrefix(name, "lm_head.") || strings.HasSuffix(name, "model.norm.weight"):
		return s.Last()
	case strings.Contains(name, "per_layer_model_projection.") || strings.Contains(name, "embed_tokens_per_layer") ||
		strings.Contains(name, "per_layer_projection_norm."):
		// Gemma 4's per-layer inputs, computed on rank 0 from the tokens and their
		// embeddings and carried on with the stream (CarryContext).
		return s.First()
	}
	return true
}

// isVision reports whether name is a weight of the model's vision tower or of the
// projector that maps its features to the language model's embeddings.
func isVision(l *model.Loader, name string) bool {
	if p := model.VisionPrefix(l.Config.ModelType); p != "" && strings.HasPrefix(name, p) {
		return true
	}
	for _, p := range []string{"vision_tower.", "multi_modal_projector.", "embed_vision."} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// carrier is a network that hands the later ranks more than the residual stream: a
// tensor of CarriedCols columns per row, computed on rank 0 (compute.CarryContext).
type carrier interface {
	CarriedCols() int
}

// carriedCols is what m's network carries beside the stream; 0: nothing.
func carriedCols(m *model.Model) int {
	if c, ok := m.Network().(carrier); ok {
		return c.CarriedCols()
	}
	return 0
}

// checkSources refuses a stage holding a layer whose KV source another rank holds
// (SplitShared keeps them together).
func (s Stage) checkSources(m *model.Model) error {
	ks, ok := m.Network().(model.KVSharer)
	if !ok {
		return nil
	}
	for i := s.Lo; i < s.Hi; i++ {
		if src := ks.KVSource(i); src < s.Lo || src > i {
			return &SplitError{Err: fmt.Errorf("model: %v holds layer %d, which reads the KV of layer %d on another rank", s, i, src)}
		}
	}
	return nil
}

// SplitError is the refusal of a model that cannot run split over the ranks (too many
// ranks for the places its KV-shared layers leave to cut). A request naming it must name another model, as one naming an
// architecture mlxg does not run: errors.Is(err, registry.ErrUnsupported) holds, which
// the server answers with a 400 and the reason.
type SplitError struct{ Err error }

func (e *SplitError) Error() string {
	return e.Err.Error() + " (this server splits every model it loads over its ranks)"
}

func (e *SplitError) Unwrap() error { return e.Err }

// Is makes errors.Is(err, registry.ErrUnsupported) true.
func (e *SplitError) Is(target error) bool { return target == registry.ErrUnsupported }

// LoadStage is model.Load for one stage of a pipeline: only the stage's weights are
// bound (and, on the MLX backends, read from the mapped checkpoint), and the model's
// passes run as that stage's. Leader.Load and the workers attach it to the pipeline.
func LoadStage(dir string, backend compute.Backend, s Stage) (*model.Model, error) {
	if s.Size < 1 || s.Rank < 0 || s.Rank >= s.Size || s.Lo < 0 || s.Hi < s.Lo || s.Hi == s.Lo && !s.Last() {
		return nil, fmt.Errorf("model: bad pipeline stage %+v", s)
	}
	return model.LoadWith(dir, backend, model.LoadConfig{
		Unbound: func(l *model.Loader, name string) bool { return !s.holds(l, name) },
		Executor: func(m *model.Model) (model.Executor, error) {
			if s.Hi > m.Config.NumLayers {
				return nil, fmt.Errorf("model: stage %v of a model of %d layers", s, m.Config.NumLayers)
			}
			if err := s.checkSources(m); err != nil {
				return nil, err
			}
			return &stageModel{Model: m, stage: s}, nil
		},
	})
}

// stageModel is a model loaded as one stage (LoadStage), and its executor: its methods
// stand in for the Model's, running rank 0's passes over the pipeline (pipeline.go).
type stageModel struct {
	*model.Model
	stage Stage
	pipe  *pipe // its link to the pipeline, once the leader or a worker attached it
}

// stageOf is m's stage, nil for a model not loaded by LoadStage.
func stageOf(m *model.Model) *stageModel {
	sm, _ := m.Executor().(*stageModel)
	return sm
}

// StageOf returns the pipeline stage m was loaded as; false for a whole model.
func StageOf(m *model.Model) (Stage, bool) {
	if sm := stageOf(m); sm != nil {
		return sm.stage, true
	}
	return Stage{}, false
}

// skipped is the cache of a layer another rank runs: it only counts positions, so that
// the architectures read the sequence's offset from any layer's cache, as they do.
type skipped struct {
	n      int
	window int
}

func (s *skipped) Dims() (int, int, int)              { return 0, 0, 0 }
func (s *skipped) Len() int                           { return s.n }
func (s *skipped) Append(_, _ []float32, n int) error { s.n += n; return nil }
func (s *skipped) Attend(kvstore.Attention) error {
	return fmt.Errorf("model: attention over the cache of a layer another rank runs")
}
func (s *skipped) Truncate(n int) error {
	if n < 0 || n > s.n {
		return fmt.Errorf("model: truncating %d positions to %d", s.n, n)
	}
	s.n = n
	return nil
}
func (s *skipped) Bytes() int64 { return 0 }

// Window implements the sliding-window check of Gemma's layers: a skipped layer takes
// any window.
func (s *skipped) Window() int { return s.window }

// Elsewhere marks the cache of a layer another rank runs (model.Batch.CheckWindow).
func (s *skipped) Elsewhere() bool { return true }

// stageCaches replaces, in place, the caches of the layers outside the stage with
// position counters, keeping the recurrent states of linear-attention layers (their
// architectures require the kind; the ops that would use them are skipped).
func (m *stageModel) stageCaches(caches []kvstore.Layer) error {
	if err := m.FillCaches(caches); err != nil {
		return err
	}
	source := func(i int) int { return i }
	if ks, ok := m.Network().(model.KVSharer); ok {
		source = ks.KVSource
	}
	n := caches[0].Len()
	for i, c := range caches {
		own := i >= m.stage.Lo && i < m.stage.Hi
		if src := source(i); src != i {
			// A KV-shared layer reads its source's cache in this list: the stage's own
			// (the model links none for a stage, and a worker may have made the
			// sources anew as rank 0 described them), or another rank's position
			// counter, which then counts for it too.
			if sh, ok := c.(*kvstore.Shared); ok && sh.Source() == caches[src] {
				continue
			}
			sh, err := kvstore.NewShared(caches[src])
			if err != nil {
				return fmt.Errorf("model: layer %d reads layer %d's KV: %w", i, src, err)
			}
			caches[i] = sh
			continue
		}
		if own {
			continue
		}
		if _, ok := c.(model.RecurrentLayer); ok {
			continue
		}
		if _, ok := c.(*skipped); !ok {
			caches[i] = &skipped{n: n, window: 1 << 30}
		}
	}
	return nil
}

// stageContext runs a network's Forward as one stage of the pipeline (see above).
type stageContext struct {
	inner      compute.Context
	comm       Comm
	st         Stage
	err        error
	entered    bool     // the residual stream came in from the rank before
	sent       *sTensor // what this rank sent on to the next, once it has
	hidden     bool     // the pass wants the head's input, not the logits (HiddenSink)
	vocab      int
	hiddenSize int
	layers     int      // the model's
	headIn     *sTensor // the last rank: the input of the head (the Linear with vocab outputs)
	carried    *sTensor // what the network carries beside the stream (Carry), once it has
	embedded   bool     // the pass's first embedding, the stream's start, was made
}

// sTensor is a tensor of a stage pass: the inner context's, or void (not computed here).
type sTensor struct {
	t          compute.Tensor
	void       bool
	rows, cols int
	stream     bool // the residual stream (see above)
}

func (t *sTensor) Dims() (int, int) {
	if t.void {
		return t.rows, t.cols
	}
	return t.t.Dims()
}

func (c *stageContext) void(rows, cols int) compute.Tensor {
	return &sTensor{void: true, rows: rows, cols: cols}
}

func (c *stageContext) real(t compute.Tensor) compute.Tensor {
	r, k := t.Dims()
	return &sTensor{t: t, rows: r, cols: k}
}

func (c *stageContext) fail(err error) compute.Tensor {
	if c.err == nil {
		c.err = err
	}
	return compute.Fail(c.inner, err)
}

// tensors unwraps ts: the inner tensors, and whether any is void.
func (c *stageContext) tensors(ts ...compute.Tensor) ([]compute.Tensor, bool) {
	out := make([]compute.Tensor, len(ts))
	void := false
	for i, t := range ts {
		st, ok := t.(*sTensor)
		if !ok {
			out[i] = t // a failed tensor from the inner context: pass it on
			continue
		}
		if st.void {
			void = true
		}
		out[i] = st.t
	}
	return out, void
}

// withWeights decides an op on tensors xs and weights ws: run (the inner tensors) or
// skip. A stub weight skips it, after sending the residual stream on if it is real and
// was not sent yet (the stream leaving this rank's layers). Real weights on the void
// stream receive it from the rank before, once (the stream entering this rank's
// layers). Any other void input skips the op: a weight every rank holds (Gemma 4's
// unit value norm) meets, inside another rank's layer, that layer's heads.
func (c *stageContext) withWeights(xs []compute.Tensor, ws ...any) ([]compute.Tensor, bool) {
	stubbed := false
	for _, w := range ws {
		if w != nil && isStub(w) {
			stubbed = true
		}
	}
	if stubbed {
		for _, x := range xs {
			if st, ok := x.(*sTensor); ok && st.stream && !st.void && c.sent == nil && !c.st.Last() {
				out := st.t
				if k := c.carryCols(); k > 0 && !c.carried.void && c.st.Hi < c.layers {
					// The next rank runs layers: it reads the carried tensor too, which
					// goes in the same transfer, beside the stream.
					out = c.concat(st.t, c.carried.t)
				}
				c.sent = &sTensor{t: c.comm.Send(out, c.st.Rank+1), rows: st.rows, cols: st.cols, stream: true}
			}
		}
		return nil, false
	}
	for _, x := range xs {
		st, ok := x.(*sTensor)
		if !ok || !st.void {
			continue
		}
		if !st.stream || c.entered || c.sent != nil || c.st.First() {
			return nil, false // a branch of another rank's layer, or past this rank's layers (the head of another rank, say)
		}
		if st.cols != c.hiddenSize {
			c.fail(fmt.Errorf("model: %v: the residual stream is %d wide, the model's hidden size %d", c.st, st.cols, c.hiddenSize))
			return nil, false
		}
		if k := c.carryCols(); k > 0 && c.st.Lo < c.layers {
			both := c.comm.Recv(st.rows, st.cols+k, c.st.Rank-1)
			st.t = c.cols(both, 0, st.cols)
			c.carried.t, c.carried.void = c.cols(both, st.cols, k), false
		} else {
			st.t = c.comm.Recv(st.rows, st.cols, c.st.Rank-1)
		}
		st.void = false
		c.entered = true
	}
	in, void := c.tensors(xs...)
	return in, !void
}

// carryCols is the width of what the network carries beside the stream; 0: nothing.
func (c *stageContext) carryCols() int {
	if c.carried == nil {
		return 0
	}
	return c.carried.cols
}

// Carry implements compute.CarryContext: t crosses between the ranks with the stream
// (withWeights) to those that run layers.
func (c *stageContext) Carry(t compute.Tensor) compute.Tensor {
	if st, ok := t.(*sTensor); ok {
		if st.stream {
			return c.fail(fmt.Errorf("model: %v: the network carries the residual stream beside itself", c.st))
		}
		c.carried = st
	}
	return t
}

func (c *stageContext) concat(a, b compute.Tensor) compute.Tensor {
	l, ok := c.lin()
	if !ok {
		return compute.Unsupported(c.inner, "ConcatCols")
	}
	return l.ConcatCols(a, b)
}

func (c *stageContext) cols(x compute.Tensor, start, n int) compute.Tensor {
	l, ok := c.lin()
	if !ok {
		return compute.Unsupported(c.inner, "Cols")
	}
	return l.Cols(x, start, n)
}

// Stream implements compute.StreamContext: t is the residual stream as the layers
// first read it (model.Batch.EmbedWith's rows, which may be image features only).
func (c *stageContext) Stream(t compute.Tensor) compute.Tensor {
	if st, ok := t.(*sTensor); ok {
		st.stream = true
	}
	return t
}

// Embed makes the residual stream on its first call of the pass (every architecture
// embeds the tokens first; a later embedding, Gemma 4's per-layer one, is a branch).
func (c *stageContext) Embed(w compute.Weight, ids []int32) compute.Tensor {
	_, in := w.Dims()
	var out compute.Tensor
	if !c.st.First() || isStub(w) {
		out = c.void(len(ids), in)
	} else {
		out = c.real(c.inner.Embed(w, ids))
	}
	if st, ok := out.(*sTensor); ok && !c.embedded {
		st.stream = true
	}
	c.embedded = true
	return out
}

func (c *stageContext) Linear(x compute.Tensor, w compute.Weight) compute.Tensor {
	rows, _ := x.Dims()
	out, _ := w.Dims()
	in, ok := c.withWeights([]compute.Tensor{x}, w)
	if !ok {
		return c.void(rows, out)
	}
	if st, isS := x.(*sTensor); isS && out == c.vocab && c.st.Last() {
		c.headIn = st
	}
	return c.real(c.inner.Linear(in[0], w))
}

func (c *stageContext) RMSNorm(x compute.Tensor, w compute.Vector, eps float32) compute.Tensor {
	rows, cols := x.Dims()
	in, ok := c.withWeights([]compute.Tensor{x}, w)
	if !ok {
		return c.void(rows, cols)
	}
	return c.real(c.inner.RMSNorm(in[0], w, eps))
}

// plain runs a weightless op, or yields a void rows × cols when an input is void. What
// it makes of the residual stream is the stream: the residual adds, a layer's scale,
// the rows of the last positions.
func (c *stageContext) plain(rows, cols int, op func(in []compute.Tensor) compute.Tensor, xs ...compute.Tensor) compute.Tensor {
	in, void := c.tensors(xs...)
	var out compute.Tensor
	if void {
		out = c.void(rows, cols)
	} else {
		out = c.real(op(in))
	}
	for _, x := range xs {
		if st, ok := x.(*sTensor); ok && st.stream {
			out.(*sTensor).stream = true
		}
	}
	return out
}

func (c *stageContext) Reshape(x compute.Tensor, rows, cols int) compute.Tensor {
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor { return c.inner.Reshape(in[0], rows, cols) }, x)
}

func (c *stageContext) RoPE(x compute.Tensor, r *compute.RoPE, headDim, offset int) compute.Tensor {
	rows, cols := x.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor { return c.inner.RoPE(in[0], r, headDim, offset) }, x)
}

func (c *stageContext) Attention(q, k, v compute.Tensor, cache kvstore.Layer, heads int, scale float32) compute.Tensor {
	return c.attend(q, k, v, cache, func(in []compute.Tensor) compute.Tensor {
		return c.inner.Attention(in[0], in[1], in[2], cache, heads, scale)
	})
}

// attend runs an attention over cache through run: skipped on a layer another rank holds
// (counting the rows its skipped cache would have taken, and giving the void output
// rows × heads·vHeadDim), run on the inner context's tensors on this rank's.
func (c *stageContext) attend(q, k, v compute.Tensor, cache kvstore.Layer, run func(in []compute.Tensor) compute.Tensor) compute.Tensor {
	rows, qc := q.Dims()
	_, kc := k.Dims()
	_, vc := v.Dims()
	cols := qc
	if kc > 0 {
		cols = qc / kc * vc
	}
	in, void := c.tensors(q, k, v)
	if void {
		if s, ok := cache.(*skipped); ok {
			s.n += rows
		}
		return c.void(rows, cols)
	}
	if _, ok := cache.(*skipped); ok {
		return c.fail(fmt.Errorf("model: %v computed a layer it does not hold", c.st))
	}
	return c.real(run(in))
}

func (c *stageContext) SwiGLU(gate, up compute.Tensor) compute.Tensor {
	rows, cols := gate.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor { return c.inner.SwiGLU(in[0], in[1]) }, gate, up)
}

func (c *stageContext) Add(a, b compute.Tensor) compute.Tensor {
	rows, cols := a.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor { return c.inner.Add(in[0], in[1]) }, a, b)
}

func (c *stageContext) Mul(a, b compute.Tensor) compute.Tensor {
	rows, cols := a.Dims()
	return c.plain(rows, cols, func(in []compute.Tensor) compute.Tensor { return c.inner.Mul(in[0], in[1]) }, a, b)
}

func (c *stageContext) Rows(x compute.Tensor, start, n int) compute.Tensor {
	_, cols := x.Dims()
	return c.plain(n, cols, func(in []compute.Tensor) compute.Tensor { return c.inner.Rows(in[0], start, n) }, x)
}

// Float32s evaluates the stage's pass. The last rank sends x, the logits, to rank 0
// and returns them; a middle rank performs its transfers and returns nil; rank 0
// (whose x is void) performs its transfer and then receives the logits.
func (c *stageContext) Float32s(x compute.Tensor) ([]float32, error) {
	if c.err != nil {
		return nil, c.err
	}
	st, ok := x.(*sTensor)
	if !ok {
		return c.inner.Float32s(x)
	}
	if !st.void {
		if c.st.Last() && !c.st.First() {
			if c.hidden {
				if c.headIn == nil || c.headIn.void {
					return nil, fmt.Errorf("model: %v: the head's input was not found", c.st)
				}
				return c.inner.Float32s(c.comm.Send(c.headIn.t, 0))
			}
			return c.inner.Float32s(c.comm.Send(st.t, 0))
		}
		return c.inner.Float32s(st.t)
	}
	if c.sent == nil {
		if err := c.inner.Err(); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("model: %v: the pass never reached this rank's layers", c.st)
	}
	if _, err := c.inner.Float32s(c.sent.t); err != nil {
		return nil, err
	}
	if !c.st.First() {
		return nil, nil
	}
	if c.hidden {
		h, err := c.inner.Float32s(c.comm.Recv(st.rows, c.hiddenSize, c.st.Size-1))
		if err != nil {
			return nil, err
		}
		if sink, ok := c.inner.(model.HiddenSink); ok && len(h) > 0 {
			sink.SetHidden(h[len(h)-c.hiddenSize:])
		}
		return make([]float32, st.rows*st.cols), nil // no logits were computed
	}
	return c.inner.Float32s(c.comm.Recv(st.rows, st.cols, c.st.Size-1))
}

func (c *stageContext) Err() error {
	if c.err != nil {
		return c.err
	}
	return c.inner.Err()
}

func (c *stageContext) Close() { c.inner.Close() }

// Free implements compute.Freer for the real tensors kept.
func (c *stageContext) Free(keep ...compute.Tensor) {
	var in []compute.Tensor
	for _, t := range keep {
		if st, ok := t.(*sTensor); ok && !st.void {
			in = append(in, st.t)
		}
	}
	compute.Free(c.inner, in...)
}

// Fail implements compute.Failer.
func (c *stageContext) Fail(err error) compute.Tensor { return c.fail(err) }

// FillLayer implements model.Executor: a layer another rank runs, unless it is a
// recurrent state (which the architectures require, though its ops are skipped), only
// counts positions here.
func (m *stageModel) FillLayer(caches []kvstore.Layer, i int) kvstore.Layer {
	c := caches[i]
	if _, rec := c.(model.RecurrentLayer); rec || i >= m.stage.Lo && i < m.stage.Hi {
		return c
	}
	return &skipped{n: seqLen(caches), window: 1 << 30}
}

// seqLen is the positions the filled caches hold.
func seqLen(caches []kvstore.Layer) int {
	for _, c := range caches {
		if c != nil {
			return c.Len()
		}
	}
	return 0
}

// PrefixSeq implements model.Executor: only the stage's own layers, whose blocks this
// rank keeps in its own prefix cache.
func (m *stageModel) PrefixSeq(caches []kvstore.Layer) kvstore.Seq {
	own := make([]kvstore.Layer, len(caches))
	for i := m.stage.Lo; i < m.stage.Hi && i < len(caches); i++ {
		own[i] = caches[i]
	}
	return model.Seq(own)
}

// StageShape is a stage's share of a model's shape, for the memory policy of the rank
// that runs it: the layers of other ranks keep nothing here, and the weights are the
// stage's (StageWeightBytes).
func StageShape(m kvstore.ModelShape, s Stage, weightBytes int64) kvstore.ModelShape {
	out := m
	out.Layers = append([]kvstore.LayerShape(nil), m.Layers...)
	for i := range out.Layers {
		if i < s.Lo || i >= s.Hi {
			if out.Layers[i].Kind.HasKV() {
				if i < s.Lo {
					out.KVBefore++
				} else {
					out.KVAfter++
				}
			}
			out.Layers[i] = kvstore.LayerShape{Kind: kvstore.LayerNone}
		}
	}
	out.WeightBytes = weightBytes
	return out
}

// StageWeightBytes is the size of the tensors stage s of the checkpoint in dir binds.
func StageWeightBytes(dir string, s Stage) (int64, error) {
	return model.BoundBytes(dir, func(l *model.Loader, name string) bool { return !s.holds(l, name) })
}
