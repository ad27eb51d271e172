package kvstore

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/kvstore/sysmem"
)

// changing is a Sensor whose reading a test changes between calls.
type changing struct{ info sysmem.Info }

func (c *changing) Read() (sysmem.Info, error) { return c.info, nil }

type failing struct{}

func (failing) Read() (sysmem.Info, error) { return sysmem.Info{}, errors.New("no /proc") }

func TestPolicyFollowsPressure(t *testing.T) {
	var logs strings.Builder
	sensor := &changing{mem(64*gib, 40*gib, sysmem.Normal)}
	p := &Policy{Sensor: sensor, Log: slog.New(slog.NewTextHandler(&logs, nil))}
	m := qwen3_8b()

	if _, err := p.Plan("m", m, 8192, false); err != nil {
		t.Fatal(err)
	}
	caches, plan, err := p.Caches("m", m, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if len(caches) != 36 || caches[0].(*Quantized).Spec() != (Spec{K: AffineFormat(6, 64).Rotate(true), V: AffineFormat(6, 64).Rotate(true)}) ||
		caches[10].(*Quantized).Spec() != plan.Layout.Base || plan.Layout.Base.V.Bits != 6 {
		t.Fatalf("normal: %v", plan.Layout)
	}
	if n := strings.Count(logs.String(), "kv policy"); n != 1 {
		t.Errorf("an unchanged plan logged %d times:\n%s", n, logs.String())
	}

	sensor.info.Pressure = sysmem.Warn
	_, plan, err = p.Caches("m", m, 8192)
	if err != nil || plan.Layout.Base.K.Bits != 4 {
		t.Fatalf("warn: %v, %v", plan.Layout, err)
	}
	if !strings.Contains(logs.String(), "pressure=warn") {
		t.Errorf("the change was not logged:\n%s", logs.String())
	}

	sensor.info.Pressure = sysmem.Critical
	if _, err := p.Plan("other", m, 8192, false); err == nil || !strings.Contains(err.Error(), "critical") {
		t.Errorf("critical load: %v", err)
	}
	if _, plan, err = p.Caches("m", m, 8192); err != nil || plan.PrefixBudget != 0 || plan.Layout.BoundaryLayers != 0 {
		t.Errorf("critical, new sequence of a loaded model: %v prefix %d, %v", plan.Layout, plan.PrefixBudget, err)
	}

	p.Sensor = failing{}
	if _, err := p.Plan("m", m, 8192, true); err == nil || !strings.Contains(err.Error(), "no /proc") {
		t.Errorf("sensor failure: %v", err)
	}
}

// TestPlanFreeing: the memory of models the scheduler would unload counts as available, and the level is
// weighed again with it.
func TestPlanFreeing(t *testing.T) {
	m := qwen3_8b()
	// A 16 GiB machine with half a GiB available while another model is loaded: critical.
	sensor := &changing{sysmem.Info{Total: uint64(16 * gib), Available: uint64(1 * gib / 2), Pressure: sysmem.Critical, Source: "test"}}
	p := &Policy{Sensor: sensor, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if _, err := p.Plan("m", m, 8192, false); err == nil {
		t.Fatal("loaded with half a GiB available")
	}
	plan, err := p.PlanFreeing("m", m, 8192, 10*gib)
	if err != nil {
		t.Fatalf("with 10 GiB freed: %v", err)
	}
	if plan.Memory.Available != uint64(21*gib/2) || plan.Memory.Pressure != sysmem.Normal {
		t.Errorf("freed reading: %v", plan.Memory)
	}
	if _, err := p.PlanFreeing("m", m, 8192, 2*gib); err == nil {
		t.Error("loaded with 2.5 GiB available")
	}
}

// The first sequence of a load gets the load's plan without reading memory again; later ones are
// planned from a fresh reading.
func TestSequencesFirstTakesTheLoadPlan(t *testing.T) {
	sensor := &changing{mem(64*gib, 40*gib, sysmem.Normal)}
	p := &Policy{Sensor: sensor, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	m := qwen3_8b()
	load, err := p.Plan("m", m, 8192, false)
	if err != nil {
		t.Fatal(err)
	}
	var seen []Plan
	seqs := p.Sequences("m", m, load, func(pl Plan) { seen = append(seen, pl) })
	p.Sensor = failing{} // the first sequence must not read memory
	caches, plan, err := seqs.Caches(load.Context)
	if err != nil || len(caches) != 36 || plan.Layout.String() != load.Layout.String() || plan.PrefixBudget != load.PrefixBudget {
		t.Fatalf("first sequence: %v, %v (load %v)", plan.Layout, err, load.Layout)
	}
	p.Sensor = sensor
	sensor.info.Pressure = sysmem.Warn
	if _, plan, err = seqs.Caches(load.Context); err != nil || plan.Layout.Base.K.Bits != 4 || plan.Memory.Pressure != sysmem.Warn {
		t.Fatalf("second sequence under warn: %v, %v", plan.Layout, err)
	}
	if len(seen) != 2 || seen[0].Memory.Pressure != sysmem.Normal || seen[1].Memory.Pressure != sysmem.Warn {
		t.Errorf("onPlan saw %d plans: %+v", len(seen), seen)
	}
}

// A model that gives memory back under pressure (a streamed model's expert cache) has it
// counted as available when a later sequence is planned: the memory it fills as planned is
// no pressure, while a shortage beyond it still is.
func TestSequencesFreeing(t *testing.T) {
	m := qwen3_8b()
	m.WeightBytes, m.Streamed, m.Overhead = 1<<30, true, 100<<20
	limited := mem(2*gib, 2*gib, sysmem.Normal)
	limited.Limited = true
	sensor := &changing{limited}
	p := &Policy{Sensor: sensor, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	load, err := p.Plan("m", m, 4096, false)
	if err != nil {
		t.Fatal(err)
	}
	var cache int64 = 700 << 20
	seqs := p.Sequences("m", m, load, nil)
	seqs.Freeing(func() int64 { return cache })
	if _, _, err := seqs.Caches(4096); err != nil {
		t.Fatal(err)
	}
	// Loaded and its cache full: 150 MiB available, critical by itself.
	sensor.info.Available, sensor.info.Pressure = 150<<20, sysmem.Critical
	_, plan, err := seqs.Caches(4096)
	if err != nil || plan.Memory.Pressure != sysmem.Normal || plan.Memory.Available != 850<<20 {
		t.Fatalf("with the cache counted: %v, pressure %v, available %d", err, plan.Memory.Pressure, plan.Memory.Available)
	}
	cache = 0 // nothing to give back: the pressure is real
	if _, plan, err = seqs.Caches(4096); err == nil && plan.Memory.Pressure != sysmem.Critical {
		t.Errorf("without a cache: pressure %v", plan.Memory.Pressure)
	}
}
