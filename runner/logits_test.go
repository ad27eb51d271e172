package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// refCase is one case of testdata/refs.json, written by scripts/refs (reference.py
// over the checkpoints of scripts/refs/gen).
type refCase struct {
	Name        string            `json:"name"`
	Config      *randmodel.Config `json:"config"`
	Seed        uint64            `json:"seed"`
	SharedModel string            `json:"shared_model"` // a model of ../shared/models instead of a random one
	PromptText  string            `json:"prompt_text"`
	Quantize    *struct {
		Bits      int `json:"bits"`
		GroupSize int `json:"group_size"`
	} `json:"quantize"`
	Prompt        []int32   `json:"prompt"`
	WeightsDigest string    `json:"weights_digest"` // randmodel.Digest of the checkpoint
	Logits        []float64 `json:"logits"`
	LogitsIndex   []int     `json:"logits_index"` // for large vocabularies: which logits Logits holds
	Greedy        []int32   `json:"greedy"`
	GreedyMargins []float64 `json:"greedy_margins"`
}

func readRefs(t *testing.T) []refCase {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "refs.json"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Transformers string    `json:"transformers_version"`
		Cases        []refCase `json:"cases"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("testdata/refs.json has no cases")
	}
	return f.Cases
}

// checkGreedy decodes c's prompt greedily through the engine's loop (prefill, then one
// token a step), which must give transformers' tokens, ending at an end-of-sequence
// token where transformers went on.
func checkGreedy(t *testing.T, e *Engine, c refCase) {
	t.Helper()
	want := c.Greedy
	for i, id := range want {
		if slices.Contains(e.EOS(), id) {
			want = want[:i]
			break
		}
	}
	o := Greedy()
	o.NumPredict, o.NumBatch = len(c.Greedy), 7
	res, err := e.GenerateTokens(context.Background(), c.Prompt, o, func(int32) (bool, error) { return false, nil })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Tokens, want) {
		t.Errorf("greedy tokens %v, transformers %v (its top-2 margins %v)", res.Tokens, c.Greedy, c.GreedyMargins)
	}
}

// buildRef regenerates a case's checkpoint exactly as scripts/refs/gen built it, under
// root; built remembers converted shared models, which several cases use.
func buildRef(t *testing.T, c refCase, root string, built map[string]string) string {
	t.Helper()
	key := c.SharedModel
	if key == "" {
		key = "random " + c.Name // each backend's run of the case reads the same checkpoint
	}
	if c.Quantize != nil {
		key += fmt.Sprintf("-q%dg%d", c.Quantize.Bits, c.Quantize.GroupSize)
	}
	if d, ok := built[key]; ok {
		return d
	}
	root = filepath.Join(root, c.Name)
	dir := filepath.Join(root, "hf")
	if c.SharedModel != "" {
		dir = testdata.SharedModel(t, c.SharedModel)
	} else if err := randmodel.Generate(dir, *c.Config, randmodel.Options{Seed: c.Seed}); err != nil {
		t.Fatal(err)
	}
	if c.Quantize != nil {
		q := filepath.Join(root, "mlx")
		if _, err := create.Convert(context.Background(), dir, q, create.Options{Bits: c.Quantize.Bits, GroupSize: c.Quantize.GroupSize}); err != nil {
			t.Fatal(err)
		}
		dir = q
	}
	got, err := randmodel.Digest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != c.WeightsDigest {
		t.Fatalf("%s: the rebuilt weights have digest %s, the fixture was made from %s: registry/randmodel, registry/create or internal/quant changed the weights; regenerate the fixtures (scripts/refs/regen.sh)", c.Name, got, c.WeightsDigest)
	}
	built[key] = dir
	return dir
}

// relErr is max|got-want| / max|want| over the logits the fixture holds: all of
// them, or those at index.
func relErr(got []float32, want []float64, index []int) float64 {
	var num, den float64
	for i := range want {
		j := i
		if index != nil {
			j = index[i]
		}
		num = math.Max(num, math.Abs(float64(got[j])-want[i]))
		den = math.Max(den, math.Abs(want[i]))
	}
	return num / den
}

// TestLogitsAgainstTransformers compares each architecture, on float32 and on
// MLX-quantized random weights, and the trained qwen3-tiny quantized to 8 bits, with
// transformers (float64, on the same weights, dequantized for the quantized cases):
// the prompt's last-position logits within relative error 1e-3, and the greedy
// tokens (8, or 16 for qwen3-tiny) identical.
func TestLogitsAgainstTransformers(t *testing.T) {
	root, built := t.TempDir(), map[string]string{}
	for _, c := range readRefs(t) {
		for _, be := range testBackends() {
			t.Run(be.name+"/"+c.Name, func(t *testing.T) {
				dir := buildRef(t, c, root, built)
				tol := be.tol
				if c.Quantize != nil {
					tol = be.qtol
				}
				e, err := be.load(t, dir, LoadOptions{KVCache: FP32Cache, Logger: quietLog()})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				if (c.LogitsIndex == nil && len(c.Logits) != e.Model.Config.VocabSize) || (c.LogitsIndex != nil && len(c.LogitsIndex) != len(c.Logits)) || len(c.Greedy) < 8 {
					t.Fatalf("fixture has %d logits (%d indexed) and %d greedy tokens", len(c.Logits), len(c.LogitsIndex), len(c.Greedy))
				}
				if c.PromptText != "" {
					tok, err := tokenizer.Load(testdata.SharedModel(t, c.SharedModel))
					if err != nil {
						t.Fatal(err)
					}
					if ids := tok.Encode(c.PromptText, false); !slices.Equal(ids, c.Prompt) {
						t.Fatalf("the tokenizer now encodes the prompt as %v, the fixture has %v", ids, c.Prompt)
					}
				}

				// Whole prompt in one step, and in chunks of 5 (chunked prefill).
				for _, chunk := range []int{len(c.Prompt), 5} {
					caches, err := FP32Cache(e.Model, 0)
					if err != nil {
						t.Fatal(err)
					}
					var logits []float32
					for i := 0; i < len(c.Prompt); i += chunk {
						if logits, err = e.Model.Forward(context.Background(), c.Prompt[i:min(i+chunk, len(c.Prompt))], caches, false); err != nil {
							t.Fatal(err)
						}
					}
					if r := relErr(logits, c.Logits, c.LogitsIndex); r > tol {
						t.Errorf("prefill in chunks of %d: last-position logits differ from transformers by relative error %.3g (> %.0e)", chunk, r, tol)
					} else {
						t.Logf("prefill in chunks of %d: relative error %.2g", chunk, r)
					}
				}

				checkGreedy(t, e, c)
			})
		}
	}
}
