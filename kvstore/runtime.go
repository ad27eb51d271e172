package kvstore

import (
	"fmt"
	"log/slog"
	"sync"

	"github.com/mlxg/mlxg/kvstore/sysmem"
)

// Policy applies Choose with a fresh memory reading on every call, so the scheduler can
// ask on each load and each new sequence: under warn new sequences get tighter specs
// and a smaller prefix budget, under critical new loads are refused. It logs a model's
// plan whenever it changes. Safe for concurrent use.
type Policy struct {
	Options Options
	Sensor  sysmem.Sensor // nil: sysmem.System()
	Log     *slog.Logger  // nil: slog.Default()

	mu   sync.Mutex
	last map[string]string
}

// Plan reads memory and chooses for the model known as key (its directory, say).
// loaded says its weights are already resident.
func (p *Policy) Plan(key string, m ModelShape, numCtx int, loaded bool) (Plan, error) {
	return p.plan(key, m, numCtx, loaded, 0)
}

// PlanFreeing is Plan for a model about to be loaded once loaded models of freed bytes
// are unloaded (the scheduler's EstimateFreeing): the reading counts them as available
// and weighs the pressure level again (sysmem.Info.Freed), so that the pressure a
// running model causes does not refuse what replaces it.
func (p *Policy) PlanFreeing(key string, m ModelShape, numCtx int, freed int64) (Plan, error) {
	return p.plan(key, m, numCtx, false, freed)
}

func (p *Policy) plan(key string, m ModelShape, numCtx int, loaded bool, freed int64) (Plan, error) {
	sensor := p.Sensor
	if sensor == nil {
		sensor = sysmem.System()
	}
	mem, err := sensor.Read()
	if err != nil {
		return Plan{}, fmt.Errorf("reading memory for the KV-cache policy: %w", err)
	}
	mem = mem.Freed(uint64(max(freed, 0)))
	plan, err := Choose(PolicyInput{Model: m, NumCtx: numCtx, Memory: mem, Options: p.Options, Loaded: loaded})
	if err != nil {
		return Plan{}, err
	}
	log := p.Log
	if log == nil {
		log = slog.Default()
	}
	summary := fmt.Sprintf("%s|%d|%v", plan.Layout, plan.Context, mem.Pressure)
	p.mu.Lock()
	changed := p.last[key] != summary
	if changed {
		if p.last == nil {
			p.last = map[string]string{}
		}
		p.last[key] = summary
	}
	p.mu.Unlock()
	if changed {
		plan.Log(log.With("model", key))
	}
	return plan, nil
}

// Caches plans for a new sequence of a loaded model and makes its caches.
func (p *Policy) Caches(key string, m ModelShape, numCtx int) ([]Layer, Plan, error) {
	return p.caches(key, m, numCtx, 0)
}

// caches is Caches with freed bytes counted as available (Sequences.Freeing).
func (p *Policy) caches(key string, m ModelShape, numCtx int, freed int64) ([]Layer, Plan, error) {
	plan, err := p.plan(key, m, numCtx, true, freed)
	if err != nil {
		return nil, Plan{}, err
	}
	caches, err := NewCaches(m, plan.Layout)
	return caches, plan, err
}
