package glm4moe_test

import (
	"context"
	"math"
	"testing"

	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/residency"
)

// TestStreamedExpertsExact: a 4-bit GLM of either architecture whose routed experts are
// read through the residency manager, under a budget that holds none of them beyond those
// in use, gives bit-identical logits to the mapped model, prompt and decode. The latent
// attention's per-head stacks (embed_q, unembed_out) stay mapped: they are not experts.
func TestStreamedExpertsExact(t *testing.T) {
	for _, arch := range []string{"glm4_moe", "glm4_moe_lite"} {
		_, out := tiny(t, arch, 4)
		b := cpu.New(2)
		run := func(m *model.Model) []float32 {
			caches, err := m.NewCaches(false)
			if err != nil {
				t.Fatal(err)
			}
			all := modeltest.Forward(t, m, caches, modeltest.Tokens(3, 20), 4)
			for _, tok := range modeltest.Tokens(5, 6) {
				l, err := m.Forward(context.Background(), []int32{tok}, caches, false)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, l...)
			}
			return all
		}
		plain, err := model.Load(out, b)
		if err != nil {
			t.Fatal(err)
		}
		want := run(plain)
		plain.Close()
		res := residency.New(residency.Options{Budget: 1 << 40, Policy: residency.Frequency, Workers: 2})
		m, err := model.LoadWith(out, b, model.LoadConfig{Residency: res})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Stats()
		if s.Units != 2*8 || s.Streamed == 0 { // 3 layers, the first dense, 8 experts each
			t.Fatalf("%s after load: %+v, want 16 streamed experts", arch, s)
		}
		res.SetBudget(s.Pinned)
		got := run(m)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("%s: logit %d: %v streamed, %v mapped", arch, i, got[i], want[i])
			}
		}
		if s := res.Stats(); s.Misses == 0 {
			t.Fatalf("%s: no expert was read: %+v", arch, s)
		}
		m.Close()
	}
}
