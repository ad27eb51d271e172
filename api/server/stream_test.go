package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/residency"
)

// TestPlanStreaming: with a weight budget a mixture-of-experts model plans in streaming
// mode, the KV policy counting the budget instead of the weights; a model that fits and
// has no budget plans as usual.
func TestPlanStreaming(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	if err := randmodel.Generate(hf, randmodel.TinyMoE(256), randmodel.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	var size int64
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			size += fi.Size()
		}
	}
	m := &registry.LocalModel{Name: "moe", Dir: out, Size: size}
	const gib = 1 << 30
	l := &EngineLoader{KV: &kvstore.Policy{Sensor: sysmem.Fixed{Total: 16 * gib, Available: 8 * gib}}}
	p, err := l.Plan(m, 512, 0)
	if err != nil || p.WeightBudget != 0 {
		t.Fatalf("no budget: %+v, %v", p, err)
	}
	experts, err := residency.ExpertBytes(out)
	if err != nil || experts <= 0 || experts >= size {
		t.Fatalf("expert bytes %d of %d: %v", experts, size, err)
	}
	budget := size - experts/2
	l.WeightBudget = budget
	s, err := l.Plan(m, 512, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s.WeightBudget != budget || s.Experts != experts || s.Weights != size || s.kv == nil || s.kv.plan.Weights != budget || s.Size >= p.Size {
		t.Errorf("streaming plan %+v (weights %d), mapped %+v", s, s.kv.plan.Weights, p)
	}
}

// TestPlanStreamingDense: a dense model whose weights do not fit the memory the policy
// finds plans in streaming mode (its layers streamed) instead of being refused, with a
// budget below its weights; with no memory left beside its pinned weights it is refused.
func TestPlanStreamingDense(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	cfg := randmodel.Tiny("llama", 256)
	cfg.NumLayers = 8
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	var size int64
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			size += fi.Size()
		}
	}
	layers, dense, err := residency.StreamedBytes(out)
	if err != nil || !dense || layers <= 0 || layers >= size {
		t.Fatalf("streamed bytes %d of %d, dense %v: %v", layers, size, dense, err)
	}
	m := &registry.LocalModel{Name: "dense", Dir: out, Size: size}
	const gib = 1 << 30
	// The memory available is the reserve (2 GiB on a machine of 16 GiB), the runtime,
	// the pinned weights and extra: too little for the mapped model (the policy counts
	// 512 MiB of overhead); the layers get extra less the KV cache and a prompt pass's
	// activations.
	info, err := registry.ReadInfo(out)
	if err != nil {
		t.Fatal(err)
	}
	pinned := size - layers
	extra := layers/2 + 16*streamRowBytes(info) + 600_000 // the KV cache at 512 tokens: 576 KiB
	avail := uint64(2*gib + streamFixed(info) + pinned + extra)
	l := &EngineLoader{KV: &kvstore.Policy{Sensor: sysmem.Fixed{Total: 16 * gib, Available: avail}}}
	p, err := l.Plan(m, 512, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Dense || p.Experts != layers || p.kv == nil || p.MaxBatch < streamMinBatch {
		t.Fatalf("plan %+v, want a dense streaming plan", p)
	}
	act := int64(p.MaxBatch) * streamRowBytes(info)
	if want := pinned + extra - p.kv.plan.KVBytes - act; p.WeightBudget != want || want >= size {
		t.Errorf("budget %d, want %d (pinned %d, left %d, KV %d, activations of %d rows %d)", p.WeightBudget, want, pinned, extra, p.kv.plan.KVBytes, p.MaxBatch, act)
	}
	if p.kv.plan.Weights != p.WeightBudget || p.kv.plan.Overhead != streamFixed(info)+act || p.kv.plan.Reserve != 2*gib ||
		p.kv.plan.Free != p.kv.plan.KVBytes || p.kv.plan.PrefixBudget != 0 {
		t.Errorf("the load's KV plan: %+v", p.kv.plan)
	}
	if streamBatchFor(1000, 4*512*1000) != 512 || streamBatchFor(1000, 4*100*1000) != 64 || streamBatchFor(1000, 0) != streamMinBatch {
		t.Error("streamBatchFor")
	}
	l.KV = &kvstore.Policy{Sensor: sysmem.Fixed{Total: 16 * gib, Available: 2 * gib}}
	if _, err := l.Plan(m, 512, 0); err == nil {
		t.Error("planned with no memory beside the reserve")
	}
}

