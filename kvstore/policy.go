package kvstore

import (
	"fmt"
	"log/slog"

	"github.com/dustin/go-humanize"

	"github.com/mlxg/mlxg/kvstore/sysmem"
)

// The policy, in short (all sizes in bytes):
//
//	reserve  = max(2 GiB, total/8), doubled under warn pressure   kept for the OS and other apps;
//	           under a memory cgroup's limit (total is that limit): max(total/8, min(2 GiB, total/4)),
//	           since the system's own memory lies outside the limit; a model in streaming
//	           mode under a limit: max(total/32, 64 MiB)
//	overhead = 512 MiB + weights/50                                activations, logits, scratch
//	           (a model in streaming mode: its own measured estimate, ModelShape.Overhead)
//	vision   = a vision tower's encode peak and kept features (ModelShape.Vision; its weights are weights)
//	free     = available − reserve − overhead − vision − weights   (weights not counted again once loaded)
//	spec     = the loosest rung of the ladder whose KV for num_ctx fits in free,
//	           starting one rung down under warn pressure:
//	             K6h/V6h g64  →  K4/V4 g64/32 + boundary 2@6h/6h  →  K4/V4 g64/32
//	           (each rung fewer bytes than the one before, for any number of layers: the
//	           boundary layers under pressure keep the default's format)
//	context  = the largest ctx with KV(ctx) ≤ free, at most num_ctx and the model's maximum
//	auto     = with no num_ctx: the largest ctx with KV(ctx) ≤ free/2 at the pressure's first rung,
//	           at most the model's maximum (AutoFloor when it states none), at least
//	           min(AutoFloor, maximum) (the ladder tightening as for an explicit num_ctx)
//	prefix   = (free − KV(context)) / 2, /4 under warn, 0 under critical   the RAM prefix cache's budget
//	critical = new loads are refused: missing = weights + overhead + KV(256 tokens) + reserve − available
//
// Explicit settings (flags, MLXG_KV_*, OLLAMA_KV_CACHE_TYPE) always win: a user's bits
// replace the ladder, a user's group sizes and boundary settings apply to every rung.
const (
	minReserve      = 2 << 30
	reserveShare    = 8 // reserve = total/reserveShare, at least minReserve
	baseOverhead    = 512 << 20
	overheadShare   = 50  // overhead += weights/overheadShare
	minLoadContext  = 256 // the smallest context worth loading a model for
	unknownMaxCtx   = 1 << 20
	prefixShare     = 2
	prefixShareWarn = 4
	// autoShare: a context sized from memory (no num_ctx) may take 1/autoShare of the free
	// memory as one sequence's KV. The other half is not wasted: the RAM prefix tier's budget
	// is half of what the KV leaves (a quarter of free), and the rest is room for a second
	// sequence at the same length (batchCap in api/server counts at least two), for another
	// model, and for the pressure to rise before the policy steps down. KV is paged, so the
	// context costs nothing until a conversation fills it.
	autoShare = 2
	// A model in streaming mode under a memory cgroup's limit keeps free only what the
	// kernel charges beside the process's own pages (page tables, the files it reads) and a
	// margin for a reading that comes a little late: a 32nd of the limit, at least 64 MiB.
	// Its weights take the rest, which the system's own memory, outside the limit, does not
	// need.
	streamMinReserve   = 64 << 20
	streamReserveShare = 32
)

// AutoFloor is the context a model loads with when memory affords less at the default
// layout (Ollama's default of 2024, and mlxg's before the context was sized from memory):
// the ladder then tightens to reach it, as for an explicit num_ctx. It is also the auto
// context of a model whose config.json states no maximum, since a model cannot be trusted
// to attend beyond the lengths it was trained on.
const AutoFloor = 4096

// PolicyInput is what the policy decides from.
type PolicyInput struct {
	Model   ModelShape
	NumCtx  int // requested context in tokens; 0: sized from memory (auto, above)
	Memory  sysmem.Info
	Options Options
	Loaded  bool // the weights are already resident (re-evaluation on a request), so not in Available
}

