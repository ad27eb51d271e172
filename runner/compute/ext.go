package compute

import (
	"fmt"
	"math"

	"github.com/mlxg/mlxg/kvstore"
)

// Optional operations of the hybrid and mixture-of-experts architectures (qwen3_moe,
// gemma3, qwen3_next). A backend's Context implements the interfaces it supports; an
// architecture asks for them with Ext, which sees through wrapping contexts, and
// checks at load time with Supports, so that a backend without them is refused with
// a clear error rather than failing mid-pass.

// Routing is how a mixture-of-experts router's logits pick the experts of a token:
// softmax over all experts (in float32), the TopK largest probabilities, renormalised
// to sum to 1 when NormTopK (config.json's norm_topk_prob). With SoftmaxTopK the TopK
// largest logits are picked first and the softmax runs over those alone (gpt-oss):
// the same weights as NormTopK in exact arithmetic, rounded as that model computes them.
// Scales, when set, holds one factor per expert that multiplies a picked expert's
// weight last (Gemma 4's per_expert_scale).
//
// With Sigmoid the router is DeepSeek-V3's (and GLM-4.5's, "noaux_tc"): each expert's
// score is sigmoid(logit) in float32; the experts are chosen by score + Bias
// (e_score_correction_bias) among the TopKGroups groups (of Groups equal groups, n_group
// and topk_group) whose two best biased scores sum highest; a picked expert's weight is
// its unbiased score, divided by the picked scores' sum (+1e-20) when NormTopK, times
// Scale (routed_scaling_factor; 0 means 1).
type Routing struct {
	TopK        int
	NormTopK    bool
	SoftmaxTopK bool
	Scales      []float32

	Sigmoid            bool
	Bias               []float32 // one per expert, or nil
	Groups, TopKGroups int       // 0 or 1 group: no group restriction
	Scale              float32
}

// Check reports an error when r cannot route experts experts.
func (r Routing) Check(experts int) error {
	if r.TopK <= 0 || r.TopK > experts {
		return fmt.Errorf("routing: top-%d of %d experts", r.TopK, experts)
	}
	if !r.Sigmoid {
		return nil
	}
	if r.Bias != nil && len(r.Bias) != experts {
		return fmt.Errorf("routing: %d correction biases for %d experts", len(r.Bias), experts)
	}
	if r.Groups > 1 && (experts%r.Groups != 0 || r.TopKGroups <= 0 || r.TopKGroups > r.Groups || experts/r.Groups < 2 || r.TopK > r.TopKGroups*(experts/r.Groups)) {
		return fmt.Errorf("routing: %d experts in n_group %d with topk_group %d cannot pick %d", experts, r.Groups, r.TopKGroups, r.TopK)
	}
	return nil
}

// Select returns the experts picked by one token's router logits, best first, and
// their weights. Equal probabilities keep the lower index first, as torch.topk does on
// the CPU.
func (r Routing) Select(logits []float32) (experts []int, weights []float32) {
	k := min(r.TopK, len(logits))
	if k <= 0 {
		return nil, nil
	}
	if r.Sigmoid {
		return r.selectSigmoid(logits, k)
	}
	maxv := float32(math.Inf(-1))
	for _, v := range logits {
		maxv = max(maxv, v)
	}
	// The k largest logits by insertion (k is small), then their softmax probabilities.
	experts = make([]int, 0, k)
	var sum float64
	for i, v := range logits {
		sum += math.Exp(float64(v - maxv))
		if len(experts) == k && v <= logits[experts[k-1]] {
			continue
		}
		j := len(experts)
		if j < k {
			experts = append(experts, i)
		} else {
			j--
		}
		for ; j > 0 && v > logits[experts[j-1]]; j-- {
			experts[j] = experts[j-1]
		}
		experts[j] = i
	}
	weights = make([]float32, k)
	if r.SoftmaxTopK {
		sum = 0
		for _, e := range experts {
			sum += math.Exp(float64(logits[e] - maxv))
		}
	}
	var top float32
	for i, e := range experts {
		weights[i] = float32(math.Exp(float64(logits[e]-maxv)) / sum)
		top += weights[i]
	}
	if r.NormTopK && top > 0 {
		for i := range weights {
			weights[i] /= top
		}
	}
	if r.Scales != nil {
		for i, e := range experts {
			weights[i] *= r.Scales[e]
		}
	}
	return experts, weights
}

