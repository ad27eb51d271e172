package runner

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/text/template"
)

func TestLookupDraft(t *testing.T) {
	l := newLookup([]int32{1, 2, 3, 4, 5, 9, 1, 2, 3}, 4)
	l.step(time.Second)
	l.k = 4
	// The longest suffix that occurred before: 1 2 3 (at 0..2), followed by 4 5 9 1.
	if d := l.draft(8); !slices.Equal(d, []int32{4, 5, 9, 1}) {
		t.Fatalf("draft %v", d)
	}
	if d := l.draft(2); !slices.Equal(d, []int32{4, 5}) {
		t.Fatalf("draft limited to 2: %v", d)
	}
	l.push(7)
	if d := l.draft(8); d != nil {
		t.Fatalf("no n-gram of 2 or more ends the text, yet a draft %v", d)
	}
	// The most recent occurrence wins, and a continuation may run into the suffix itself.
	l = newLookup([]int32{5, 6, 1, 5, 6, 2, 8, 5, 6}, 8)
	l.step(time.Second)
	l.k, l.warm = 8, true
	if d := l.draft(8); !slices.Equal(d, []int32{2, 8, 5, 6}) {
		t.Fatalf("draft %v", d)
	}
}

// Until a draft has been kept only a match of 3 tokens or more drafts; after a draft that
// keeps nothing, again.
func TestLookupColdStart(t *testing.T) {
	l := newLookup([]int32{7, 1, 2, 9, 9, 4, 1, 2}, 8)
	l.step(time.Second)
	if d := l.draft(8); d != nil {
		t.Fatalf("a 2-token match drafted %v from a cold start", d)
	}
	l = newLookup([]int32{7, 3, 1, 2, 9, 9, 4, 3, 1, 2}, 8)
	l.step(time.Second)
	if d := l.draft(8); !slices.Equal(d, []int32{9, 9}) {
		t.Fatalf("a 3-token match from a cold start: draft %v, want the first 2 tokens after it", d)
	}
	l.record(2, 1, time.Millisecond)
	l.push(8)
	l.push(2)
	l.push(9) // "2 9" occurred before, "8 2 9" did not
	if d := l.draft(8); !slices.Equal(d, []int32{9}) {
		t.Fatalf("a 2-token match after a kept draft: %v", d)
	}
	l.record(1, 0, time.Millisecond)
	if d := l.draft(8); d != nil {
		t.Fatalf("a 2-token match after a draft that kept nothing drafted %v", d)
	}
}

func TestLookupAdapts(t *testing.T) {
	l := newLookup(nil, 8)
	l.step(time.Second) // a plain step costs far more than these passes
	for i, want := range []int{2, 4, 8, 8} {
		if l.k != want {
			t.Fatalf("k %d after %d whole drafts kept, want %d", l.k, i, want)
		}
		l.record(l.k, l.k, time.Millisecond)
	}
	l.record(8, 3, time.Millisecond)
	if l.k != 3 {
		t.Fatalf("k %d after 3 of 8 kept", l.k)
	}
	l.record(3, 3, time.Millisecond)
	if l.k != 6 {
		t.Fatalf("k %d after a whole draft of 3 kept", l.k)
	}
	l.record(6, 0, time.Millisecond)
	l.record(3, 0, time.Millisecond)
	if l.pause != 1 || l.k != 1 {
		t.Fatalf("after two drafts keeping nothing: pause %d, k %d", l.pause, l.k)
	}
	l.hist = []int32{1, 2, 3, 1, 2, 3}
	if d := l.draft(8); d != nil {
		t.Fatal("drafted while paused")
	}
	l.record(1, 0, time.Millisecond)
	if l.pause != 2 {
		t.Fatalf("the pause did not grow: %d", l.pause)
	}
	if l.drafted != 2+4+8+8+8+3+6+3+1 || l.accepted != 2+4+8+8+3+3 || l.passes != 9 {
		t.Fatalf("counts %d drafted, %d kept, %d passes", l.drafted, l.accepted, l.passes)
	}
}

