package runner

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// TestVerificationPassesMatchSteps: verification passes (Model.ForwardRows) of several
// rows, with rows rejected and cut back (verifier.cut, which restores a hybrid model's
// recurrent states from a checkpoint and runs the kept rows again), give every row the
// logits a one-token decode step at its position gives: bit for bit on the CPU backend
// (with 8-bit inputs too), within MLX's batching tolerance on MLX (mlxTolerance of the
// cache's formats, and the same greedy token wherever the step's two best logits are
// further apart than that tolerance can swap, mayFlip), for every architecture
// family (sliding windows and recurrent states included), float and 4-bit weights, fp16
// and K8/V4 caches.
func TestVerificationPassesMatchSteps(t *testing.T) {
	archs := []struct {
		name string
		cfg  randmodel.Config
	}{
		{"llama", randmodel.Tiny("llama", 512)},
		{"qwen3", randmodel.Tiny("qwen3", 512)},
		{"qwen3_moe", randmodel.TinyMoE(512)},
		{"gemma3", randmodel.TinyGemma3(512)},
		{"qwen3_next", randmodel.TinyQwen3Next(512)},
		{"glm4_moe", randmodel.TinyGlm4Moe(512)},
		{"glm4_moe_lite", randmodel.TinyGlm4MoeLite(512)},
		{"gemma4", randmodel.TinyGemma4(512)},
		{"mistral", randmodel.TinyMistral(512)},
		{"mistral3", randmodel.TinyMistral3(512)},
		{"phi3", randmodel.TinyPhi3(512)},
	}
	a := kvstore.AffineFormat
	kvs := []struct {
		name string
		spec kvstore.Spec
	}{{"fp16", kvstore.SpecF16}, {"K8/V4", kvstore.Spec{K: a(8, 32), V: a(4, 32)}}}
	prompt := modeltest.Tokens(7, 13)
	const steps = 14
	// Passes: rows verified, then rows kept of them.
	passes := [][2]int{{6, 3}, {7, 7}, {3, 1}, {2, 2}}
	backends := append(testBackends(), int8Backend()...)
	if quant.Int8Kernel() {
		// The server's default: 8-bit inputs for a batch's rows of several sequences only,
		// so a verification pass, like a step alone, stays in float.
		backends = append(backends, testBackend{name: "cpu-int8-batches", exact: true, open: func(t *testing.T) compute.Backend {
			b := cpu.New(2)
			b.UseInt8Batches(true)
			return b
		}})
	}
	for _, be := range backends {
		for _, arch := range archs {
			hf := filepath.Join(t.TempDir(), "hf")
			if err := randmodel.Generate(hf, arch.cfg, randmodel.Options{Seed: 5}); err != nil {
				t.Fatal(err)
			}
			for _, bits := range []int{0, 4} {
				group := 32
				if strings.HasPrefix(be.name, "cpu-int8") {
					group = 64
				}
				dir := filepath.Join(t.TempDir(), "mlx")
				if _, err := create.Convert(context.Background(), hf, dir, create.Options{Bits: bits, GroupSize: group}); err != nil {
					t.Fatal(err)
				}
				e, err := be.load(t, dir, LoadOptions{Logger: quietLog(), Threads: 2})
				if err != nil {
					t.Fatal(err)
				}
				m := e.Model
				for _, kv := range kvs {
					name := fmt.Sprintf("%s/%s/q%d/%s", be.name, arch.name, bits, kv.name)
					ctx := context.Background()
					// Decode steps: tokens[i] fed at step i, want[i] its logits.
					caches := kvCaches(t, m, dir, kv.spec, 1)
					l, err := m.Forward(ctx, prompt, caches, false)
					if err != nil {
						t.Fatal(err)
					}
					var tokens []int32
					var want [][]float32
					for range steps {
						tok := int32(argmax(l))
						tokens = append(tokens, tok)
						if l, err = m.Forward(ctx, []int32{tok}, caches, false); err != nil {
							t.Fatal(err)
						}
						want = append(want, append([]float32(nil), l...))
					}
					// Verification passes over the same tokens.
					caches = kvCaches(t, m, dir, kv.spec, 1)
					if _, err := m.Forward(ctx, prompt, caches, false); err != nil {
						t.Fatal(err)
					}
					if err := m.FillCaches(caches); err != nil {
						t.Fatal(err)
					}
					v := newVerifier(m, caches)
					tol := mlxTolerance([]kvstore.Spec{kv.spec})
					seq := append([]int32(nil), prompt...)
					pos, worst := 0, 0.0
					for _, p := range passes {
						rows, err := v.pass(ctx, tokens[pos:pos+p[0]], caches)
						if err != nil {
							t.Fatal(err)
						}
						vocab := len(rows) / p[0]
						for r := range p[0] {
							got, w := rows[r*vocab:(r+1)*vocab], want[pos+r]
							if argmax(got) != argmax(w) && (be.exact || !mayFlip(w, tol)) {
								t.Errorf("%s: row %d of the pass at %d: greedy token %d, %d stepping", name, r, pos, argmax(got), argmax(w))
							}
							if be.exact {
								for j := range w {
									if math.Float32bits(got[j]) != math.Float32bits(w[j]) {
										t.Fatalf("%s: row %d of the pass at %d: logit %d is %v, %v stepping", name, r, pos, j, got[j], w[j])
									}
								}
							}
							worst = max(worst, modeltest.MaxRel(got, w))
						}
						seq = append(seq, tokens[pos:pos+p[1]]...)
						if err := v.cut(ctx, caches, len(seq), seq); err != nil {
							t.Fatal(err)
						}
						for i, c := range caches {
							if c.Len() != len(seq) {
								t.Fatalf("%s: layer %d holds %d positions after the cut, want %d", name, i, c.Len(), len(seq))
							}
						}
						pos += p[1]
					}
					for i, c := range caches {
						if r, ok := c.(interface{ RecurrentState() *kvstore.Recurrent }); ok {
							if cps := r.RecurrentState().Checkpoints(); len(cps) > 0 {
								t.Errorf("%s: layer %d keeps checkpoints %v after the passes", name, i, cps)
							}
						}
					}
					if !be.exact && worst > tol {
						t.Errorf("%s: verification rows differ from steps by %.3g relative (> %.2g)", name, worst, tol)
					}
				}
				e.Close()
			}
		}
	}
}