func TestBudgetUnderPressure(t *testing.T) {
	for _, c := range []struct {
		p    sysmem.Pressure
		want int64
	}{{sysmem.Normal, 1000}, {sysmem.Warn, 600}, {sysmem.Critical, 400}} {
		if got := budgetUnderPressure(1000, 200, c.p); got != c.want {
			t.Errorf("%v: %d, want %d", c.p, got, c.want)
		}
	}
	// followPressure: the budget halves under warn pressure, and the decode loan goes.
	path := filepath.Join(t.TempDir(), "w.bin")
	if err := os.WriteFile(path, make([]byte, 8<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	res := residency.New(residency.Options{Budget: 1 << 20, Buffered: true})
	defer res.Close()
	for u := range 8 {
		if _, err := res.Add([]residency.Segment{{Path: path, Off: int64(u) << 10, Len: 1 << 10}}); err != nil {
			t.Fatal(err)
		}
	}
	lp := &LoadPlan{WeightBudget: 4 << 10}
	followPressure(res, lp, &kvstore.Plan{})
	res.Lend(2 << 10)
	for u := range 8 {
		h, err := res.Acquire(u)
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
	if s := res.Stats(); s.InMemory != 6 {
		t.Fatalf("budget of 4 units and 2 lent: %d in memory", s.InMemory)
	}
	warn := kvstore.Plan{}
	warn.Memory.Pressure = sysmem.Warn
	followPressure(res, lp, &warn)
	if s := res.Stats(); s.InMemory != 2 || s.Lent != 0 {
		t.Errorf("under warn pressure: %d in memory, %d lent (want 2, 0)", s.InMemory, s.Lent)
	}
	if got := residency.Budget(100, 1000, 400); got != 500 {
		t.Errorf("Budget: %d", got)
	}
	if got := residency.Budget(100, 1000, 4000); got != 1100 {
		t.Errorf("Budget with room for every expert: %d", got)
	}
	if got := residency.Budget(100, 1000, -5); got != 0 {
		t.Errorf("Budget with nothing spare: %d", got)
	}
}

// TestPlanDecodeLoan: under a memory cgroup's limit a streamed mixture-of-experts
// model's plan lends the room of its prompt passes' activations beyond decodeRows rows
// to the expert cache while it decodes, at most what the cache lacks of every expert;
// without a limit (the memory shared with other applications) it lends nothing.
func TestPlanDecodeLoan(t *testing.T) {
	dir := t.TempDir()
	hf, out := filepath.Join(dir, "hf"), filepath.Join(dir, "mlx")
	// Experts large beside a row's activations, as in a real MoE.
	cfg := randmodel.TinyMoE(256)
	cfg.NumExperts, cfg.MoEIntermediate = 64, 512
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, out, create.Options{Bits: 4, GroupSize: 32}); err != nil {
		t.Fatal(err)
	}
	var size int64
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			size += fi.Size()
		}
	}
	experts, err := residency.ExpertBytes(out)
	if err != nil {
		t.Fatal(err)
	}
	m := &registry.LocalModel{Name: "moe", Dir: out, Size: size}
	info, err := registry.ReadInfo(out)
	if err != nil {
		t.Fatal(err)
	}
	rows := streamRowBytes(info)
	const mib = 1 << 20
	plan := func(total int64, limited bool) (*LoadPlan, error) {
		l := &EngineLoader{KV: &kvstore.Policy{Sensor: sysmem.Fixed{Total: uint64(total), Available: uint64(total), Limited: limited}},
			Logger: slog.New(slog.DiscardHandler)}
		return l.Plan(m, 512, 0)
	}
	for _, limited := range []bool{true, false} {
		// The memory at which the plan keeps half of the experts: the overheads dwarf
		// this tiny model, so look for it.
		lo, hi := int64(16*mib), int64(4096*mib)
		for hi-lo > 1024 {
			mid := (lo + hi) / 2
			// Too little memory to load, or a budget below half of the experts: more.
			if p, err := plan(mid, limited); err != nil || p.WeightBudget > 0 && p.WeightBudget < size-experts/2 {
				lo = mid
			} else {
				hi = mid
			}
		}
		p, err := plan(hi, limited)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("limited %v: budget %d of %d, max batch %d, loan %d", limited, p.WeightBudget, size, p.MaxBatch, p.DecodeLoan)
		if p.WeightBudget <= 0 || p.WeightBudget >= size {
			t.Fatalf("limited %v: the model does not stream: %+v", limited, p)
		}
		want := int64(0)
		if limited && p.MaxBatch > 2*decodeRows {
			want = min(int64(p.MaxBatch-decodeRows)*rows, size-p.WeightBudget)
		}
		if p.DecodeLoan != want || limited && want == 0 {
			t.Errorf("limited %v: loan %d, want %d (max batch %d, %d bytes a row)", limited, p.DecodeLoan, want, p.MaxBatch, rows)
		}
	}
}