// The ledger: nothing is drafted before a plain step was timed; a pass that loses time
// stops drafting until plain steps have paid it back, probeShare of a step each; saved
// time is banked up to bankSteps steps, so that one bad pass after good ones does not stop
// drafting, and a run of them does.
func TestLookupLedger(t *testing.T) {
	const step = 10 * time.Millisecond
	l := newLookup([]int32{1, 2, 3, 4, 1, 2, 3}, 8)
	if d := l.draft(8); d != nil {
		t.Fatalf("drafted %v before a plain step was timed", d)
	}
	l.step(step)
	if d := l.draft(8); !slices.Equal(d, []int32{4, 1}) {
		t.Fatalf("draft %v, want the first 2 tokens", d)
	}
	l.record(2, 0, 5*step) // 40 ms lost: a pass of 50 yielding one token
	steps := 0
	for ; l.draft(8) == nil && steps < 1000; steps++ {
		l.step(step)
	}
	if want := int(4 / probeShare); steps < want-1 || steps > want+1 {
		t.Fatalf("drafting resumed after %d plain steps, want %d (a loss of 4 steps at %v of a step each)", steps, want, probeShare)
	}
	for range 100 {
		l.record(8, 8, step) // 80 ms saved each
	}
	l.step(step)
	if math.Abs(l.ledger-bankSteps*step.Seconds()) > 1e-9 {
		t.Fatalf("ledger %v, want %v banked at most", l.ledger, bankSteps*step.Seconds())
	}
	l.record(8, 0, 10*step) // 90 ms lost
	if d := l.draft(8); d == nil {
		t.Fatal("one bad pass after good ones stopped drafting")
	}
	l.record(8, 0, 10*step)
	if d := l.draft(8); d != nil {
		t.Fatalf("drafted %v with the ledger in debt (%v)", d, l.ledger)
	}
	// A short draft kept whole puts the ledger into no debt; one of num_draft does.
	l.ledger, l.pause, l.k = 0, 0, 2
	l.step(step)
	l.record(2, 2, 10*step)
	if l.ledger != 0 || l.k != 4 {
		t.Fatalf("a dear pass keeping a short draft whole: ledger %v, k %d", l.ledger, l.k)
	}
	l.record(8, 8, 20*step)
	if l.ledger >= 0 {
		t.Fatalf("a dear pass keeping a draft of num_draft whole: ledger %v", l.ledger)
	}
	// A plain step is timed again after refreshSteps passes.
	l.ledger, l.pause, l.sinceStep = 0, 0, refreshSteps
	if d := l.draft(8); d != nil {
		t.Fatal("drafted instead of timing a plain step")
	}
}

// passage is text the model is asked to copy: prompt lookup finds its n-grams.
const passage = `The lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the clockwork, trimmed the wick, and polished the great lens until it shone. Ships passing in the night never saw him, but they trusted the light, and the light was him. When the storms came in November, he slept in a chair beside the lamp, waking every hour to check the flame.`

// specPair runs req with speculative decoding off and on (num_draft 8) and checks that
// everything a client sees is the same; it returns the speculative run.
func specPair(t *testing.T, e *Engine, req Request) *Result {
	t.Helper()
	untimed(t)
	run := func(numDraft int) *Result {
		r := req
		r.Options.NumDraft = numDraft
		var streamed strings.Builder
		res, err := e.Generate(context.Background(), r, func(s string) error { streamed.WriteString(s); return nil })
		if err != nil {
			t.Fatal(err)
		}
		if streamed.String() != res.Text {
			t.Fatalf("streamed %q, result %q", streamed.String(), res.Text)
		}
		return res
	}
	plain, spec := run(0), run(8)
	if plain.DraftTokens != 0 {
		t.Fatalf("num_draft 0 drafted %d tokens", plain.DraftTokens)
	}
	if !slices.Equal(spec.Tokens, plain.Tokens) || spec.Text != plain.Text || spec.DoneReason != plain.DoneReason || spec.StopSequence != plain.StopSequence {
		t.Fatalf("speculative decoding changed the output:\n%q (%s)\nplain:\n%q (%s)", spec.Text, spec.DoneReason, plain.Text, plain.DoneReason)
	}
	if !reflect.DeepEqual(spec.Logprobs, plain.Logprobs) {
		t.Fatalf("logprobs differ:\n%v\nplain:\n%v", spec.Logprobs, plain.Logprobs)
	}
	if spec.DraftAccepted > spec.DraftTokens || spec.DraftPasses == 0 && spec.DraftTokens > 0 {
		t.Fatalf("counts: %d drafted, %d kept in %d passes", spec.DraftTokens, spec.DraftAccepted, spec.DraftPasses)
	}
	return spec
}