// selectSigmoid is Select for a sigmoid router.
func (r Routing) selectSigmoid(logits []float32, k int) (experts []int, weights []float32) {
	n := len(logits)
	scores := make([]float32, n)
	choice := make([]float32, n)
	for i, v := range logits {
		scores[i] = float32(1 / (1 + math.Exp(-float64(v))))
		choice[i] = scores[i]
		if i < len(r.Bias) {
			choice[i] += r.Bias[i]
		}
	}
	allowed := func(int) bool { return true }
	if g := r.Groups; g > 1 && n%g == 0 && r.TopKGroups < g {
		size := n / g
		// A group's score is the sum of its two best biased scores; the best
		// TopKGroups groups (the lower index first on ties) stay eligible.
		gs := make([]float32, g)
		for j := range g {
			a, b := float32(math.Inf(-1)), float32(math.Inf(-1))
			for _, v := range choice[j*size : (j+1)*size] {
				if v > a {
					a, b = v, a
				} else if v > b {
					b = v
				}
			}
			gs[j] = a + b
		}
		keep := make([]bool, g)
		for _, j := range topIndices(gs, r.TopKGroups, nil) {
			keep[j] = true
		}
		allowed = func(i int) bool { return keep[i/size] }
	}
	experts = topIndices(choice, k, allowed)
	weights = make([]float32, len(experts))
	var sum float32
	for i, e := range experts {
		weights[i] = scores[e]
		sum += weights[i]
	}
	scale := r.Scale
	if scale == 0 {
		scale = 1
	}
	for i := range weights {
		if r.NormTopK {
			weights[i] /= sum + 1e-20
		}
		weights[i] *= scale
	}
	return experts, weights
}

// topIndices returns the indices of the k largest values of v among those ok accepts
// (all when ok is nil), largest first, the lower index first on ties.
func topIndices(v []float32, k int, ok func(int) bool) []int {
	top := make([]int, 0, k)
	for i, x := range v {
		if ok != nil && !ok(i) {
			continue
		}
		if len(top) == k && x <= v[top[k-1]] {
			continue
		}
		j := len(top)
		if j < k {
			top = append(top, i)
		} else {
			j--
		}
		for ; j > 0 && x > v[top[j-1]]; j-- {
			top[j] = top[j-1]
		}
		top[j] = i
	}
	return top
}

// MoEContext runs mixture-of-experts blocks.
type MoEContext interface {
	// MoE is the SwiGLU mixture of experts: for row t of x (T × in) with router logits
	// row t of router (T × experts), Σ p_e · down_e(silu(gate_e·x_t) ⊙ up_e·x_t) over
	// the experts r.Select picks. gate and up are stacked expert matrices of
	// experts·inter × in, down of experts·out × inter (mlx-lm's switch_mlp tensors,
	// [experts, out, in], bound as one matrix); only the picked experts' rows are read.
	MoE(x, router Tensor, gate, up, down Weight, experts int, r Routing) Tensor
}

// SigmoidMoEContext runs mixture-of-experts blocks with a sigmoid router (DeepSeek-V3,
// GLM-4.5, GLM-4.7-Flash). A backend implements it only where its MoE applies every
// field of Routing; MoE with Routing.Sigmoid fails elsewhere.
type SigmoidMoEContext interface {
	// SigmoidMoE is MoE for a Routing whose Sigmoid is set.
	SigmoidMoE(x, router Tensor, gate, up, down Weight, experts int, r Routing) Tensor
}