// Plan is the policy's choice for one model load or one new sequence.
type Plan struct {
	Layout       Layout
	Context      int   // tokens one sequence may hold
	FitContext   int   // the largest context that fits with Layout
	KVBytes      int64 // Layout.Bytes at Context
	KVTokenBytes int64 // KV bytes one more token adds (full-attention layers)
	Weights      int64
	Overhead     int64
	Vision       int64 // a vision tower's activations and kept features (ModelShape.Vision)
	Reserve      int64
	Free         int64 // memory for KV and the prefix cache
	PrefixBudget int64
	Memory       sysmem.Info
	Reason       string // why this spec and context, for the log
	Auto         bool   // the context was sized from memory (no num_ctx asked)
	// ContextReason says why Context is what it is, for mlxg fit, mlxg ps, /api/ps and /api/show:
	// the model's maximum, what memory affords, or the num_ctx asked.
	ContextReason string
	Quality       Quality // the layout's measured quality; not measured when the user's settings made it
}

// Peak is the predicted peak memory of the load: weights, overhead, the vision tower's activations
// and KV at Context.
func (p Plan) Peak() int64 { return p.Weights + p.Overhead + p.Vision + p.KVBytes }

// Headroom is what stays available after the load at its peak.
func (p Plan) Headroom() int64 { return int64(p.Memory.Available) - p.Peak() }

// rung is one step of the policy's ladder: its bits, and the groups and boundary layers
// it takes when the user set none.
type rung struct {
	bits     [2]Format
	groups   [2]int
	boundary int // KV layers at each end stored in boundaryBits
	// boundaryBits and boundaryGroups are the boundary layers' spec; with the zero Format,
	// DefaultBoundaryBits (8/8) in the rung's groups.
	boundaryBits   [2]Format
	boundaryGroups [2]int
	measured       Quality
}

// Quality is what a KV layout measurably costs a model's answers against an fp16 cache,
// teacher-forced on text the model predicts well (runner/quality, the bench's quality
// scenario): the worst over the context lengths measured.
type Quality struct {
	Model   string  // the model measured
	Lengths string  // the context lengths measured
	Top1    float64 // share of positions where the greedy next token is fp16's
	MeanKL  float64 // mean KL(fp16 || layout) over the vocabulary, in nats
	// Top1Clear is Top1 over the positions where fp16's two largest logits differ by
	// at least 0.1 (quality.DefaultClearGap), whose answer a layout should keep.
	Top1Clear float64
}

// Measured reports whether q holds a measurement.
func (q Quality) Measured() bool { return q.Model != "" }

func (q Quality) String() string {
	if !q.Measured() {
		return "not measured"
	}
	return fmt.Sprintf("top-1 %.1f%% (%.1f%% where fp16's answer is clear), mean KL %.1e (%s, %s tokens)", 100*q.Top1, 100*q.Top1Clear, q.MeanKL, q.Model, q.Lengths)
}

// measuredOn names where the ladder's qualities come from.
const measuredOn, measuredAt = "qwen3-tiny", "512/2K/4K"

// ladder is the policy's steps, loosest first. The first is the default at normal
// pressure: of the layouts measured, the fewest bytes per token with at least 99% top-1
// agreement where fp16's answer is clear and at most 1e-3 mean KL against fp16 at every
// length, with a fused decode kernel and a decode step within 5% of K8/V8's speed
// (docs/kv-cache.md has the tables): 6-bit keys and values in groups of 64, both
// Hadamard-rotated (0.41x fp16's bytes; a layer whose head_dim is not a power of two
// keeps 6 bits unrotated, K6/V6, which meets the bar too). The later ones trade quality
// for memory under pressure; their boundary layers keep the first step's spec, so that
// no step stores more bytes than the one before, whatever the number of layers.
var ladder = []rung{
	{bits: [2]Format{AffineFormat(6, 0).Rotate(true), AffineFormat(6, 0).Rotate(true)}, groups: [2]int{64, 64},
		measured: Quality{Model: measuredOn, Lengths: measuredAt, Top1: 0.9888, MeanKL: 5.7e-4, Top1Clear: 0.9989}},
	{bits: [2]Format{AffineFormat(4, 0), AffineFormat(4, 0)}, groups: [2]int{64, 32}, boundary: 2,
		boundaryBits: [2]Format{AffineFormat(6, 0).Rotate(true), AffineFormat(6, 0).Rotate(true)}, boundaryGroups: [2]int{64, 64},
		measured: Quality{Model: measuredOn, Lengths: measuredAt, Top1: 0.9556, MeanKL: 5.4e-3, Top1Clear: 0.9814}},
	{bits: [2]Format{AffineFormat(4, 0), AffineFormat(4, 0)}, groups: [2]int{64, 32},
		measured: Quality{Model: measuredOn, Lengths: measuredAt, Top1: 0.9312, MeanKL: 1.4e-2, Top1Clear: 0.9504}},
}

