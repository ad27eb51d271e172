package metal

import (
	"reflect"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
)

func TestLimitsFor(t *testing.T) {
	p := kvstore.Plan{Weights: 4 << 30, KVBytes: 1 << 30, Overhead: 600 << 20}
	if got := LimitsFor(p); got != (MemoryLimits{Wired: 5 << 30, Cache: 600 << 20}) {
		t.Errorf("LimitsFor = %+v", got)
	}
	if got := LimitsFor(kvstore.Plan{}); got != (MemoryLimits{}) {
		t.Errorf("an empty plan sets %+v; it must leave every limit alone", got)
	}
}

// SetLimits calls only the setters of the non-zero limits, and returns what they
// replaced.
func TestSetLimits(t *testing.T) {
	f := newFakeLib(false)
	set := map[string]uintptr{}
	setter := func(name string, prev uintptr) func(*uintptr, uintptr) int32 {
		return func(res *uintptr, v uintptr) int32 { set[name] = v; *res = prev; return 0 }
	}
	f.impls["mlx_set_wired_limit"] = setter("wired", 11)
	f.impls["mlx_set_cache_limit"] = setter("cache", 22)
	f.impls["mlx_set_memory_limit"] = setter("memory", 33)
	l, err := load(f.dynlib(), "/fake/libmlxc.dylib")
	if err != nil {
		t.Fatal(err)
	}
	prev, err := l.SetLimits(MemoryLimits{Wired: 5 << 30, Cache: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if prev != (MemoryLimits{Wired: 11, Cache: 22}) || len(set) != 2 || set["wired"] != 5<<30 || set["cache"] != 1<<20 {
		t.Errorf("previous %+v, set %v", prev, set)
	}
	f.impls["mlx_set_wired_limit"] = func(*uintptr, uintptr) int32 {
		msg := append([]byte("[metal::set_wired_limit] Setting a wired limit larger than the maximum working set size is not allowed."), 0)
		handleError(&msg[0], nil)
		return 1
	}
	l, _ = load(f.dynlib(), "/fake/libmlxc.dylib")
	if _, err := l.SetLimits(MemoryLimits{Wired: 1 << 50}); err == nil || err.Error() != "metal: mlx_set_wired_limit: [metal::set_wired_limit] Setting a wired limit larger than the maximum working set size is not allowed." {
		t.Errorf("a refused wired limit gave %v", err)
	}
}

// The wired limit is process-wide: with two models loaded it is the sum of their
// plans, capped at the device's recommended working set, and a closed backend's share
// is given back.
func TestWiredLimitAcrossBackends(t *testing.T) {
	f := newFakeLib(false)
	var wired []uintptr
	f.impls["mlx_set_wired_limit"] = func(res *uintptr, v uintptr) int32 { wired = append(wired, v); return 0 }
	f.impls["mlx_set_cache_limit"] = func(res *uintptr, v uintptr) int32 { return 0 }
	l, err := load(f.dynlib(), "/fake/libmlxc.dylib")
	if err != nil {
		t.Fatal(err)
	}
	start := func() *Backend {
		b := &Backend{lib: l, calls: make(chan func()), info: map[string]string{"max_recommended_working_set_size": "10000"}}
		go b.worker()
		return b
	}
	a, b := start(), start()
	defer close(a.calls)
	defer close(b.calls)
	if _, err := a.ApplyPlan(kvstore.Plan{Weights: 3000, KVBytes: 1000}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ApplyPlan(kvstore.Plan{Weights: 5000, KVBytes: 500}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ApplyPlan(kvstore.Plan{Weights: 5000, KVBytes: 2000}); err != nil { // over the working set
		t.Fatal(err)
	}
	if err := a.do(a.releasePlan); err != nil {
		t.Fatal(err)
	}
	if err := b.do(b.releasePlan); err != nil {
		t.Fatal(err)
	}
	want := []uintptr{4000, 9500, 10000, 7000, 0}
	if !reflect.DeepEqual(wired, want) {
		t.Errorf("wired limits set %v, want %v", wired, want)
	}
}