// LatentAttentionContext runs multi-head latent attention (DeepSeek-V2/V3's MLA, GLM-4.7-
// Flash) with kv_b_proj absorbed: the cache (a kvstore latent layer: one KV head whose
// keys are the rotary part, ropeDim wide, and whose values are the normalised latent,
// rank wide) holds the compressed latent, never per-head keys and values.
type LatentAttentionContext interface {
	// LatentAttention appends kRope (T × ropeDim, RoPE'd) and latent (T × rank) to cache,
	// then returns, per query head h, softmax(scale·(qRope_h·kRopeᵀ + qLatent_h·latentᵀ))·
	// latent over the cached positions, causally: T × heads·rank. qRope is T × heads·ropeDim
	// and qLatent T × heads·rank (the no-rope query through kv_b_proj's key half).
	LatentAttention(qRope, qLatent, kRope, latent Tensor, cache kvstore.Layer, heads int, scale float32) Tensor
	// MultiLinear is one product per head: head h's columns of x (T × heads·in) times
	// matrix h of w (a stack [heads, out, in] bound as heads·out × in, mlx-lm's
	// MultiLinear), giving head h's columns of the result (T × heads·out).
	MultiLinear(x Tensor, w Weight, heads int) Tensor
}

// ClampedSwiGLU is gpt-oss's expert activation (swiglu_alpha, swiglu_limit): the gate
// clamped from above and the up projection on both sides at Limit, then
// gate·sigmoid(Alpha·gate)·(up + 1).
type ClampedSwiGLU struct {
	Alpha, Limit float32
}

// Apply writes the activation of gate and up into out (len(gate) values; out may be
// gate or up).
func (a ClampedSwiGLU) Apply(out, gate, up []float32) {
	up, out = up[:len(gate)], out[:len(gate)]
	for i, g := range gate {
		g = min(g, a.Limit)
		u := min(max(up[i], -a.Limit), a.Limit)
		out[i] = g / (1 + float32(math.Exp(float64(-a.Alpha*g)))) * (u + 1)
	}
}

// ClampedMoEContext runs gpt-oss's expert blocks.
type ClampedMoEContext interface {
	// ClampedMoE is MoE with act in place of silu(gate)·up, and each expert's biases
	// added to its gate, up and down projections: the stacked weights' biases
	// ([experts, out] tensors beside them, bound with them by Backend.Weight), of which
	// each picked expert adds its own row.
	ClampedMoE(x, router Tensor, gate, up, down Weight, experts int, r Routing, act ClampedSwiGLU) Tensor
}

// GeGLUMoEContext runs mixture-of-experts blocks whose experts gate with GELU (Gemma 4).
type GeGLUMoEContext interface {
	// GeGLUMoE is MoE with gelu_tanh(gate_e·x_t) ⊙ up_e·x_t in place of SwiGLU.
	GeGLUMoE(x, router Tensor, gate, up, down Weight, experts int, r Routing) Tensor
}

// CarryContext is implemented by a context that runs only some of a model's layers (a
// stage of a pipeline: runner/pipeline). Carry marks t, computed before the first layer
// from the tokens and read by later layers beside the residual stream (Gemma 4's
// per-layer inputs), so that the rank that computed it hands it on with the stream and
// a rank that did not receives it there. It returns t, which the caller goes on using.
type CarryContext interface {
	Carry(t Tensor) Tensor
}

// StreamContext is implemented by a context that runs only some of a model's layers (a
// stage of a pipeline: runner/pipeline). Stream marks t as the residual stream the first
// layer reads (model.Batch.EmbedWith calls it), so that the stage knows where the stream
// is by where it comes from. It returns t, which the caller goes on using.
type StreamContext interface {
	Stream(t Tensor) Tensor
}

// SharedKVContext runs the attention of layers that read another layer's keys and
// values (Gemma 4's KV-shared layers), which store none of their own.
type SharedKVContext interface {
	// AttentionShared is causal grouped-query attention of q (T × heads·kHeadDim) over
	// cache, whose last T positions are q's own, appended earlier in the pass by the
	// layer that owns the cache; it appends nothing. The result is T × heads·vHeadDim.
	// With spans (nil: none) a query row inside one of them also sees the later
	// positions of its span, as in SpanAttentionContext.AttentionSpans (Gemma 4's image
	// tokens, whose mask the KV-shared layers apply as their source layers do).
	AttentionShared(q Tensor, cache kvstore.Layer, heads int, scale float32, spans []kvstore.Span) Tensor
}