// untimed makes prompt lookup draft whatever the timings say, until the test ends.
func untimed(t *testing.T) {
	untimedDrafts = true
	t.Cleanup(func() { untimedDrafts = false })
}

// quantizedKV is a KVCache of K8/V4 caches (8/8 boundary layers) that stay fp16 until
// start tokens, so that a generation crosses the conversion.
func quantizedKV(t *testing.T, dir string, start int) func(m *model.Model, numCtx int) ([]kvstore.Layer, error) {
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	return func(m *model.Model, _ int) ([]kvstore.Layer, error) {
		shape, err := kvstore.ShapeFromConfig(cfg, m.WeightBytes())
		if err != nil {
			return nil, err
		}
		a := kvstore.AffineFormat
		layout, err := kvstore.NewLayout(shape, kvstore.Spec{K: a(8, 64), V: a(4, 32)}, 1, kvstore.Spec{K: a(8, 64), V: a(8, 64)})
		if err != nil {
			return nil, err
		}
		layout.QuantizedKVStart = start
		return kvstore.NewCaches(shape, layout)
	}
}

// TestSpeculativeGreedyQwen3Tiny: on the trained Qwen3 model asked to copy a passage,
// greedy output with prompt lookup is the output without it, token for token, with
// logprobs, stop strings, a JSON format, quantized KV caches that convert mid-answer and
// the prefix cache; drafts were kept.
func TestSpeculativeGreedyQwen3Tiny(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	// A raw prompt of the passage three times: the model goes on, repeating itself.
	copyPrompt := passage + "\n\n" + passage + "\n\n" + passage + "\n\n"
	o := Greedy()
	o.NumPredict, o.NumCtx = 48, 1024
	for _, kv := range []string{"fp16, prefix cache", "K8/V4 from 230"} {
		t.Run(kv, func(t *testing.T) {
			lo := LoadOptions{Threads: 2, Logger: quietLog()}
			if kv == "K8/V4 from 230" {
				lo.KVCache = quantizedKV(t, dir, 230) // the prompt is 220 tokens
			} else {
				pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: t.TempDir(), Log: quietLog()})
				if err != nil {
					t.Fatal(err)
				}
				defer pc.Close()
				lo.Prefix = pc
			}
			e, err := Load(dir, lo)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			res := specPair(t, e, Request{Prompt: copyPrompt, Options: o, Logprobs: true, TopLogprobs: 3})
			if res.DraftAccepted < 10 {
				t.Errorf("kept %d of %d drafted tokens", res.DraftAccepted, res.DraftTokens)
			}
			t.Logf("%s: %d tokens, %d drafted, %d kept in %d passes", kv, len(res.Tokens), res.DraftTokens, res.DraftAccepted, res.DraftPasses)
			if kv == "K8/V4 from 230" {
				return
			}
			if res.Prefix == nil || res.Prefix.Cached == 0 {
				t.Errorf("the second run took nothing from the prefix cache: %+v", res.Prefix)
			}
			stop := o
			stop.Stop = []string{res.Text[len(res.Text)*2/3:][:5]}
			if r := specPair(t, e, Request{Prompt: copyPrompt, Options: stop}); r.StopSequence == "" {
				t.Errorf("the stop string %q did not end the answer: %q", stop.Stop[0], r.Text)
			}
			js := o
			js.NumPredict = 32
			specPair(t, e, Request{Messages: []template.Message{{"role": "user", "content": "Describe the lighthouse keeper as JSON with keys name and duties. " + passage}},
				TemplateKwargs: map[string]any{"enable_thinking": false}, Options: js, Format: &Format{Schema: mustSchema(t, `"json"`)}})
		})
	}
}

