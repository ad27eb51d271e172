package kvstore

import "sync/atomic"

// Sequences makes the KV caches of one loaded model's sequences under a Policy. The first
// sequence gets the plan the model was loaded with: it was made for this context from a reading
// taken just before the load, so planning again would read memory and choose the same. Each later
// sequence is planned from a fresh reading (Policy.Caches), so that warn pressure tightens new
// sequences' specs and shrinks their prefix budget, and critical empties it. Safe for concurrent use.
type Sequences struct {
	policy *Policy
	key    string
	shape  ModelShape
	onPlan func(Plan)
	load   atomic.Pointer[Plan] // the load's plan, until a sequence takes it
	freed  atomic.Pointer[func() int64]
}

// Freeing makes each later sequence's reading count freed() more bytes as available
// (sysmem.Info.Freed): memory the model holds that it gives back under pressure, such as
// the expert cache of a model in streaming mode, which would otherwise read as pressure
// that the model itself causes.
func (s *Sequences) Freeing(freed func() int64) { s.freed.Store(&freed) }

// Sequences is the caches of the model known as key, of shape m, loaded with the plan load
// (this policy's Plan with loaded false). onPlan, when not nil, is given each sequence's plan
// before its caches are made (the prefix cache's budget follows it).
func (p *Policy) Sequences(key string, m ModelShape, load Plan, onPlan func(Plan)) *Sequences {
	s := &Sequences{policy: p, key: key, shape: m, onPlan: onPlan}
	s.load.Store(&load)
	return s
}

// Caches plans a new sequence of numCtx tokens and makes its caches.
func (s *Sequences) Caches(numCtx int) ([]Layer, Plan, error) {
	if plan := s.load.Swap(nil); plan != nil && plan.Context == numCtx {
		if s.onPlan != nil {
			s.onPlan(*plan)
		}
		caches, err := NewCaches(s.shape, plan.Layout)
		return caches, *plan, err
	}
	var freed int64
	if f := s.freed.Load(); f != nil {
		freed = (*f)()
	}
	caches, plan, err := s.policy.caches(s.key, s.shape, numCtx, freed)
	if err == nil && s.onPlan != nil {
		s.onPlan(plan)
	}
	return caches, plan, err
}
