package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
)

// ownBackend is a per-model backend over the CPU one that records its life: the plan it was
// given, and whether the model's checkpoint was still open when it was released.
type ownBackend struct {
	compute.Backend
	events *[]string
	fail   error // what ApplyPlan returns
	mu     sync.Mutex
	src    compute.Source
	name   string // a tensor the model bound through it
	plan   *kvstore.Plan
}

func (b *ownBackend) Weight(src compute.Source, prefix string, q compute.Quant) (compute.Weight, error) {
	b.mu.Lock()
	b.src, b.name = src, prefix+".weight"
	b.mu.Unlock()
	return b.Backend.Weight(src, prefix, q)
}

func (b *ownBackend) ApplyMemoryPlan(p kvstore.Plan) error {
	b.plan = &p
	*b.events = append(*b.events, "apply")
	return b.fail
}

func (b *ownBackend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.src != nil {
		if _, ok := b.src.Tensor(b.name); !ok {
			*b.events = append(*b.events, "release after the model closed")
			return nil
		}
	}
	*b.events = append(*b.events, "release")
	return nil
}

// Each model gets its own backend from ForModel, which is given the policy's plan and is
// released before the model closes (and when a load fails).
func TestEngineLoaderBackendPerModel(t *testing.T) {
	ckpt := scriptedCheckpoint(t)
	var events []string
	shared := cpu.New(2)
	var made []*ownBackend
	var applyErr error
	l := &EngineLoader{
		Backend: shared,
		ForModel: func() (compute.Backend, error) {
			events = append(events, "for model")
			b := &ownBackend{Backend: cpu.New(2), events: &events, fail: applyErr}
			made = append(made, b)
			return b, nil
		},
		KV:     &kvstore.Policy{Sensor: sysmem.Fixed{Total: 64 << 30, Available: 40 << 30}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	lm := &registry.LocalModel{Dir: ckpt, Size: 50 << 20}
	var models []Model
	for range 2 {
		p, err := l.Plan(lm, 2048, 0)
		if err != nil {
			t.Fatal(err)
		}
		m, err := l.Load(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		models = append(models, m)
	}
	if len(made) != 2 || made[0] == made[1] || made[0].plan == nil || made[0].plan.Context != 2048 {
		t.Fatalf("backends made %d, plan %+v", len(made), made)
	}
	for _, m := range models {
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"for model", "apply", "for model", "apply", "release", "release"}
	if !equalStrings(events, want) {
		t.Errorf("events %q, want %q", events, want)
	}

	// A load that fails releases the backend it was given.
	events = nil
	applyErr = errors.New("no memory limits here")
	p, err := l.Plan(lm, 2048, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load(context.Background(), p); !errors.Is(err, applyErr) {
		t.Fatalf("load with a failing backend: %v", err)
	}
	if want := []string{"for model", "apply", "release"}; !equalStrings(events, want) {
		t.Errorf("failed load: events %q, want %q", events, want)
	}

	// Under critical pressure the plan is refused: no backend is made.
	events = nil
	l.KV.Sensor = sysmem.Fixed{Total: 64 << 30, Available: 40 << 30, Pressure: sysmem.Critical}
	_, err = l.Plan(lm, 2048, 0)
	var me *kvstore.MemoryError
	if !errors.As(err, &me) {
		t.Fatalf("plan under critical pressure: %v", err)
	}
	if len(events) != 0 {
		t.Errorf("refused plan: events %q", events)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// recyclingBackend records what Recycle was given.
type recyclingBackend struct {
	compute.Backend
	got [][]float32
}

func (b *recyclingBackend) Recycle(x []float32) { b.got = append(b.got, x) }

// TestCaptureBackendRecycles: the wrapper every served model's backend goes through passes
// Recycle on (hiding it, a served model would allocate its logits every decode step), and
// does nothing for a backend without a pool.
func TestCaptureBackendRecycles(t *testing.T) {
	inner := &recyclingBackend{Backend: cpu.New(1)}
	cb := &captureBackend{Backend: inner}
	logits := []float32{1, 2, 3}
	cb.Recycle(logits)
	if len(inner.got) != 1 || &inner.got[0][0] != &logits[0] {
		t.Fatalf("Recycle reached the wrapped backend with %v, want the logits once", inner.got)
	}
	(&captureBackend{Backend: plainBackend{cpu.New(1)}}).Recycle(logits) // no pool: no panic
}

// plainBackend hides the CPU backend's optional methods.
type plainBackend struct{ compute.Backend }
