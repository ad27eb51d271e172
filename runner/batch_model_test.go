package runner

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// batchScript is one sequence of a batched-pass test: its prompt, fed in chunks, from
// step start on, then greedy decode steps.
type batchScript struct {
	prompt []int32
	chunk  int
	start  int
	decode int
}

// steps returns the script's forward calls' token counts, then decode steps as 1s.
func (s batchScript) calls() []int {
	var out []int
	for i := 0; i < len(s.prompt); i += s.chunk {
		out = append(out, min(s.chunk, len(s.prompt)-i))
	}
	for range s.decode {
		out = append(out, 1)
	}
	return out
}

// runBatched runs scripts through ForwardBatch, every sequence's next call in one pass per
// step (sequences join at their start step and leave when done), and returns each
// sequence's logits per call. Decode steps pass the sequence's previous logits as Out, as
// the engine does, and check that the pass wrote into it.
func runBatched(t *testing.T, m *model.Model, scripts []batchScript, caches func() []kvstore.Layer) [][][]float32 {
	t.Helper()
	type state struct {
		caches []kvstore.Layer
		call   int
		pos    int   // prompt tokens fed
		next   int32 // the token to decode
		out    [][]float32
		last   []float32 // the last call's logits, the next decode step's Out
	}
	st := make([]*state, len(scripts))
	for i := range scripts {
		st[i] = &state{caches: caches()}
	}
	for step := 0; ; step++ {
		var seqs []model.Sequence
		var who []int
		busy := false
		for i, s := range scripts {
			calls := s.calls()
			if st[i].call >= len(calls) {
				continue
			}
			busy = true
			if step < s.start {
				continue
			}
			n := calls[st[i].call]
			seq := model.Sequence{Caches: st[i].caches}
			if st[i].pos < len(s.prompt) {
				seq.Tokens = s.prompt[st[i].pos : st[i].pos+n]
			} else {
				seq.Tokens, seq.Out = []int32{st[i].next}, st[i].last
			}
			seqs = append(seqs, seq)
			who = append(who, i)
		}
		if !busy {
			break
		}
		if len(seqs) == 0 {
			continue
		}
		res := m.ForwardBatch(context.Background(), seqs)
		for j, i := range who {
			if res[j].Err != nil {
				t.Fatalf("step %d, sequence %d: %v", step, i, res[j].Err)
			}
			s := st[i]
			if s.pos < len(scripts[i].prompt) {
				s.pos += len(seqs[j].Tokens)
			}
			s.call++
			l := res[j].Logits
			if o := seqs[j].Out; cap(o) >= len(l) && &o[:1][0] != &l[0] {
				t.Fatalf("step %d, sequence %d: the logits were not written to Out", step, i)
			}
			s.next = int32(argmax(l))
			s.out = append(s.out, append([]float32(nil), l...)) // Out is written again next step
			s.last = l
		}
	}
	out := make([][][]float32, len(st))
	for i, s := range st {
		out[i] = s.out
	}
	return out
}

// runAlone runs one script by itself through Forward.
func runAlone(t *testing.T, m *model.Model, s batchScript, caches []kvstore.Layer) [][]float32 {
	t.Helper()
	var out [][]float32
	pos := 0
	var next int32
	for _, n := range s.calls() {
		toks := []int32{next}
		if pos < len(s.prompt) {
			toks = s.prompt[pos : pos+n]
			pos += n
		}
		l, err := m.Forward(context.Background(), toks, caches, false)
		if err != nil {
			t.Fatal(err)
		}
		next = int32(argmax(l))
		out = append(out, l)
	}
	return out
}

// batchScripts mixes what a continuous batch sees: a sequence decoding while another's
// prompt arrives in chunks (of 16, one remainder of 3 rows, which takes the vector path
// alone), a short prompt that is one chunk, and a late joiner.
func batchScripts() []batchScript {
	return []batchScript{
		{prompt: modeltest.Tokens(1, 9), chunk: 16, start: 0, decode: 12},
		{prompt: modeltest.Tokens(2, 35), chunk: 16, start: 1, decode: 8},
		{prompt: modeltest.Tokens(3, 2), chunk: 16, start: 2, decode: 10},
		{prompt: modeltest.Tokens(4, 20), chunk: 8, start: 4, decode: 6},
		{prompt: modeltest.Tokens(5, 1), chunk: 16, start: 5, decode: 9},
	}
}

