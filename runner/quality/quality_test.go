package quality_test

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	_ "github.com/mlxg/mlxg/runner/model/all"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/quality"
	"github.com/mlxg/mlxg/text/tokenizer"
)

const vocab = 512

func tinyModel(t *testing.T) *model.Model {
	t.Helper()
	dir := t.TempDir()
	cfg := randmodel.Tiny("qwen3", vocab)
	cfg.HeadDim = 64 // room for the default's group of 64 keys
	if err := randmodel.Generate(dir, cfg, randmodel.Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func layoutSide(t *testing.T, m *model.Model, name, spec string) quality.Side {
	t.Helper()
	shape, err := quality.Shape(m)
	if err != nil {
		t.Fatal(err)
	}
	l, err := quality.ParseLayout(shape, spec)
	if err != nil {
		t.Fatal(err)
	}
	return quality.Side{Name: name, Model: m, Caches: quality.LayoutCaches(m, l)}
}

// direct scores two logit streams of every position the plain way: softmax in float64,
// KL as Σ p log(p/q), perplexity from the probabilities of the next tokens.
func direct(a, b []float32, tokens []int32, skip int) quality.Report {
	var r quality.Report
	var kl, nllA, nllB float64
	probs := func(l []float32) []float64 {
		m := math.Inf(-1)
		for _, v := range l {
			m = math.Max(m, float64(v))
		}
		p := make([]float64, len(l))
		var s float64
		for i, v := range l {
			p[i] = math.Exp(float64(v) - m)
			s += p[i]
		}
		for i := range p {
			p[i] /= s
		}
		return p
	}
	argmax := func(p []float64) int {
		best := 0
		for i := range p {
			if p[i] > p[best] {
				best = i
			}
		}
		return best
	}
	for i := skip; i < len(tokens)-1; i++ {
		p, q := probs(a[i*vocab:(i+1)*vocab]), probs(b[i*vocab:(i+1)*vocab])
		var d float64
		for j := range p {
			if p[j] > 0 {
				d += p[j] * math.Log(p[j]/q[j])
			}
		}
		kl += d
		r.MaxKL = math.Max(r.MaxKL, d)
		if argmax(p) == argmax(q) {
			r.Top1Agree++
		}
		// Clear: the two largest reference logits, sorted, differ by at least the gap.
		row := slices.Clone(a[i*vocab : (i+1)*vocab])
		slices.Sort(row)
		if float64(row[len(row)-1])-float64(row[len(row)-2]) >= quality.DefaultClearGap {
			r.Clear++
			if argmax(p) == argmax(q) {
				r.ClearAgree++
			}
		}
		nllA -= math.Log(p[tokens[i+1]])
		nllB -= math.Log(q[tokens[i+1]])
		r.Positions++
	}
	n := float64(r.Positions)
	r.MeanKL, r.PPLRef, r.PPLTest = kl/n, math.Exp(nllA/n), math.Exp(nllB/n)
	return r
}

func close(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b))+1e-12 }

func TestCompareSelf(t *testing.T) {
	m := tinyModel(t)
	s := layoutSide(t, m, "default", "")
	tokens := modeltest.Tokens(1, 100)
	r, err := quality.Compare(context.Background(), s, s, tokens, quality.Options{Chunk: 16, Skip: 5})
	if err != nil {
		t.Fatal(err)
	}
	if r.Positions != 94 || r.Top1Agree != 94 || r.Identical != 94 || r.MeanKL != 0 || r.MaxKL != 0 || r.PPLRef != r.PPLTest || r.Top1() != 1 {
		t.Errorf("a side against itself: %v", r)
	}
}