// Ladder describes the policy's steps as `mlxg fit` and the docs show them: each
// step's layout for m and its measured quality.
func Ladder(m ModelShape, o Options) ([]LadderStep, error) {
	var out []LadderStep
	for _, r := range ladder {
		l, err := o.rungLayout(m, r)
		if err != nil {
			return nil, err
		}
		q := r.measured
		if o.Bits != nil || o.GroupSize != nil || o.BoundaryLayers != nil || o.BoundaryBits != nil {
			q = Quality{} // the user's settings make another layout than the one measured
		}
		out = append(out, LadderStep{Layout: l, Quality: q})
		if o.Bits != nil {
			break
		}
	}
	return out, nil
}

// LadderStep is one step of the policy's ladder for a model.
type LadderStep struct {
	Layout  Layout
	Quality Quality
}

// rungLayout is r's layout for m under the user's settings o.
func (o *Options) rungLayout(m ModelShape, r rung) (Layout, error) {
	bits, groups, n := r.bits, r.groups, r.boundary
	bb, bg := [2]Format{AffineFormat(DefaultBoundaryBits, 0), AffineFormat(DefaultBoundaryBits, 0)}, r.groups
	if r.boundaryBits[0].Mode == Affine {
		bb, bg = r.boundaryBits, r.boundaryGroups
	}
	if o.Bits != nil { // the user's bits: the user's (or the documented default) groups and boundary
		bits, groups, n = *o.Bits, [2]int{DefaultKGroup, DefaultVGroup}, DefaultBoundaryLayers
		bb[0], bb[1] = AffineFormat(DefaultBoundaryBits, 0), AffineFormat(DefaultBoundaryBits, 0)
		bg = groups
	}
	if o.GroupSize != nil {
		groups, bg = *o.GroupSize, *o.GroupSize
	}
	if o.BoundaryLayers != nil {
		n = *o.BoundaryLayers
	}
	if o.BoundaryBits != nil {
		bb = *o.BoundaryBits
	}
	l, err := newLayout(m, withGroups(bits, groups), n, withGroups(bb, bg), o.fitLayer)
	l.QuantizedKVStart, l.MaxKVSize = o.QuantizedKVStart, o.MaxKVSize
	return l, err
}

// reserveFor is the memory the policy keeps free: an eighth of the machine's, at least
// minReserve (the OS and other applications). Under a memory cgroup's limit the system's
// own memory lies outside the limit, so the reserve scales with the limit down to an
// eighth of it (a quarter, at most minReserve, above that): a cap of a few GiB still
// leaves room for a model that streams its weights.
func reserveFor(mem sysmem.Info, streamed bool) int64 {
	total := int64(mem.Total)
	if mem.Limited && streamed {
		return max(streamMinReserve, total/streamReserveShare)
	}
	if mem.Limited {
		return max(total/reserveShare, min(minReserve, total/4))
	}
	return max(minReserve, total/reserveShare)
}