// TestSpeculativeGreedyRandom: the same exactness on random models of the families whose
// caches differ (full attention, sliding windows, recurrent states), whose greedy output
// over a vocabulary of 24 tokens repeats n-grams soon, so that prompt lookup drafts (and
// is mostly wrong: rejected rows are cut back); on the CPU backend, and on MLX, whose
// verification rows hold its batching tolerance rather than identity (no token of these
// models is within it of another).
func TestSpeculativeGreedyRandom(t *testing.T) {
	for _, arch := range []struct {
		name string
		cfg  randmodel.Config
	}{
		{"qwen3", randmodel.Tiny("qwen3", 24)},
		{"gemma3", randmodel.TinyGemma3(24)},
		{"qwen3_next", randmodel.TinyQwen3Next(24)},
	} {
		hf, dir := filepath.Join(t.TempDir(), "hf"), filepath.Join(t.TempDir(), "mlx")
		if err := randmodel.Generate(hf, arch.cfg, randmodel.Options{Seed: 9}); err != nil {
			t.Fatal(err)
		}
		if _, err := create.Convert(context.Background(), hf, dir, create.Options{Bits: 4, GroupSize: 32}); err != nil {
			t.Fatal(err)
		}
		for _, be := range testBackends() {
			t.Run(be.name+"/"+arch.name, func(t *testing.T) {
				e, err := be.load(t, dir, LoadOptions{Threads: 2, Logger: quietLog()})
				if err != nil {
					t.Fatal(err)
				}
				defer e.Close()
				prompt := []int32{3, 17, 9, 4, 3, 17, 9, 4, 20, 3, 17}
				o := Greedy()
				o.NumPredict, o.NumCtx = 120, 512
				gen := func(numDraft int) *Result {
					o := o
					o.NumDraft = numDraft
					res, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil })
					if err != nil {
						t.Fatal(err)
					}
					return res
				}
				untimed(t)
				plain, spec := gen(0), gen(8)
				if !slices.Equal(spec.Tokens, plain.Tokens) {
					t.Fatalf("speculative decoding changed the output:\n%v\nplain:\n%v", spec.Tokens, plain.Tokens)
				}
				if spec.DraftTokens == 0 {
					t.Error("nothing drafted")
				}
				t.Logf("%d tokens, %d drafted, %d kept in %d passes", len(spec.Tokens), spec.DraftTokens, spec.DraftAccepted, spec.DraftPasses)
			})
		}
	}
}

// Sampling with prompt lookup draws from the distribution plain sampling draws from: on a
// random model over 24 tokens whose prompt makes lookup draft after the first token, the
// second and third generated tokens of 500 sampled runs with speculation and 500 without
// (distinct seeds) pass a two-sample chi-square test of homogeneity (at 0.999), with
// penalties, top_k and top_p on; on the CPU backend with a draft model too.
func TestSpeculativeSamplingDistribution(t *testing.T) {
	for _, be := range testBackends() {
		t.Run(be.name, func(t *testing.T) { specSamplingDistribution(t, be) })
	}
}