func TestCompareMatchesDirect(t *testing.T) {
	m := tinyModel(t)
	ref := layoutSide(t, m, "fp16", "kv-bits=16")
	test := layoutSide(t, m, "q4_0", "kv-bits=q4_0 kv-boundary-layers=0")
	tokens := modeltest.Tokens(2, 150)
	const chunk, skip = 7, 10
	r, err := quality.Compare(context.Background(), ref, test, tokens, quality.Options{Chunk: chunk, Skip: skip})
	if err != nil {
		t.Fatal(err)
	}
	logits := func(s quality.Side) []float32 {
		c, err := s.Caches()
		if err != nil {
			t.Fatal(err)
		}
		// The same chunks as Compare's: positions 0..skip-1 from 0, then from skip on to
		// each multiple of chunk.
		a := modeltest.Forward(t, m, c, tokens[:skip], chunk)
		for p := skip; p < len(tokens)-1; {
			n := min(chunk-p%chunk, len(tokens)-1-p)
			a = append(a, modeltest.Forward(t, m, c, tokens[p:p+n], n)...)
			p += n
		}
		return a
	}
	want := direct(logits(ref), logits(test), tokens, skip)
	t.Logf("Compare: %v", r)
	t.Logf("direct:  %v", want)
	if r.Positions != want.Positions || r.Top1Agree != want.Top1Agree || r.Clear != want.Clear || r.ClearAgree != want.ClearAgree || !close(r.MeanKL, want.MeanKL) ||
		!close(r.MaxKL, want.MaxKL) || !close(r.PPLRef, want.PPLRef) || !close(r.PPLTest, want.PPLTest) {
		t.Errorf("Compare %v, direct %v", r, want)
	}
	if r.MeanKL == 0 || r.Identical == r.Positions {
		t.Errorf("q4_0 against fp16 changed nothing: %v", r)
	}
	if r.Clear == 0 || r.Clear == r.Positions {
		t.Errorf("every position or none has a clear answer, so the test checks little: %v", r)
	}
}