// Choose applies the policy. It errors when the model cannot be loaded: critical
// pressure, or not even minLoadContext tokens fit; the error says how much memory is missing.
func Choose(in PolicyInput) (Plan, error) {
	mem := in.Memory
	p := Plan{Memory: mem, Weights: in.Model.WeightBytes}
	p.Overhead = baseOverhead + in.Model.WeightBytes/overheadShare
	if in.Model.Overhead > 0 {
		p.Overhead = in.Model.Overhead
	}
	p.Reserve = reserveFor(mem, in.Model.Streamed)
	if mem.Pressure >= sysmem.Warn {
		p.Reserve *= 2
	}
	p.Vision = in.Model.Vision
	p.Free = int64(mem.Available) - p.Reserve - p.Overhead - p.Vision
	if !in.Loaded {
		p.Free -= in.Model.WeightBytes
	}
	maxCtx := in.Model.MaxContext
	if maxCtx <= 0 {
		maxCtx = unknownMaxCtx
	}
	want := maxCtx
	if in.NumCtx > 0 {
		want = min(in.NumCtx, maxCtx)
	}

	o := in.Options
	layoutFor := func(r rung) (Layout, error) { return o.rungLayout(in.Model, r) }

	start := 0
	switch {
	case mem.Pressure == sysmem.Critical && !in.Loaded:
		l, err := layoutFor(ladder[len(ladder)-1])
		if err != nil {
			return Plan{}, err
		}
		need := p.Weights + p.Overhead + p.Vision + l.Bytes(in.Model, min(minLoadContext, want))
		return Plan{}, missingError(true, need, p.Reserve, mem)
	case mem.Pressure == sysmem.Critical:
		start = len(ladder) - 1
	case mem.Pressure == sysmem.Warn:
		start = 1
	}
	rungs := ladder[start:]
	if o.Bits != nil {
		rungs = rungs[:1] // the user's bits: no ladder
	}
	userLayout := o.Bits != nil || o.GroupSize != nil || o.BoundaryLayers != nil || o.BoundaryBits != nil
	p.Auto = in.NumCtx <= 0
	autoFit, autoMax := 0, in.Model.MaxContext
	if p.Auto {
		// Sized from memory at the pressure's first rung: the ladder does not tighten the layout
		// for a context nobody asked for, only to reach the floor.
		if autoMax <= 0 {
			autoMax = AutoFloor
		}
		l, err := layoutFor(rungs[0])
		if err != nil {
			return Plan{}, err
		}
		autoFit = fitContext(in.Model, l, p.Free/autoShare, autoMax)
		want = max(autoFit, min(AutoFloor, autoMax))
	}
	chosen := 0
	for i, r := range rungs {
		l, err := layoutFor(r)
		if err != nil {
			return Plan{}, err
		}
		p.Layout, chosen = l, i
		p.Quality = r.measured
		p.FitContext = fitContext(in.Model, l, p.Free, maxCtx)
		if p.FitContext >= want {
			break
		}
	}
	if userLayout {
		p.Quality = Quality{}
	}
	p.Context = min(want, p.FitContext)
	if p.Context < min(minLoadContext, want) {
		need := p.Weights + p.Overhead + p.Vision + p.Layout.Bytes(in.Model, min(minLoadContext, want))
		return Plan{}, missingError(false, need, p.Reserve, mem)
	}
	p.KVBytes = p.Layout.Bytes(in.Model, p.Context)
	p.KVTokenBytes = p.Layout.TokenBytes(in.Model)
	switch mem.Pressure {
	case sysmem.Normal:
		p.PrefixBudget = (p.Free - p.KVBytes) / prefixShare
	case sysmem.Warn:
		p.PrefixBudget = (p.Free - p.KVBytes) / prefixShareWarn
	}
	p.PrefixBudget = max(p.PrefixBudget, 0)

	switch {
	case o.Bits != nil:
		p.Reason = "spec set by " + o.Explicit()
	case start > 0:
		p.Reason = fmt.Sprintf("spec tightened for %s memory pressure", mem.Pressure)
	default:
		p.Reason = "spec chosen by the policy"
	}
	switch {
	case chosen > 0 && p.Context >= want:
		p.Reason += fmt.Sprintf("; tightened so that %d tokens fit", want)
	case chosen > 0:
		p.Reason += "; the tightest spec"
	}
	if p.Layout.F16Layers > 0 {
		p.Reason += fmt.Sprintf("; %d KV layers kept fp16: no KV group size divides their head_dim", p.Layout.F16Layers)
	}
	if p.Layout.UnrotatedLayers > 0 {
		p.Reason += fmt.Sprintf("; %d KV layers stored unrotated: Hadamard rotation needs a power-of-two head_dim", p.Layout.UnrotatedLayers)
	}
	if p.Context < want {
		p.Reason += fmt.Sprintf("; context %d reduced to %d, the most that fits", want, p.Context)
	}
	p.ContextReason = contextReason(in, p, autoFit, autoMax)
	return p, nil
}