// SinkAttentionContext runs attention with learned sinks (gpt-oss).
type SinkAttentionContext interface {
	// AttentionSinks is Context.Attention with one sink logit per query head (sinks, of
	// heads values) joining each head's softmax denominator and dropped from its
	// output: Σ_j e^(s_j)·v_j / (Σ_j e^(s_j) + e^sink) (kvstore.Attention.Sinks).
	AttentionSinks(q, k, v Tensor, cache kvstore.Layer, heads int, scale float32, sinks Vector) Tensor
}

// SpanAttentionContext runs attention in which the rows of given spans see each other in
// both directions (Gemma 3's image tokens).
type SpanAttentionContext interface {
	// AttentionSpans is Context.Attention where a query row inside one of spans (absolute
	// positions [Start, End), in order and apart, each ending within the cache once this
	// call's rows are appended) also sees the later positions of its span
	// (kvstore.Attention.Bidirectional).
	AttentionSpans(q, k, v Tensor, cache kvstore.Layer, heads int, scale float32, spans []kvstore.Span) Tensor
}

// ClampContext clamps activations (Gemma 4's vision tower's Gemma4ClippableLinear, whose
// inputs and outputs are held within bounds the checkpoint stores).
type ClampContext interface {
	// Clamp is min(max(x, lo), hi), elementwise.
	Clamp(x Tensor, lo, hi float32) Tensor
}

// ActivationContext holds the elementwise and normalisation variants of Gemma and
// Qwen3-Next.
type ActivationContext interface {
	// GeGLU is gelu_tanh(gate) * up, elementwise (Gemma's gelu_pytorch_tanh MLP).
	GeGLU(gate, up Tensor) Tensor
	// RMSNormOffset is x / sqrt(mean(x²) + eps) * (offset + w) per row: Gemma and
	// Qwen3-Next store their norm weights around 0 and scale by 1 + w.
	RMSNormOffset(x Tensor, w Vector, offset, eps float32) Tensor
	// Scale multiplies every element by s.
	Scale(x Tensor, s float32) Tensor
	// SoftCap is cap · tanh(x / cap), elementwise (Gemma's logit soft-capping).
	SoftCap(x Tensor, cap float32) Tensor
	// SigmoidMul is x * sigmoid(g), elementwise; g has x's rows and either x's
	// columns or one column per group of x's columns (a gate per head, or per row).
	SigmoidMul(x, g Tensor) Tensor
}

// LinearAttentionContext runs Gated DeltaNet (Qwen3-Next, Qwen3.5) layers, whose state
// lives in a kvstore.Recurrent.
type LinearAttentionContext interface {
	// CausalConv1D is a depthwise causal convolution with SiLU over the rows of x
	// (T × C): out_t[c] = silu(Σ_j w[c][j] · x'_{t+j}[c]) for a kernel of K taps, where
	// x' is the K-1 rows of state followed by x. state ((K-1) × C, oldest row first) is
	// read and then overwritten with the last K-1 rows of x'. w holds C × K floats
	// (Hugging Face's [C, 1, K] or mlx-lm's [C, K, 1] conv1d weight, unquantized).
	CausalConv1D(x Tensor, w Weight, state []float32) Tensor
	// GatedDelta runs the gated delta rule over T steps for H value heads, per head:
	// S ← exp(g)·S; S ← S + k ⊗ β(v − Sᵀk); o = Sᵀq, with the state S (H × dk × dv,
	// float32) read and overwritten. q and k are T × Hk·dk (already normalised and
	// scaled) for Hk key heads, H a multiple of Hk, value head h using key head
	// h/(H/Hk); v is T × H·dv, g (log decay) and beta are T × H. Returns T × H·dv.
	GatedDelta(q, k, v, g, beta Tensor, heads int, state []float32) Tensor
	// DeltaGates computes Gated DeltaNet's per-head gates from the a (T × H) and b
	// (T × H) projections: the log decay g = -exp(aLog)·softplus(a + dtBias) and
	// beta = sigmoid(b).
	DeltaGates(a, b Tensor, aLog, dtBias Vector) (g, beta Tensor)
	// L2NormScale normalises each row of x (rows of one head) to unit L2 norm
	// (x / sqrt(Σx² + eps)) and multiplies by s.
	L2NormScale(x Tensor, eps, s float32) Tensor
	// Cols is columns start .. start+n-1 of every row of x.
	Cols(x Tensor, start, n int) Tensor
	// ConcatCols joins tensors of equal rows side by side.
	ConcatCols(xs ...Tensor) Tensor
}