func TestCompareErrors(t *testing.T) {
	m := tinyModel(t)
	s := layoutSide(t, m, "fp16", "kv-bits=16")
	ctx := context.Background()
	if _, err := quality.Compare(ctx, s, s, modeltest.Tokens(1, 10), quality.Options{Skip: 9}); err == nil {
		t.Error("nothing to score: no error")
	}
	if _, err := quality.Compare(ctx, s, quality.Side{Name: "none"}, modeltest.Tokens(1, 10), quality.Options{}); err == nil {
		t.Error("a side without a model: no error")
	}
	if _, err := quality.Compare(ctx, s, s, []int32{1, 2, vocab}, quality.Options{}); err == nil {
		t.Error("a token outside the vocabulary: no error")
	}
	shape, _ := quality.Shape(m)
	if _, err := quality.ParseLayout(shape, "kv-bits=7"); err == nil {
		t.Error("kv-bits=7: no error")
	}
	if _, err := quality.ParseLayout(shape, "kv-bits"); err == nil {
		t.Error("a setting without a value: no error")
	}
	for _, bad := range []string{"step=0", "step=4", "step=two"} {
		if _, err := quality.ParseLayout(shape, bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestParseLayoutSteps: "step=N" is the ladder's step as the policy builds it, and step 1
// is the default.
func TestParseLayoutSteps(t *testing.T) {
	shape, _ := quality.Shape(tinyModel(t))
	steps, err := kvstore.Ladder(shape, kvstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	def, err := quality.ParseLayout(shape, "")
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range steps {
		l, err := quality.ParseLayout(shape, fmt.Sprintf("step=%d", i+1))
		if err != nil || l.String() != st.Layout.String() || i == 0 && l.String() != def.String() {
			t.Errorf("step=%d: %v %v, the ladder's %v (default %v)", i+1, l, err, st.Layout, def)
		}
	}
}

// TestRestoredScoresAsLive: caches restored from the SSD tier give bitwise the logits
// the live caches give, over a full block and a partial one.
func TestRestoredScoresAsLive(t *testing.T) {
	m := tinyModel(t)
	live := layoutSide(t, m, "default", "")
	tokens := modeltest.Tokens(4, 400)
	ctx := context.Background()
	restored, err := quality.Restored(ctx, live, tokens, kvstore.BlockTokens+50, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r, err := quality.Compare(ctx, live, restored, tokens, quality.Options{Chunk: 32})
	if err != nil {
		t.Fatal(err)
	}
	if r.Positions != len(tokens)-1-kvstore.BlockTokens-50 || r.Identical != r.Positions || r.MeanKL != 0 {
		t.Errorf("restored against live: %v", r)
	}
}

// TestQwen3TinyK8V8 is the quality scenario at a small scale on the trained model:
// 288 tokens of held-out text, K8/V8 against fp16, and the K8/V8 cache restored from
// the SSD tier (its first block) against the live one.
func TestQwen3TinyK8V8(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	testdata.DebianFile(t, "sqlite3-doc", filepath.Join(quality.HeldOutDir, quality.HeldOutPages[0]))
	text, err := quality.LoadHeldOut("")
	if err != nil {
		t.Fatal(err)
	}
	tokens := tok.Encode(text, false)
	if len(tokens) < 4097 {
		t.Fatalf("the held-out text is %d tokens, less than the 4K context the scenario measures", len(tokens))
	}
	tokens = tokens[:kvstore.BlockTokens+32]
	m, err := model.Load(dir, cpu.New(2))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx := context.Background()
	ref := layoutSide(t, m, "fp16", "kv-bits=16")
	k8 := layoutSide(t, m, "K8/V8", "kv-bits=8")
	r, err := quality.Compare(ctx, ref, k8, tokens, quality.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("K8/V8 against fp16: %v", r)
	if r.Top1() < 0.97 || r.MeanKL > 1e-2 {
		t.Errorf("K8/V8 against fp16: %v, want top-1 agreement at least 97%%", r)
	}
	if r.PPLRef > 5000 { // a model that learnt nothing would be near its vocabulary's size
		t.Errorf("perplexity %.1f on held-out English: the model or the text is not what it should be", r.PPLRef)
	}
	restored, err := quality.Restored(ctx, k8, tokens, kvstore.BlockTokens, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	same, err := quality.Compare(ctx, k8, restored, tokens, quality.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if same.Identical != same.Positions || same.Positions != len(tokens)-1-kvstore.BlockTokens {
		t.Errorf("K8/V8 restored from SSD against live: %v", same)
	}
}

// TestCompareAll: one pass over several sides reports what Compare reports for each, and
// Progress at a chunk boundary reports what a shorter text gives.
func TestCompareAll(t *testing.T) {
	m := tinyModel(t)
	ref := layoutSide(t, m, "fp16", "kv-bits=16")
	a := layoutSide(t, m, "q4_0", "kv-bits=q4_0 kv-boundary-layers=0")
	b := layoutSide(t, m, "default", "")
	tokens := modeltest.Tokens(5, 130)
	ctx := context.Background()
	o := quality.Options{Chunk: 16, Skip: 3}
	var at64 []quality.Report
	o.Progress = func(fed int, r []quality.Report) {
		if fed == 64 {
			at64 = r
		}
	}
	all, err := quality.CompareAll(ctx, ref, []quality.Side{a, b}, tokens, o)
	if err != nil {
		t.Fatal(err)
	}
	o.Progress = nil
	for i, s := range []quality.Side{a, b} {
		one, err := quality.Compare(ctx, ref, s, tokens, o)
		if err != nil {
			t.Fatal(err)
		}
		if one != all[i] {
			t.Errorf("%s: CompareAll %v, Compare %v", s.Name, all[i], one)
		}
		short, err := quality.Compare(ctx, ref, s, tokens[:65], o)
		if err != nil {
			t.Fatal(err)
		}
		if len(at64) != 2 || short != at64[i] {
			t.Errorf("%s: Progress at 64 %v, Compare of 65 tokens %v", s.Name, at64, short)
		}
	}
}
