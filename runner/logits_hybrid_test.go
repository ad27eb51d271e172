package runner

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/qwen3moe"
	"github.com/mlxg/mlxg/runner/qwen3next"
)

// hybridCase is one case of testdata/refs_hybrid.json (scripts/refs/hybrid.py): a
// refCase plus, for mixture-of-experts models, the experts transformers' router picked
// per layer and prompt position, best first.
type hybridCase struct {
	refCase
	Routes map[string][][]int `json:"routes"`
}

// routers returns the expert blocks of a qwen3_moe or qwen3_next network by layer.
func routers(net any) map[int]*qwen3moe.Sparse {
	out := map[int]*qwen3moe.Sparse{}
	switch n := net.(type) {
	case *qwen3moe.Network:
		for i, l := range n.Layers {
			if l.MoE != nil {
				out[i] = l.MoE
			}
		}
	case *qwen3next.Network:
		for i, l := range n.Layers {
			if l.MoE != nil {
				out[i] = l.MoE.Sparse
			}
		}
	}
	return out
}

// TestHybridLogitsAgainstTransformers is TestLogitsAgainstTransformers for qwen3_moe,
// gemma3_text and qwen3_next (float32 and MLX-quantized random checkpoints, the
// mixture-of-experts ones converted to the MLX layout by registry/create): last-position
// logits within relative error 1e-3 for the prompt in one pass and in chunks of 5 (with
// exact float32 sliding windows for Gemma 3),
// identical greedy tokens, and for the mixture-of-experts layers the same experts, in
// the same order, as transformers' router for every prompt position.
func TestHybridLogitsAgainstTransformers(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "refs_hybrid.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []hybridCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("testdata/refs_hybrid.json has no cases")
	}
	root, built := t.TempDir(), map[string]string{}
	for _, c := range f.Cases {
		for _, be := range testBackends() {
			t.Run(be.name+"/"+c.Name, func(t *testing.T) {
				dir := buildRef(t, c.refCase, root, built)
				tol := be.tol
				if c.Quantize != nil {
					tol = be.qtol
				}
				e, err := be.load(t, dir, LoadOptions{KVCache: FP32Cache, Logger: quietLog()})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				if len(c.Logits) != e.Model.Config.VocabSize || len(c.Greedy) < 8 {
					t.Fatalf("fixture has %d logits and %d greedy tokens", len(c.Logits), len(c.Greedy))
				}

				// Routing: capture each expert block's router logits during the one-pass prefill.
				picked := map[int][][]int{}
				rs := routers(e.Model.Network())
				if len(c.Routes) != len(rs) {
					t.Fatalf("the fixture routes %d layers, the model has %d expert blocks", len(c.Routes), len(rs))
				}
				for layer, s := range rs {
					s.OnRoute = func(ctx compute.Context, logits compute.Tensor) {
						v, err := ctx.Float32s(logits)
						if err != nil {
							t.Error(err)
							return
						}
						_, n := logits.Dims()
						for p := 0; p+n <= len(v); p += n {
							es, _ := s.Routing.Select(v[p : p+n])
							picked[layer] = append(picked[layer], es)
						}
					}
				}
				for _, chunk := range []int{len(c.Prompt), 5} {
					caches, err := FP32Cache(e.Model, 0)
					if err != nil {
						t.Fatal(err)
					}
					// Exact float32 windows in place of the fp16 rotating caches of sliding layers.
					for i, l := range caches {
						if r, ok := l.(*kvstore.Rotating); ok {
							h, d, _ := r.Dims()
							caches[i] = &window32{kvHeads: h, dim: d, window: r.Window()}
						}
					}
					var logits []float32
					for i := 0; i < len(c.Prompt); i += chunk {
						if logits, err = e.Model.Forward(context.Background(), c.Prompt[i:min(i+chunk, len(c.Prompt))], caches, false); err != nil {
							t.Fatal(err)
						}
					}
					for _, s := range rs {
						s.OnRoute = nil
					}
					if r := relErr(logits, c.Logits, nil); r > tol {
						t.Errorf("prefill in chunks of %d: last-position logits differ from transformers by relative error %.3g (> %.0e)", chunk, r, tol)
					} else {
						t.Logf("prefill in chunks of %d: relative error %.2g", chunk, r)
					}
				}
				for layer, want := range c.Routes {
					i, _ := strconv.Atoi(layer)
					got := picked[i]
					if len(got) != len(want) {
						t.Fatalf("layer %d: routed %d positions, the fixture %d", i, len(got), len(want))
					}
					for p := range want {
						if !slices.Equal(got[p], want[p]) {
							t.Errorf("layer %d position %d: experts %v, transformers %v", i, p, got[p], want[p])
						}
					}
				}

				checkGreedy(t, e, c.refCase)
			})
		}
	}
}