// unwrapper is implemented by contexts that wrap another (runner/model's cancellable
// pass); Ext sees through them.
type unwrapper interface{ Unwrap() Context }

// Ext returns c, or the context it wraps, as T.
func Ext[T any](c Context) (T, bool) {
	for {
		if t, ok := c.(T); ok {
			return t, true
		}
		u, ok := c.(unwrapper)
		if !ok {
			var zero T
			return zero, false
		}
		c = u.Unwrap()
	}
}

// Supports reports an error naming what is missing when b's contexts lack T.
func Supports[T any](b Backend, what string) error {
	c := b.NewContext()
	defer c.Close()
	if _, ok := Ext[T](c); !ok {
		return fmt.Errorf("the %s backend does not run %s yet: use the CPU backend (MLXG_BACKEND=cpu)", b.Name(), what)
	}
	return nil
}

// Failer is implemented by contexts that record an error an architecture finds (a
// cache of the wrong kind for a layer, say) as the pass's sticky error.
type Failer interface {
	Fail(err error) Tensor
}

// Fail records err in c when c (or the context it wraps) is a Failer, and returns a
// tensor no op accepts, so the rest of the pass is skipped.
func Fail(c Context, err error) Tensor {
	if f, ok := Ext[Failer](c); ok {
		return f.Fail(err)
	}
	return failed{}
}

type failed struct{}

func (failed) Dims() (int, int) { return 0, 0 }

// Unsupported fails the pass in c for a context that lacks an optional operation (a
// wrapping context that does not Unwrap, say: Supports checked the backend itself).
func Unsupported(c Context, what string) Tensor {
	return Fail(c, fmt.Errorf("compute: this context does not run %s", what))
}

// DeltaShape checks GatedDelta's arguments, given as [rows, cols] of q, k, v, g and
// beta, and finds the key heads: the divisor kHeads of heads whose head size
// dk = q's columns / kHeads makes the state heads × dk × dv. Both backends use it, so
// they read the same layout.
func DeltaShape(q, k, v, g, beta [2]int, heads, stateLen int) (kHeads, dk, dv int, err error) {
	T := q[0]
	if heads <= 0 || k[0] != T || v[0] != T || g[0] != T || beta[0] != T || g[1] != heads || beta[1] != heads ||
		q[1] != k[1] || v[1]%heads != 0 {
		return 0, 0, 0, fmt.Errorf("GatedDelta: q %d×%d, k %d×%d, v %d×%d, g %d×%d, beta %d×%d for %d heads",
			q[0], q[1], k[0], k[1], v[0], v[1], g[0], g[1], beta[0], beta[1], heads)
	}
	dv = v[1] / heads
	for kh := 1; kh <= heads; kh++ {
		if heads%kh == 0 && q[1]%kh == 0 && stateLen == heads*(q[1]/kh)*dv {
			return kh, q[1] / kh, dv, nil
		}
	}
	return 0, 0, 0, fmt.Errorf("GatedDelta: a state of %d values does not fit %d heads of q/k width %d and value size %d", stateLen, heads, q[1], dv)
}

