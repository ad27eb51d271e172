package kvstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/kvstore/sysmem"
)

const gib = int64(1) << 30

// qwen3_8b is Qwen3-8B's cache shape with 4-bit weights.
func qwen3_8b() ModelShape {
	m := ModelShape{WeightBytes: 4600 << 20, MaxContext: 40960}
	for i := 0; i < 36; i++ {
		m.Layers = append(m.Layers, LayerShape{Kind: LayerFull, KVHeads: 8, KHeadDim: 128, VHeadDim: 128})
	}
	return m
}

func mem(total, avail int64, p sysmem.Pressure) sysmem.Info {
	return sysmem.Info{Total: uint64(total), Available: uint64(avail), Pressure: p, Source: "test"}
}

func TestPolicyNormal(t *testing.T) {
	m := qwen3_8b()
	p, err := Choose(PolicyInput{Model: m, NumCtx: 32768, Memory: mem(64*gib, 40*gib, sysmem.Normal)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Layout.String() != "K6h/V6h g64, 36 of 36 layers with KV" {
		t.Errorf("layout %q", p.Layout)
	}
	if q := p.Quality; !q.Measured() || q.Top1Clear < 0.99 || q.MeanKL > 1e-3 {
		t.Errorf("the default's measured quality %v", q)
	}
	// The documented formula, by hand.
	reserve := 64 * gib / 8
	overhead := 512<<20 + m.WeightBytes/50
	free := 40*gib - reserve - overhead - m.WeightBytes
	// 36 layers at 6/6 in groups of 64: 96 B of codes and two fp16 (scale, bias) pairs,
	// 104 B for a key and for a value per head.
	perToken := int64(8 * 36 * (104 + 104))
	if p.Reserve != reserve || p.Overhead != overhead || p.Free != free || p.KVTokenBytes != perToken {
		t.Errorf("reserve %d overhead %d free %d per token %d; want %d %d %d %d", p.Reserve, p.Overhead, p.Free, p.KVTokenBytes, reserve, overhead, free, perToken)
	}
	if p.Context != 32768 || p.KVBytes != 32768*perToken || p.FitContext != 40960 {
		t.Errorf("context %d fit %d kv %d", p.Context, p.FitContext, p.KVBytes)
	}
	if p.PrefixBudget != (free-p.KVBytes)/2 {
		t.Errorf("prefix budget %d, want %d", p.PrefixBudget, (free-p.KVBytes)/2)
	}
	if !strings.Contains(p.Reason, "policy") || !strings.Contains(p.String(), "K6h/V6h") {
		t.Errorf("reason %q, line %q", p.Reason, p.String())
	}
	if p.Peak() != m.WeightBytes+overhead+p.KVBytes || p.Headroom() != 40*gib-p.Peak() {
		t.Errorf("peak %d headroom %d", p.Peak(), p.Headroom())
	}
}

func TestPolicyWarnTightens(t *testing.T) {
	normal, _ := Choose(PolicyInput{Model: qwen3_8b(), NumCtx: 8192, Memory: mem(64*gib, 40*gib, sysmem.Normal)})
	p, err := Choose(PolicyInput{Model: qwen3_8b(), NumCtx: 8192, Memory: mem(64*gib, 40*gib, sysmem.Warn)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Layout.Base != (Spec{K: AffineFormat(4, 64), V: AffineFormat(4, 32)}) || p.Layout.BoundaryLayers != 2 {
		t.Errorf("under warn: %v", p.Layout)
	}
	// The boundary layers keep the default's spec, so that no step stores more bytes than
	// the one before, whatever the number of layers (hybrid's 4 KV layers are all boundary).
	if p.Layout.Boundary != normal.Layout.Base {
		t.Errorf("under warn: boundary %v, want the default's %v", p.Layout.Boundary, normal.Layout.Base)
	}
	for _, m := range []ModelShape{qwen3_8b(), hybrid()} {
		steps, err := Ladder(m, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := 1; i < len(steps); i++ {
			if a, b := steps[i-1].Layout.TokenBytes(m), steps[i].Layout.TokenBytes(m); b > a {
				t.Errorf("step %d of %v stores %d bytes a token, step %d %d", i+1, steps[i].Layout, b, i, a)
			}
		}
	}
	if p.Reserve != 2*normal.Reserve || p.PrefixBudget != (p.Free-p.KVBytes)/4 || p.PrefixBudget >= normal.PrefixBudget {
		t.Errorf("under warn: reserve %d prefix %d (normal %d, %d)", p.Reserve, p.PrefixBudget, normal.Reserve, normal.PrefixBudget)
	}
	if !strings.Contains(p.Reason, "warn") {
		t.Errorf("reason %q", p.Reason)
	}
}

func TestPolicyTightensToFitContext(t *testing.T) {
	m := qwen3_8b()
	// Free memory for 26000 tokens at K6h/V6h: 32768 need the next rung (K4/V4+boundary, 0.76 of the bytes).
	base, _ := Choose(PolicyInput{Model: m, NumCtx: 1024, Memory: mem(64*gib, 40*gib, sysmem.Normal)})
	avail := 40*gib - base.Free + 26000*base.KVTokenBytes
	p, err := Choose(PolicyInput{Model: m, NumCtx: 32768, Memory: mem(64*gib, avail, sysmem.Normal)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Layout.Base.K.Bits != 4 || p.Layout.BoundaryLayers != 2 || !strings.Contains(p.Reason, "tightened so that 32768 tokens fit") {
		t.Errorf("layout %v, reason %q", p.Layout, p.Reason)
	}
	if p.Context != 32768 || p.FitContext < 32768 {
		t.Errorf("context %d fit %d", p.Context, p.FitContext)
	}
	// Nothing fits 40960 × 36 layers in 20K tokens' worth: the context shrinks to what fits.
	avail = 40*gib - base.Free + 5000*base.KVTokenBytes
	p, err = Choose(PolicyInput{Model: m, NumCtx: 32768, Memory: mem(64*gib, avail, sysmem.Normal)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Layout.BoundaryLayers != 0 || p.Context >= 32768 || p.Context != p.FitContext || p.Context%BlockTokens != 0 {
		t.Errorf("layout %v context %d fit %d", p.Layout, p.Context, p.FitContext)
	}
	if p.KVBytes > p.Free || p.Layout.Bytes(m, p.Context+BlockTokens) <= p.Free {
		t.Errorf("context %d is not the largest block multiple that fits: kv %d free %d", p.Context, p.KVBytes, p.Free)
	}
	if !strings.Contains(p.Reason, "the tightest spec; context 32768 reduced to") {
		t.Errorf("reason %q", p.Reason)
	}
}

func TestPolicyCritical(t *testing.T) {
	m := qwen3_8b()
	_, err := Choose(PolicyInput{Model: m, NumCtx: 8192, Memory: mem(16*gib, 6*gib, sysmem.Critical)})
	if err == nil || !strings.Contains(err.Error(), "critical") || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("critical load: %v", err)
	}
	// 16 GiB machine: reserve 2 GiB doubled under pressure; weights 4.5 GiB + overhead 0.6 GiB + KV(256) + 4 GiB
	// is 3.1 GiB more than the 6 GiB available.
	if !strings.Contains(err.Error(), "3.1 GiB missing") {
		t.Errorf("missing amount: %v", err)
	}
	var me *MemoryError
	if !errors.As(err, &me) || !me.Critical || me.Missing != me.Need+me.Reserve-6*gib {
		t.Errorf("not a MemoryError with the missing amount: %#v", err)
	}
	if !me.Transient() || me.Total != 16*gib {
		t.Errorf("a model smaller than the machine refused for pressure is not transient: %#v", me)
	}
	// A model larger than the whole machine never fits: not transient.
	_, err = Choose(PolicyInput{Model: ModelShape{WeightBytes: 20 * gib, Layers: m.Layers}, NumCtx: 8192, Memory: mem(16*gib, 14*gib, sysmem.Normal)})
	if !errors.As(err, &me) || me.Transient() {
		t.Errorf("a model larger than the machine: %v, transient", err)
	}
	// Plenty available but the kernel says critical: still refused, without a negative amount.
	_, err = Choose(PolicyInput{Model: m, NumCtx: 8192, Memory: mem(64*gib, 60*gib, sysmem.Critical)})
	if err == nil || !strings.Contains(err.Error(), "retry when the pressure drops") {
		t.Errorf("critical with memory available: %v", err)
	}
	// A loaded model's new sequences get the tightest rung and no prefix cache.
	p, err := Choose(PolicyInput{Model: m, NumCtx: 8192, Memory: mem(64*gib, 30*gib, sysmem.Critical), Loaded: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.Layout.BoundaryLayers != 0 || p.Layout.Base.K.Bits != 4 || p.PrefixBudget != 0 {
		t.Errorf("critical, loaded: %v prefix %d", p.Layout, p.PrefixBudget)
	}
}

func TestPolicyNotEnoughMemory(t *testing.T) {
	_, err := Choose(PolicyInput{Model: qwen3_8b(), NumCtx: 8192, Memory: mem(8*gib, 5*gib, sysmem.Normal)})
	if err == nil || !strings.Contains(err.Error(), "not enough memory") || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("got %v", err)
	}
}

func TestPolicyFlagsWin(t *testing.T) {
	var o Options
	if err := o.Set("kv-bits", "(8, 8)", "--kv-bits"); err != nil {
		t.Fatal(err)
	}
	if err := o.Set("kv-boundary-layers", "0", "--kv-boundary-layers"); err != nil {
		t.Fatal(err)
	}
	if err := o.Set("quantized-kv-start", "1024", "--quantized-kv-start"); err != nil {
		t.Fatal(err)
	}
	p, err := Choose(PolicyInput{Model: qwen3_8b(), NumCtx: 8192, Memory: mem(64*gib, 40*gib, sysmem.Warn), Options: o})
	if err != nil {
		t.Fatal(err)
	}
	if p.Layout.String() != "K8/V8 g64/32, fp16 until 1024 tokens, 36 of 36 layers with KV" {
		t.Errorf("layout %q", p.Layout)
	}
	if !strings.Contains(p.Reason, "kv-bits from --kv-bits") {
		t.Errorf("reason %q", p.Reason)
	}
	// Groups and boundary settings apply to the policy's own rungs.
	o = Options{}
	_ = o.Set("kv-group-size", "32", "MLXG_KV_GROUP_SIZE")
	_ = o.Set("kv-boundary-layers", "1", "MLXG_KV_BOUNDARY_LAYERS")
	p, _ = Choose(PolicyInput{Model: qwen3_8b(), NumCtx: 8192, Memory: mem(64*gib, 40*gib, sysmem.Normal), Options: o})
	_ = o.Set("kv-boundary-bits", "8/6", "MLXG_KV_BOUNDARY_BITS")
	if p.Layout.String() != "K6h/V6h g32, boundary 1@8/8, 36 of 36 layers with KV" || p.Quality.Measured() {
		t.Errorf("layout %q, quality %v", p.Layout, p.Quality)
	}
	p, _ = Choose(PolicyInput{Model: qwen3_8b(), NumCtx: 8192, Memory: mem(64*gib, 40*gib, sysmem.Warn), Options: o})
	if p.Layout.String() != "K4/V4 g32, boundary 1@8/6, 36 of 36 layers with KV" {
		t.Errorf("layout %q", p.Layout)
	}
	// A group that does not divide head_dim is an error, not a crash.
	o = Options{}
	_ = o.Set("kv-group-size", "128", "--kv-group-size")
	small := ModelShape{WeightBytes: 1 << 20, Layers: []LayerShape{{Kind: LayerFull, KVHeads: 1, KHeadDim: 64, VHeadDim: 64}}}
	if _, err := Choose(PolicyInput{Model: small, Memory: mem(64*gib, 40*gib, sysmem.Normal), Options: o}); err == nil {
		t.Error("group 128 over head_dim 64 accepted")
	}
}

func TestPolicyHybridAndSliding(t *testing.T) {
	m := hybrid()
	m.WeightBytes, m.MaxContext = 2*gib, 262144
	p, err := Choose(PolicyInput{Model: m, Memory: mem(32*gib, 20*gib, sysmem.Normal)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Layout.String() != "K6h/V6h g64, 4 of 16 layers with KV" || p.Context != 262144 {
		t.Errorf("hybrid: %v, context %d", p.Layout, p.Context)
	}
	if p.KVBytes != p.Layout.Bytes(m, 262144) || p.KVBytes < 12<<20 {
		t.Errorf("hybrid kv %d", p.KVBytes)
	}
	// Gemma-like: 5 sliding layers per full one; sliding layers quantize too and cost at most their window.
	var g ModelShape
	for i := 0; i < 12; i++ {
		ls := LayerShape{Kind: LayerSliding, KVHeads: 4, KHeadDim: 256, VHeadDim: 256, Window: 1024}
		if i%6 == 5 {
			ls.Kind, ls.Window = LayerFull, 0
		}
		g.Layers = append(g.Layers, ls)
	}
	g.WeightBytes = gib
	p, err = Choose(PolicyInput{Model: g, NumCtx: 100000, Memory: mem(32*gib, 20*gib, sysmem.Normal)})
	if err != nil {
		t.Fatal(err)
	}
	if g64 := (Spec{K: AffineFormat(6, 64).Rotate(true), V: AffineFormat(6, 64).Rotate(true)}); p.Layout.Specs[0] != g64 || p.Layout.Specs[2] != g64 || p.Context != 100000 {
		t.Errorf("sliding: specs %v %v, context %d", p.Layout.Specs[0], p.Layout.Specs[2], p.Context)
	}
	// Layers 5 and 11 grow, at 6/6 in groups of 64 (208 B a row); head_dim 256.
	if p.KVTokenBytes != int64(2*4*(208+208)) {
		t.Errorf("sliding: %d bytes per token; only the 2 full layers grow", p.KVTokenBytes)
	}
}

// TestReserveUnderCgroup: the reserve is an eighth of the machine's memory, at least
// 2 GiB; under a memory cgroup's limit it scales with the limit, so a model that fits a
// 2 GiB cap beside its overhead and a small KV cache loads instead of being refused.
func TestReserveUnderCgroup(t *testing.T) {
	for _, c := range []struct {
		total   int64
		limited bool
		want    int64
	}{
		{64 * gib, false, 8 * gib},
		{4 * gib, false, 2 * gib},
		{64 * gib, true, 8 * gib},
		{16 * gib, true, 2 * gib},
		{6 * gib, true, 3 * gib / 2},
		{2 * gib, true, gib / 2},
		{512 << 20, true, 128 << 20},
	} {
		m := mem(c.total, c.total, sysmem.Normal)
		m.Limited = c.limited
		if got := reserveFor(m, false); got != c.want {
			t.Errorf("total %d limited %v: reserve %d, want %d", c.total, c.limited, got, c.want)
		}
	}
	m := qwen3_8b()
	m.WeightBytes = 768 << 20
	capped := mem(2*gib, 2*gib-100<<20, sysmem.Normal)
	if _, err := Choose(PolicyInput{Model: m, NumCtx: 4096, Memory: capped}); err == nil {
		t.Error("768 MiB of weights planned in 2 GiB of a machine without a limit (2 GiB reserve)")
	}
	capped.Limited = true
	p, err := Choose(PolicyInput{Model: m, NumCtx: 4096, Memory: capped})
	if err != nil {
		t.Fatalf("768 MiB of weights under a 2 GiB cgroup: %v", err)
	}
	if p.Reserve != gib/2 || p.Context < minLoadContext {
		t.Errorf("under a 2 GiB cgroup: reserve %d context %d", p.Reserve, p.Context)
	}
	// A model in streaming mode has the limit to itself: a small reserve, its own overhead.
	m.Streamed, m.Overhead = true, 100<<20
	s, err := Choose(PolicyInput{Model: m, NumCtx: 4096, Memory: capped})
	if err != nil {
		t.Fatal(err)
	}
	if s.Reserve != 64<<20 || s.Overhead != 100<<20 || s.Free != int64(capped.Available)-64<<20-100<<20-m.WeightBytes {
		t.Errorf("streamed under a 2 GiB cgroup: reserve %d overhead %d free %d", s.Reserve, s.Overhead, s.Free)
	}
	capped.Total, capped.Available = uint64(8*gib), uint64(8*gib)
	if got := reserveFor(capped, true); got != gib/4 {
		t.Errorf("streamed under an 8 GiB cgroup: reserve %d", got)
	}
	capped.Limited = false
	if got := reserveFor(capped, true); got != 2*gib {
		t.Errorf("streamed without a limit: reserve %d, want the machine's", got)
	}
}

func TestPolicyAutoContext(t *testing.T) {
	m := qwen3_8b()
	// Plenty of memory: the model's maximum, at the default layout.
	p, err := Choose(PolicyInput{Model: m, Memory: mem(64*gib, 40*gib, sysmem.Normal)})
	if err != nil {
		t.Fatal(err)
	}
	if !p.Auto || p.Context != 40960 || p.Layout.Base.K.Bits != 6 || !strings.Contains(p.ContextReason, "the model's maximum 40960") {
		t.Errorf("context %d layout %v auto %v reason %q", p.Context, p.Layout, p.Auto, p.ContextReason)
	}
	if p.KVBytes*autoShare > p.Free {
		t.Errorf("kv %d takes more than half the free %d", p.KVBytes, p.Free)
	}
	// Half the free memory holds 12000 tokens at K6h/V6h: the context is the block multiple below,
	// and the layout stays the default (no tightening for a context nobody asked for).
	base, _ := Choose(PolicyInput{Model: m, NumCtx: 1024, Memory: mem(16*gib, 12*gib, sysmem.Normal)})
	avail := 12*gib - base.Free + 2*12000*base.KVTokenBytes
	p, err = Choose(PolicyInput{Model: m, Memory: mem(16*gib, avail, sysmem.Normal)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Context != 12000-12000%BlockTokens || p.Layout.Base.K.Bits != 6 || p.Layout.BoundaryLayers != 0 {
		t.Errorf("context %d layout %v", p.Context, p.Layout)
	}
	if !strings.Contains(p.ContextReason, "fits in half") || !strings.Contains(p.Reason, "policy") || strings.Contains(p.Reason, "tightened") {
		t.Errorf("reason %q / %q", p.ContextReason, p.Reason)
	}
	if p.PrefixBudget != (p.Free-p.KVBytes)/prefixShare {
		t.Errorf("prefix budget %d", p.PrefixBudget)
	}
	// Less than AutoFloor fits in half: the floor, the ladder tightening to reach it.
	avail = 12*gib - base.Free + 3000*base.KVTokenBytes
	p, err = Choose(PolicyInput{Model: m, Memory: mem(16*gib, avail, sysmem.Normal)})
	if err != nil {
		t.Fatal(err)
	}
	if p.Context != AutoFloor || p.Layout.Base.K.Bits != 4 || !strings.Contains(p.ContextReason, "floor") {
		t.Errorf("context %d layout %v reason %q", p.Context, p.Layout, p.ContextReason)
	}
	// Under warn the auto context is planned at warn's first rung and reserve: smaller than at normal.
	normal, _ := Choose(PolicyInput{Model: m, Memory: mem(16*gib, 12*gib, sysmem.Normal)})
	warn, err := Choose(PolicyInput{Model: m, Memory: mem(16*gib, 12*gib, sysmem.Warn)})
	if err != nil {
		t.Fatal(err)
	}
	if warn.Layout.Base.K.Bits != 4 || warn.KVBytes >= normal.KVBytes || warn.KVBytes*autoShare > warn.Free {
		t.Errorf("warn: layout %v kv %d (normal %d) free %d", warn.Layout, warn.KVBytes, normal.KVBytes, warn.Free)
	}
	// A model that states no maximum: the floor, whatever the memory.
	nomax := m
	nomax.MaxContext = 0
	p, _ = Choose(PolicyInput{Model: nomax, Memory: mem(64*gib, 40*gib, sysmem.Normal)})
	if p.Context != AutoFloor || !strings.Contains(p.ContextReason, "no maximum") {
		t.Errorf("no maximum: context %d reason %q", p.Context, p.ContextReason)
	}
	// Explicit num_ctx wins, and says so.
	p, _ = Choose(PolicyInput{Model: m, NumCtx: 2048, Memory: mem(64*gib, 40*gib, sysmem.Normal)})
	if p.Auto || p.Context != 2048 || p.ContextReason != "num_ctx 2048 asked" {
		t.Errorf("explicit: context %d reason %q", p.Context, p.ContextReason)
	}
	p, _ = Choose(PolicyInput{Model: m, NumCtx: 1e9, Memory: mem(64*gib, 40*gib, sysmem.Normal)})
	if p.Context != 40960 || !strings.Contains(p.ContextReason, "lowered to the model's maximum 40960") {
		t.Errorf("1e9: context %d reason %q", p.Context, p.ContextReason)
	}
}

// TestPolicyVision: a vision tower's activations (ModelShape.Vision) come out of the free memory and
// into the peak, and count in what a refused load misses.
func TestPolicyVision(t *testing.T) {
	m := qwen3_8b()
	at := mem(64*gib, 40*gib, sysmem.Normal)
	plain, err := Choose(PolicyInput{Model: m, NumCtx: 32768, Memory: at})
	if err != nil {
		t.Fatal(err)
	}
	m.Vision = 3 * gib
	v, err := Choose(PolicyInput{Model: m, NumCtx: 32768, Memory: at})
	if err != nil {
		t.Fatal(err)
	}
	if v.Vision != 3*gib || v.Free != plain.Free-3*gib || v.Peak() != plain.Peak()+3*gib || v.Context != plain.Context {
		t.Errorf("with 3 GiB of vision: free %d peak %d context %d; without: free %d peak %d context %d", v.Free, v.Peak(), v.Context, plain.Free, plain.Peak(), plain.Context)
	}
	// Memory that holds the text model but not its tower's activations as well.
	tight := mem(64*gib, plain.Weights+plain.Overhead+plain.Reserve+gib, sysmem.Normal)
	if _, err := Choose(PolicyInput{Model: qwen3_8b(), NumCtx: 4096, Memory: tight}); err != nil {
		t.Fatalf("without vision: %v", err)
	}
	var me *MemoryError
	if _, err := Choose(PolicyInput{Model: m, NumCtx: 4096, Memory: tight}); !errors.As(err, &me) || me.Need < m.WeightBytes+3*gib {
		t.Errorf("with vision in memory for the text model only: %v", err)
	}
}
