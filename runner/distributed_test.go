package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/metal/mlxtest"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/pipeline"
)

// distRun is what each model's run produced: every step's logits and the greedy tokens.
type distRun struct {
	Logits []float32
	Tokens []int32
}

// greedyRun feeds the prompt in chunks of 16 over fp32 or fp16 caches, then decodes
// steps greedily, returning every step's last-position logits and the tokens.
func greedyRun(t testing.TB, m *model.Model, caches []kvstore.Layer, prompt []int32, steps int) distRun {
	t.Helper()
	logits := modeltest.Forward(t, m, caches, prompt, 16)
	logits = logits[len(logits)-m.Config.VocabSize:]
	var r distRun
	for range steps {
		id := int32(argmax(logits))
		r.Tokens = append(r.Tokens, id)
		r.Logits = append(r.Logits, logits...)
		var err error
		if logits, err = m.Forward(context.Background(), []int32{id}, caches, false); err != nil {
			t.Fatal(err)
		}
	}
	r.Logits = append(r.Logits, logits...)
	return r
}

const envDistModels = "MLXG_TEST_DIST_MODELS"

// TestDistributedPipeline runs a dense (qwen3), a mixture-of-experts (qwen3_moe), a
// hybrid (qwen3_next: Gated DeltaNet and gated attention) and a sliding-window (gemma3)
// random 4-bit model as a
// two-stage pipeline: two processes (this test binary again) joined by MLX's ring
// backend over loopback, on the real libmlxc. Rank 0 runs the first half of the
// layers and the generation loop, rank 1 the rest and the head. A chunked prefill
// (every row's logits) and greedy decode steps match the single-process run on MLX
// within 1e-4 relative, with identical tokens, over fp32, fp16 and K8/V4 caches (rank 0 describes its policy's caches to the workers).
// The Gemma 4 of the E2B kind has its per-layer inputs carried from rank 0 beside the stream, and its KV-shared
// layers (6 and 7, reading 4 and 5) on their sources' rank.
func TestDistributedPipeline(t *testing.T) {
	e2b := randmodel.TinyGemma4(512)
	e2b.NumLayers = 8
	archs := []struct {
		name string
		cfg  randmodel.Config
	}{
		{"qwen3", randmodel.Tiny("qwen3", 512)},
		{"qwen3_moe", randmodel.TinyMoE(512)},
		{"qwen3_next", randmodel.TinyQwen3Next(512)},
		{"gemma3", randmodel.TinyGemma3(512)},
		{"gemma4_e2b", e2b}, // per-layer inputs carried beside the stream, KV-shared layers on their sources' rank
	}
	prompt, steps := modeltest.Tokens(5, 37), 6
	rank, isRank := mlxtest.Rank()
	if !isRank {
		if !mlxtest.Enabled() {
			t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
		}
		open := mlxtest.Opener(t)
		var dirs []string
		want := map[string]distRun{}
		for _, a := range archs {
			dir := random4Bit(t, a.name, a.cfg, 3)
			dirs = append(dirs, dir)
			b, err := open()
			if err != nil {
				t.Fatal(err)
			}
			m, err := model.Load(dir, b)
			if err != nil {
				t.Fatal(err)
			}
			for _, kind := range distKV {
				want[a.name+"/"+kind] = greedyRun(t, m, distCaches(t, m, dir, kind), prompt, steps)
			}
			m.Close()
		}
		// Two ranks, then three (a middle rank both receives and sends; a 2-layer
		// model's last rank holds only the head).
		for _, n := range []int{2, 3} {
			outs := mlxtest.Ranks(t, n, "TestDistributedPipeline", 120*time.Second, envDistModels+"="+strings.Join(dirs, string(os.PathListSeparator)))
			for _, a := range archs {
				for _, kind := range distKV {
					k := a.name + "/" + kind
					var got distRun
					mlxtest.Results(t, outs[0], k, &got)
					r := modeltest.MaxRel(got.Logits, want[k].Logits)
					if len(got.Logits) != len(want[k].Logits) || r > 1e-4 {
						t.Errorf("%s: %d ranks' logits differ from one process's by %.3g relative (%d values, want %d)", k, n, r, len(got.Logits), len(want[k].Logits))
					}
					if !slices.Equal(got.Tokens, want[k].Tokens) {
						t.Errorf("%s: %d ranks' greedy tokens %v, one process's %v", k, n, got.Tokens, want[k].Tokens)
					}
					t.Logf("%-18s: %d ranks vs 1 process: largest relative logit difference %.2g, tokens %v", k, n, r, got.Tokens)
				}
			}
		}
		return
	}

	// A rank: join the ring; rank 0 loads each model on both ranks and runs it, rank 1
	// follows.
	b := mlxtest.Backend(t)
	g, err := b.JoinGroup("ring")
	if err != nil {
		t.Fatal(err)
	}
	if rank != 0 {
		w := &pipeline.Worker{Wire: g, Open: func(dir string, s pipeline.Stage) (*model.Model, error) { return pipeline.LoadStage(dir, b, s) }}
		if err := w.Run(); err != nil {
			t.Fatal(err)
		}
		return
	}
	leader, err := pipeline.NewLeader(g)
	if err != nil {
		t.Fatal(err)
	}
	leader.Timeout = time.Minute
	for i, a := range archs {
		dir := filepath.SplitList(os.Getenv(envDistModels))[i]
		m, err := leader.Load(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		st, _ := pipeline.StageOf(m)
		t.Logf("%s: %v, %d weight bytes", a.name, st, m.WeightBytes())
		for _, kind := range distKV {
			mlxtest.Result(a.name+"/"+kind, greedyRun(t, m, distCaches(t, m, dir, kind), prompt, steps))
		}
		m.Close()
	}
	if err := leader.Stop(); err != nil {
		t.Fatal(err)
	}
}

// distKV are the KV caches the pipeline test runs over: float32, fp16, and the memory
// policy's kind of layout (keys 8-bit, values 4-bit, 8/8 boundary layers), which rank 0
// describes to the workers.
var distKV = []string{"fp32", "fp16", "K8/V4+boundary"}

func distCaches(t *testing.T, m *model.Model, dir, kind string) []kvstore.Layer {
	t.Helper()
	switch kind {
	case "fp32", "fp16":
		c, err := m.NewCaches(kind == "fp32")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a := kvstore.AffineFormat
	return kvCaches(t, m, dir, kvstore.Spec{K: a(8, 32), V: a(4, 32)}, 1)
}

const envDistBench = "MLXG_TEST_DIST_BENCH_MODEL"

// distSpeed is a run's prefill and decode speed.
type distSpeed struct {
	Prefill, Decode float64 // tokens per second
}

// timedRun prefills prompt in one pass and decodes steps tokens greedily.
func timedRun(t testing.TB, m *model.Model, prompt []int32, steps int) distSpeed {
	t.Helper()
	caches, err := m.NewCaches(false)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := time.Now()
	logits, err := m.Forward(ctx, prompt, caches, false)
	if err != nil {
		t.Fatal(err)
	}
	pre := time.Since(start)
	start = time.Now()
	for range steps {
		if logits, err = m.Forward(ctx, []int32{int32(argmax(logits))}, caches, false); err != nil {
			t.Fatal(err)
		}
	}
	return distSpeed{Prefill: float64(len(prompt)) / pre.Seconds(), Decode: float64(steps) / time.Since(start).Seconds()}
}

// TestDistributedBench (MLXG_DIST_BENCH=1; informational) times a random model of
// Qwen2-0.5B's shape at 4 bits on MLX: one process, then two ranks over loopback
// (12 layers each; rank 1 also the head). On one machine the two ranks share its cores
// and add two transfers per pass; on two Macs each holds half the weights, which is
// the point: a model that does not fit one machine runs, a single stream no faster.
func TestDistributedBench(t *testing.T) {
	prompt, steps := modeltest.Tokens(7, 128), 32
	rank, isRank := mlxtest.Rank()
	if isRank {
		if os.Getenv(envDistBench) == "" {
			t.Skip("not the bench's ranks")
		}
		b := mlxtest.Backend(t)
		g, err := b.JoinGroup("ring")
		if err != nil {
			t.Fatal(err)
		}
		if rank != 0 {
			w := &pipeline.Worker{Wire: g, Open: func(dir string, s pipeline.Stage) (*model.Model, error) { return pipeline.LoadStage(dir, b, s) }}
			if err := w.Run(); err != nil {
				t.Fatal(err)
			}
			return
		}
		leader, err := pipeline.NewLeader(g)
		if err != nil {
			t.Fatal(err)
		}
		m, err := leader.Load(os.Getenv(envDistBench), b)
		if err != nil {
			t.Fatal(err)
		}
		timedRun(t, m, prompt[:16], 4) // warm up
		mlxtest.Result("speed", timedRun(t, m, prompt, steps))
		m.Close()
		if err := leader.Stop(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if os.Getenv("MLXG_DIST_BENCH") != "1" {
		t.Skip("set MLXG_DIST_BENCH=1 to time one process against two ranks on the Qwen2-0.5B shape")
	}
	dir := random4Bit(t, "q4", randmodel.Qwen2_0_5B(), 1)
	open := mlxtest.Opener(t)
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	timedRun(t, m, prompt[:16], 4)
	one := timedRun(t, m, prompt, steps)
	m.Close()
	b.(interface{ Close() error }).Close()
	outs := mlxtest.Ranks(t, 2, "TestDistributedBench", 10*time.Minute, envDistBench+"="+dir)
	var two distSpeed
	mlxtest.Results(t, outs[0], "speed", &two)
	t.Logf("Qwen2-0.5B shape, 4-bit g64, MLX (%s), %d-token prefill, %d decode steps:", b.Name(), len(prompt), steps)
	t.Logf("  1 process : prefill %6.1f tok/s, decode %5.2f tok/s", one.Prefill, one.Decode)
	t.Logf("  2 ranks   : prefill %6.1f tok/s, decode %5.2f tok/s (loopback, the same cores)", two.Prefill, two.Decode)
}

const envDistPrefix = "MLXG_TEST_DIST_PREFIX_MODELS"

// prefixRun is what rank 0 of TestDistributedPrefixCache saw: the tokens of a cold and
// of a repeated request, and how many prompt tokens the repeat restored.
type prefixRunResult struct {
	Cold, Hit []int32
	Cached    int // prompt tokens the repeat restored on rank 0
	Prefilled int // prompt tokens it computed: 1 when every rank restored the rest
}

// TestDistributedPrefixCache runs the engine with the prefix cache on a dense and a
// hybrid random model split over two ranks (each rank keeps its own layers' blocks in
// its own prefix cache): a 600-token prompt, then the same prompt again, whose repeat
// restores its blocks on both ranks; both give the single-process greedy tokens.
func TestDistributedPrefixCache(t *testing.T) {
	archs := []struct {
		name string
		cfg  randmodel.Config
	}{
		{"qwen3", randmodel.Tiny("qwen3", 512)},
		{"qwen3_next", randmodel.TinyQwen3Next(512)},
	}
	prompt := modeltest.Tokens(9, 600)
	o := Greedy()
	o.NumPredict = 6
	gen := func(e *Engine) *Result {
		res, err := e.GenerateTokens(context.Background(), prompt, o, func(int32) (bool, error) { return false, nil })
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	rank, isRank := mlxtest.Rank()
	if isRank {
		if os.Getenv(envDistPrefix) == "" {
			t.Skip("not this test's ranks")
		}
		b := mlxtest.Backend(t)
		g, err := b.JoinGroup("ring")
		if err != nil {
			t.Fatal(err)
		}
		pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{})
		if err != nil {
			t.Fatal(err)
		}
		if rank != 0 {
			w := &pipeline.Worker{Wire: g, Prefix: pc, Open: func(dir string, s pipeline.Stage) (*model.Model, error) { return pipeline.LoadStage(dir, b, s) }}
			if err := w.Run(); err != nil {
				t.Fatal(err)
			}
			return
		}
		leader, err := pipeline.NewLeader(g)
		if err != nil {
			t.Fatal(err)
		}
		leader.Timeout = time.Minute
		for i, a := range archs {
			e, err := LoadModel(filepath.SplitList(os.Getenv(envDistPrefix))[i], LoadOptions{Backend: b, Prefix: pc, Pipeline: leader})
			if err != nil {
				t.Fatal(err)
			}
			cold := gen(e)
			hit := gen(e)
			r := prefixRunResult{Cold: cold.Tokens, Hit: hit.Tokens}
			if hit.Prefix != nil {
				r.Cached, r.Prefilled = hit.Prefix.Cached, hit.Prefix.Prefilled
			}
			mlxtest.Result(a.name, r)
			e.Close()
		}
		if err := leader.Stop(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	open := mlxtest.Opener(t)
	var dirs []string
	want := map[string][]int32{}
	for _, a := range archs {
		dir := random4Bit(t, a.name, a.cfg, 4)
		dirs = append(dirs, dir)
		b, err := open()
		if err != nil {
			t.Fatal(err)
		}
		e, err := LoadModel(dir, LoadOptions{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		want[a.name] = gen(e).Tokens
		e.Close()
	}
	outs := mlxtest.Ranks(t, 2, "TestDistributedPrefixCache", 3*time.Minute, envDistPrefix+"="+strings.Join(dirs, string(os.PathListSeparator)))
	for _, a := range archs {
		var got prefixRunResult
		mlxtest.Results(t, outs[0], a.name, &got)
		if !slices.Equal(got.Cold, want[a.name]) || !slices.Equal(got.Hit, want[a.name]) {
			t.Errorf("%s: two ranks gave %v cold and %v from the prefix cache, one process %v", a.name, got.Cold, got.Hit, want[a.name])
		}
		if got.Cached < 512 || got.Prefilled > len(prompt)-512 {
			t.Errorf("%s: the repeat restored %d prompt tokens and computed %d, want at least two blocks (512) restored on every rank", a.name, got.Cached, got.Prefilled)
		}
		t.Logf("%s: tokens %v (cold and restored, as one process); the repeat restored %d prompt tokens on both ranks and computed %d", a.name, got.Hit, got.Cached, got.Prefilled)
	}
}

const envDistBatch = "MLXG_TEST_DIST_BATCH_MODELS"

// distBatchScript runs three sequences of different prompt lengths through batched passes
// (ForwardBatch): their prompts together, then greedy steps together; it returns every
// pass's logits and the tokens.
func distBatchScript(t testing.TB, m *model.Model, steps int) distRun {
	t.Helper()
	var seqs []model.Sequence
	for i, n := range []int{20, 7, 13} {
		caches, err := m.NewCaches(false)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, model.Sequence{Tokens: modeltest.Tokens(uint64(30+i), n), Caches: caches})
	}
	var r distRun
	for step := 0; ; step++ {
		res := m.ForwardBatch(context.Background(), seqs)
		for i := range seqs {
			if res[i].Err != nil {
				t.Fatal(res[i].Err)
			}
			r.Logits = append(r.Logits, res[i].Logits...)
			id := int32(argmax(res[i].Logits))
			r.Tokens = append(r.Tokens, id)
			seqs[i].Tokens = []int32{id}
		}
		if step == steps {
			return r
		}
	}
}

// TestDistributedBatch runs batched passes (continuous batching's ForwardBatch) of
// three sequences over two ranks, for a dense and a hybrid model: each pass is one
// batched pass on every rank, and its logits equal the single-process batched pass's.
func TestDistributedBatch(t *testing.T) {
	archs := []struct {
		name string
		cfg  randmodel.Config
	}{
		{"qwen3", randmodel.Tiny("qwen3", 512)},
		{"qwen3_next", randmodel.TinyQwen3Next(512)},
	}
	const steps = 4
	rank, isRank := mlxtest.Rank()
	if isRank {
		if os.Getenv(envDistBatch) == "" {
			t.Skip("not this test's ranks")
		}
		b := mlxtest.Backend(t)
		g, err := b.JoinGroup("ring")
		if err != nil {
			t.Fatal(err)
		}
		if rank != 0 {
			w := &pipeline.Worker{Wire: g, Open: func(dir string, s pipeline.Stage) (*model.Model, error) {
				if strings.HasSuffix(dir, "-refused") {
					return nil, fmt.Errorf("refused (the test's)")
				}
				return pipeline.LoadStage(dir, b, s)
			}}
			if err := w.Run(); err != nil {
				t.Fatal(err)
			}
			return
		}
		leader, err := pipeline.NewLeader(g)
		if err != nil {
			t.Fatal(err)
		}
		leader.Timeout = time.Minute
		// A model a worker cannot load fails its load, naming the rank; the pipeline
		// goes on.
		refused := filepath.SplitList(os.Getenv(envDistBatch))[0] + "-refused"
		if _, err := leader.Load(refused, b); !errors.Is(err, pipeline.ErrRankFailed) || !strings.Contains(err.Error(), "rank 1 could not load") {
			t.Fatalf("loading a model the worker refuses: %v", err)
		}
		for i, a := range archs {
			m, err := leader.Load(filepath.SplitList(os.Getenv(envDistBatch))[i], b)
			if err != nil {
				t.Fatal(err)
			}
			if !m.Batched() {
				t.Fatalf("%s: the stage does not batch", a.name)
			}
			mlxtest.Result(a.name, distBatchScript(t, m, steps))
			m.Close()
		}
		if err := leader.Stop(); err != nil {
			t.Fatal(err)
		}
		return
	}
	if !mlxtest.Enabled() {
		t.Skip("MLXG_MLXC_PATH is not set: the tests on real MLX need an installed libmlxc (Homebrew's mlx-c on a Mac; docs/backends.md on Linux)")
	}
	open := mlxtest.Opener(t)
	var dirs []string
	want := map[string]distRun{}
	for _, a := range archs {
		dir := random4Bit(t, a.name, a.cfg, 6)
		dirs = append(dirs, dir)
		b, err := open()
		if err != nil {
			t.Fatal(err)
		}
		m, err := model.Load(dir, b)
		if err != nil {
			t.Fatal(err)
		}
		want[a.name] = distBatchScript(t, m, steps)
		m.Close()
	}
	if err := os.Symlink(dirs[0], dirs[0]+"-refused"); err != nil {
		t.Fatal(err)
	}
	outs := mlxtest.Ranks(t, 2, "TestDistributedBatch", 2*time.Minute, envDistBatch+"="+strings.Join(dirs, string(os.PathListSeparator)))
	for _, a := range archs {
		var got distRun
		mlxtest.Results(t, outs[0], a.name, &got)
		r := modeltest.MaxRel(got.Logits, want[a.name].Logits)
		if len(got.Logits) != len(want[a.name].Logits) || r > 1e-4 {
			t.Errorf("%s: two ranks' batched logits differ from one process's by %.3g relative (%d values, want %d)", a.name, r, len(got.Logits), len(want[a.name].Logits))
		}
		if !slices.Equal(got.Tokens, want[a.name].Tokens) {
			t.Errorf("%s: two ranks' tokens %v, one process's %v", a.name, got.Tokens, want[a.name].Tokens)
		}
		t.Logf("%s: 3 sequences batched over 2 ranks vs 1 process: largest relative logit difference %.2g, tokens %v", a.name, r, got.Tokens)
	}
}

// random4Bit writes a random-weight checkpoint of cfg (seed) converted to MLX 4-bit,
// group 64, into a temporary folder named name, and returns that folder.
func random4Bit(t *testing.T, name string, cfg randmodel.Config, seed uint64) string {
	t.Helper()
	hf := filepath.Join(t.TempDir(), "hf")
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: seed}); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(hf)
	dir := filepath.Join(t.TempDir(), name)
	if _, err := create.Convert(context.Background(), hf, dir, create.Options{Bits: 4, GroupSize: 64}); err != nil {
		t.Fatal(err)
	}
	return dir
}