// TestBatchedMatchesAlone runs sequences of every architecture family (random weights,
// float32 and MLX 4-bit, and gpt-oss's mxfp4 experts; fp16 KV caches, and K8/V4 with boundary layers) as a continuous
// batch and each alone: on the CPU backend (also with 8-bit inputs) every logit of every step
// is identical; on MLX, whose products round differently in a batch's shapes, within
// mlxTolerance of the cache's formats, with the same greedy tokens up to a call where the
// sequence alone has its two best logits close enough for that tolerance to swap them
// (mayFlip; the sequence is not compared past it).
func TestBatchedMatchesAlone(t *testing.T) {
	archs := []struct {
		name string
		cfg  randmodel.Config
	}{
		{"llama", randmodel.Tiny("llama", 512)},
		{"qwen2", randmodel.Tiny("qwen2", 512)},
		{"qwen3", randmodel.Tiny("qwen3", 512)},
		{"qwen3_moe", randmodel.TinyMoE(512)},
		{"gemma3", randmodel.TinyGemma3(512)},
		{"qwen3_next", randmodel.TinyQwen3Next(512)},
		{"gpt_oss", randmodel.TinyGptOss(512)},
		{"gemma4", randmodel.TinyGemma4(512)},
		{"gemma4_moe", randmodel.TinyGemma4MoE(512)},
		{"glm4_moe", randmodel.TinyGlm4Moe(512)},
		{"glm4_moe_lite", randmodel.TinyGlm4MoeLite(512)},
		{"mistral", randmodel.TinyMistral(512)},
		{"mistral3", randmodel.TinyMistral3(512)},
		{"phi3", randmodel.TinyPhi3(512)},
	}
	a := kvstore.AffineFormat
	kvs := []struct {
		name string
		spec kvstore.Spec
	}{{"fp16", kvstore.SpecF16}, {"K8/V4", kvstore.Spec{K: a(8, 32), V: a(4, 32)}}}
	scripts := batchScripts()
	for _, be := range append(testBackends(), int8Backend()...) {
		for _, arch := range archs {
			hf := filepath.Join(t.TempDir(), "hf")
			if err := randmodel.Generate(hf, arch.cfg, randmodel.Options{Seed: 31}); err != nil {
				t.Fatal(err)
			}
			variants := []int{0, 4}
			if arch.name == "gpt_oss" {
				variants = append(variants, -4) // -4: mxfp4 experts, the rest 8-bit (mlx-community's MXFP4-Q8)
			}
			for _, bits := range variants {
				group := 32
				if be.name == "cpu-int8" {
					group = 64 // the integer kernels' smallest 4-bit group
				}
				opts := create.Options{Bits: bits, GroupSize: group}
				if bits < 0 {
					opts = create.Options{Bits: 8, GroupSize: 64, Experts: quant.MXFP4}
				}
				dir := filepath.Join(t.TempDir(), "mlx")
				if _, err := create.Convert(context.Background(), hf, dir, opts); err != nil {
					t.Fatal(err)
				}
				e, err := be.load(t, dir, LoadOptions{Logger: quietLog(), Threads: 2})
				if err != nil {
					t.Fatal(err)
				}
				m := e.Model
				if !m.Batched() {
					t.Fatalf("%s on %s: the model does not run batched passes", arch.name, be.name)
				}
				for _, kv := range kvs {
					weights := fmt.Sprintf("q%d", bits)
					if bits < 0 {
						weights = "mxfp4-q8"
					}
					name := fmt.Sprintf("%s/%s/%s/%s", be.name, arch.name, weights, kv.name)
					mk := func() []kvstore.Layer { return kvCaches(t, m, dir, kv.spec, 1) }
					got := runBatched(t, m, scripts, mk)
					worst := 0.0
					tol := mlxTolerance([]kvstore.Spec{kv.spec})
					for i, s := range scripts {
						want := runAlone(t, m, s, mk())
						if len(got[i]) != len(want) {
							t.Fatalf("%s: sequence %d made %d calls batched, %d alone", name, i, len(got[i]), len(want))
						}
						for c := range want {
							worst = max(worst, modeltest.MaxRel(got[i][c], want[c]))
							if argmax(got[i][c]) != argmax(want[c]) {
								if be.exact || !mayFlip(want[c], tol) {
									t.Errorf("%s: sequence %d, call %d: greedy token %d batched, %d alone", name, i, c, argmax(got[i][c]), argmax(want[c]))
								} else {
									t.Logf("%s: sequence %d, call %d: greedy token %d batched, %d alone, whose two best are within the tolerance: not compared further", name, i, c, argmax(got[i][c]), argmax(want[c]))
								}
								break // the calls go on from different tokens
							}
							if be.exact {
								for j := range want[c] {
									if math.Float32bits(got[i][c][j]) != math.Float32bits(want[c][j]) {
										t.Fatalf("%s: sequence %d, call %d: logit %d is %v batched, %v alone", name, i, c, j, got[i][c][j], want[c][j])
									}
								}
							}
						}
					}
					if !be.exact && worst > tol {
						t.Errorf("%s: logits batched differ from alone by %.3g relative (> %.2g)", name, worst, tol)
					}
					t.Logf("%s: largest relative difference batched vs alone %.2g", name, worst)
				}
				e.Close()
			}
		}
	}
}