// contextReason says why p.Context is what it is.
func contextReason(in PolicyInput, p Plan, autoFit, autoMax int) string {
	maxCtx := in.Model.MaxContext
	if !p.Auto {
		asked := fmt.Sprintf("num_ctx %d asked", in.NumCtx)
		want := in.NumCtx
		if maxCtx > 0 {
			want = min(want, maxCtx)
		}
		switch {
		case p.Context < want:
			return fmt.Sprintf("%s, reduced to %d: the most that fits in memory", asked, p.Context)
		case want < in.NumCtx:
			return fmt.Sprintf("%s, lowered to the model's maximum %d", asked, maxCtx)
		}
		return asked
	}
	free := ibytes(max(p.Free, 0))
	switch {
	case maxCtx <= 0:
		return fmt.Sprintf("sized from memory: config.json states no maximum, so %d", autoMax)
	case p.Context == maxCtx:
		return fmt.Sprintf("sized from memory: the model's maximum %d, whose KV (%s) fits in half the %s free for KV", maxCtx, ibytes(p.KVBytes), free)
	case autoFit >= p.Context:
		return fmt.Sprintf("sized from memory: the most whose KV (%s) fits in half the %s free for KV (the model's maximum is %d)", ibytes(p.KVBytes), free, maxCtx)
	case p.Context >= min(AutoFloor, autoMax):
		return fmt.Sprintf("sized from memory: half the %s free for KV holds fewer than %d tokens, so the floor of %d", free, AutoFloor, p.Context)
	}
	return fmt.Sprintf("sized from memory: %d, the most that fits in the %s free for KV (below the floor of %d)", p.Context, free, AutoFloor)
}

// groupChoices are the affine group sizes the policy may pick, largest first.
var groupChoices = []int{128, 64, 32}

// fitLayer is the policy's group choice for one layer. A group size the user did not
// set shrinks to the largest of 128/64/32 that divides the head_dim and is not above
// the default; when none does (head_dim below 32 or not a multiple of 32) the layer
// stays fp16, unless the user set the bits. A user's setting that cannot fit is an
// error naming the setting and the head_dim.
func (o *Options) fitLayer(s Spec, kHeadDim, vHeadDim int, boundary bool) (Spec, bool, error) {
	bitsName := "kv-bits"
	userBits := o.Bits != nil
	if boundary {
		bitsName = "kv-boundary-bits"
		userBits = o.BoundaryBits != nil || o.Bits != nil
		if o.BoundaryBits == nil {
			bitsName = "kv-bits"
		}
	}
	fit := func(f Format, headDim int, which string) (Format, bool, error) {
		if f.Rotated && RotationError(headDim) != nil {
			f.Rotated = false // rotation is a refinement: the layer keeps its bits, unrotated
		}
		if f.Mode == F16 || headDim%f.Group == 0 {
			return f, false, nil
		}
		if f.Mode == Affine && o.GroupSize == nil {
			for _, g := range groupChoices {
				if g <= f.Group && headDim%g == 0 {
					f.Group = g
					return f, false, nil
				}
			}
		}
		switch {
		case f.Mode == Affine && o.GroupSize != nil:
			return f, false, fmt.Errorf("%s head_dim %d is not a multiple of the KV group size %d set by %s: choose a group size that divides it, or leave it to the policy",
				which, headDim, f.Group, o.from("kv-group-size"))
		case userBits:
			return f, false, fmt.Errorf("%s head_dim %d cannot hold %s (set by %s): no KV group of 32, 64 or 128 divides it; use 16 (fp16) for this model",
				which, headDim, f, o.from(bitsName))
		}
		return FormatF16, true, nil
	}
	k, kf16, err := fit(s.K, kHeadDim, "key")
	if err != nil {
		return s, false, err
	}
	v, vf16, err := fit(s.V, vHeadDim, "value")
	if err != nil {
		return s, false, err
	}
	if kf16 || vf16 {
		return SpecF16, true, nil
	}
	return Spec{K: k, V: v}, false, nil
}