func specSamplingDistribution(t *testing.T, be testBackend) {
	hf, dir := filepath.Join(t.TempDir(), "hf"), filepath.Join(t.TempDir(), "mlx")
	if err := randmodel.Generate(hf, randmodel.Tiny("qwen3", 24), randmodel.Options{Seed: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), hf, dir, create.Options{}); err != nil {
		t.Fatal(err)
	}
	e, err := be.load(t, dir, LoadOptions{Threads: 1, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	untimed(t)
	// "8 9 x y" for every token x, y the model's likeliest token there, then 8 9: whatever
	// the first token x, "8 9 x" occurred (a match of 3 tokens, which drafts from a cold
	// start) and lookup drafts "y 8 ..." after it, a draft often kept.
	var prompt []int32
	for x := range int32(24) {
		prompt = append(prompt, 8, 9, x)
		o := Greedy()
		o.NumPredict, o.NumCtx, o.NumDraft = 1, 128, 0
		res, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil })
		if err != nil || len(res.Tokens) != 1 {
			t.Fatal(err, res)
		}
		prompt = append(prompt, res.Tokens[0])
	}
	prompt = append(prompt, 8, 9)
	const runs = 500
	counts := func(numDraft, seed0 int) (pos [2][24]int, drafted, kept int) {
		for i := range runs {
			o := DefaultOptions()
			o.Temperature, o.TopK, o.TopP, o.RepeatPenalty = 0.7, 20, 0.97, 1.1
			o.NumPredict, o.NumCtx, o.NumDraft, o.Seed = 3, 128, numDraft, seed0+i
			res, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil })
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Tokens) != 3 {
				t.Fatalf("%d tokens", len(res.Tokens))
			}
			pos[0][res.Tokens[1]]++
			pos[1][res.Tokens[2]]++
			drafted += res.DraftTokens
			kept += res.DraftAccepted
		}
		return pos, drafted, kept
	}
	plain, _, _ := counts(0, 1)
	spec, drafted, kept := counts(8, 100000)
	if drafted < runs || kept < runs/10 {
		t.Fatalf("%d tokens drafted and %d kept in %d runs", drafted, kept, runs)
	}
	t.Logf("prompt lookup: %d tokens drafted, %d kept", drafted, kept)
	homogeneous(t, "prompt lookup", plain, spec)
	if !be.exact {
		// The draft model's half checks the sampler's acceptance rule, the same on every
		// backend; on MLX, whose steps cost more here, the half above checks its passes.
		return
	}

	// A draft model: another random model of the vocabulary (set directly: these have no
	// tokenizer for SetDraft to compare), drafting with its own distribution q.
	dhf, ddir := filepath.Join(t.TempDir(), "dhf"), filepath.Join(t.TempDir(), "dmlx")
	if err := randmodel.Generate(dhf, randmodel.Tiny("qwen3", 24), randmodel.Options{Seed: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := create.Convert(context.Background(), dhf, ddir, create.Options{}); err != nil {
		t.Fatal(err)
	}
	d, err := be.load(t, ddir, LoadOptions{Threads: 1, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	e.draft = d
	drafts, drafted, kept := counts(3, 200000)
	e.draft = nil
	if drafted < runs || kept < runs/10 {
		t.Fatalf("draft model: %d tokens drafted and %d kept in %d runs", drafted, kept, runs)
	}
	t.Logf("draft model: %d tokens drafted, %d kept", drafted, kept)
	homogeneous(t, "draft model", plain, drafts)
}

// homogeneous is a two-sample chi-square test (at 0.999) of two samples' counts per
// position.
func homogeneous(t *testing.T, name string, plain, spec [2][24]int) {
	t.Helper()
	for p := range 2 {
		var chi float64
		df := -1
		var pa, pb int // pooled small bins
		for i := range 24 {
			a, b := plain[p][i], spec[p][i]
			if a+b < 10 {
				pa, pb = pa+a, pb+b
				continue
			}
			chi += float64((a-b)*(a-b)) / float64(a+b)
			df++
		}
		if pa+pb > 0 {
			chi += float64((pa-pb)*(pa-pb)) / float64(pa+pb)
			df++
		}
		// Wilson–Hilferty: the 0.999 quantile of chi-square with df degrees of freedom.
		k := float64(df)
		crit := k * math.Pow(1-2/(9*k)+3.09*math.Sqrt(2/(9*k)), 3)
		if chi > crit {
			t.Errorf("%s, token %d: chi-square %.1f over %d degrees of freedom (> %.1f): plain %v, speculative %v", name, p+2, chi, df, crit, plain[p], spec[p])
		}
		t.Logf("%s, token %d: chi-square %.1f, %d degrees of freedom, 0.999 quantile %.1f", name, p+2, chi, df, crit)
	}
}