// ConvShape checks CausalConv1D's arguments, x as [rows, cols], the kernel's and the
// state's lengths, and returns the kernel's taps K: kernel holds K values per channel
// of x and the state K-1 rows of them.
func ConvShape(x [2]int, kernel, stateLen int) (K int, err error) {
	C := x[1]
	if C == 0 || kernel%C != 0 || kernel < C {
		return 0, fmt.Errorf("CausalConv1D: a kernel of %d values for %d channels", kernel, C)
	}
	K = kernel / C
	if stateLen != (K-1)*C {
		return 0, fmt.Errorf("CausalConv1D: a state of %d values, want %d (%d rows of %d channels)", stateLen, (K-1)*C, K-1, C)
	}
	return K, nil
}

// ConcatShape checks the arguments of ConcatRows (rows true: one under the other, of
// equal columns) or ConcatCols (side by side, of equal rows), given as [rows, cols],
// and returns the result's size along the joined axis.
func ConcatShape(xs [][2]int, rows bool) (int, error) {
	op, along, other, kind := "ConcatCols", 1, 0, "rows"
	if rows {
		op, along, other, kind = "ConcatRows", 0, 1, "columns"
	}
	if len(xs) == 0 {
		return 0, fmt.Errorf("%s of no tensors", op)
	}
	n := 0
	for _, x := range xs {
		if x[other] != xs[0][other] {
			return 0, fmt.Errorf("%s of tensors of %d and %d %s", op, xs[0][other], x[other], kind)
		}
		n += x[along]
	}
	return n, nil
}

// MoEShape checks MoE's arguments (x and router as [rows, cols], the stacked gate, up
// and down matrices as [out, in]) and returns the experts' inner and output sizes.
func MoEShape(x, router, gate, up, down [2]int, experts int, r Routing) (inter, hidden int, err error) {
	T, in := x[0], x[1]
	if experts <= 0 || r.TopK <= 0 || r.TopK > experts || router[0] != T || router[1] != experts ||
		gate[1] != in || up[1] != in || gate[0] != up[0] || gate[0]%experts != 0 || down[0]%experts != 0 || down[1] != gate[0]/experts {
		return 0, 0, fmt.Errorf("MoE: x %d×%d, router %d×%d, top-%d of %d experts do not fit gate %d×%d, up %d×%d, down %d×%d",
			T, in, router[0], router[1], r.TopK, experts, gate[0], gate[1], up[0], up[1], down[0], down[1])
	}
	if err := r.Check(experts); err != nil {
		return 0, 0, fmt.Errorf("MoE: %w", err)
	}
	if r.Scales != nil && len(r.Scales) != experts {
		return 0, 0, fmt.Errorf("MoE: %d per-expert scales for %d experts", len(r.Scales), experts)
	}
	return gate[0] / experts, down[0] / experts, nil
}

// DimsOf is t's [rows, cols] (a Tensor's, or a Weight's [out, in]), for the shape
// checks above.
func DimsOf(t interface{ Dims() (int, int) }) [2]int {
	r, c := t.Dims()
	return [2]int{r, c}
}

// BatchContext runs the batched forward passes of runner/model's Batch: the rows of
// several sequences concatenated, row-wise ops (products, norms, activations) run once
// over all of them, per-sequence ops (RoPE, attention, recurrent state) per segment.
type BatchContext interface {
	// ConcatRows joins tensors of equal columns one under the other.
	ConcatRows(xs ...Tensor) Tensor
	// Segments says how the rows of the pass split into sequences, in order, until the
	// next call: a backend whose arithmetic for a row depends on how many rows a product
	// has (the CPU backend's quantized products: one vector kernel under 4 rows, a tiled
	// product from 4) then computes each row as it would with its sequence alone. Ops on
	// tensors whose rows do not add up to the segments ignore them.
	Segments(rows []int)
}

// VerifyContext runs a pass over one sequence's next positions whose every row computes
// what a one-token step at that position computes (speculative decoding's verification):
// VerifyRows(n) is Segments of n rows of one each, except that what a backend does only
// for the rows of several sequences (the CPU backend's 8-bit inputs for a batch's decode
// rows) does not apply, since a step of that sequence alone would not do it either.
type VerifyContext interface {
	VerifyRows(n int)
}