// from names where a setting came from ("--kv-bits", "MLXG_KV_BITS").
func (o *Options) from(name string) string {
	if src := o.Source[name]; src != "" {
		return src
	}
	return "--" + name
}

// fitContext is the largest ctx ≤ maxCtx with l.Bytes(ctx) ≤ free, rounded down to
// whole blocks when that leaves at least one. Bytes grows with ctx, so a binary search finds it.
func fitContext(m ModelShape, l Layout, free int64, maxCtx int) int {
	if l.Bytes(m, 0) > free {
		return 0
	}
	lo, hi := 0, maxCtx // invariant: Bytes(lo) fits
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if l.Bytes(m, mid) <= free {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo >= BlockTokens && lo < maxCtx {
		lo -= lo % BlockTokens
	}
	return lo
}

// MemoryError is the policy's refusal to load a model: the scheduler can report
// Missing (0 when memory is available but the level is critical).
type MemoryError struct {
	Critical  bool  // refused for critical memory pressure
	Need      int64 // weights, overhead and KV for the first tokens
	Reserve   int64 // kept free for the system
	Available int64
	Missing   int64
	Total     int64 // the machine's memory (or its cgroup limit)
}

// Transient reports whether the refusal may pass: it does unless the model needs more
// than the whole machine. The scheduler (runner/sched) turns a transient refusal into
// its BusyError, which the server answers with 503 and Retry-After.
func (e *MemoryError) Transient() bool { return e.Total <= 0 || e.Need <= e.Total }

func (e *MemoryError) Error() string {
	what := "not enough memory"
	if e.Critical {
		what = "memory pressure is critical"
	}
	if e.Missing <= 0 {
		return fmt.Sprintf("%s: refusing to load a model that needs %s (weights, overhead and KV for the first tokens) although %s is available; retry when the pressure drops",
			what, ibytes(e.Need), ibytes(e.Available))
	}
	return fmt.Sprintf("%s: loading needs %s (weights, overhead and KV for the first tokens) plus %s kept free for the system, but only %s is available: %s missing; close other applications or unload a model",
		what, ibytes(e.Need), ibytes(e.Reserve), ibytes(e.Available), ibytes(e.Missing))
}

func missingError(critical bool, need, reserve int64, mem sysmem.Info) error {
	avail := int64(mem.Available)
	return &MemoryError{Critical: critical, Need: need, Reserve: reserve, Available: avail, Missing: max(0, need+reserve-avail),
		Total: int64(mem.Total)}
}

func ibytes(n int64) string { return humanize.IBytes(uint64(max(n, 0))) }

// String is the plan as one log line.
func (p Plan) String() string {
	return fmt.Sprintf("kv cache %s; context %d (%s; fits %d); kv %s (%s/token); prefix cache %s; weights %s; %s; %s",
		p.Layout, p.Context, p.ContextReason, p.FitContext, humanize.IBytes(uint64(p.KVBytes)), humanize.IBytes(uint64(p.KVTokenBytes)),
		humanize.IBytes(uint64(p.PrefixBudget)), humanize.IBytes(uint64(p.Weights)), p.Memory, p.Reason)
}

// Log writes the plan to l, as every load and policy change must be logged.
func (p Plan) Log(l *slog.Logger) {
	l.Info("kv policy", "layout", p.Layout.String(), "context", p.Context, "fit_context", p.FitContext,
		"kv_bytes", p.KVBytes, "kv_token_bytes", p.KVTokenBytes, "prefix_budget", p.PrefixBudget,
		"weights", p.Weights, "available", p.Memory.Available, "total", p.Memory.Total,
		"pressure", p.Memory.Pressure.String(), "reason", p.Reason, "context_reason", p.ContextReason)
}
