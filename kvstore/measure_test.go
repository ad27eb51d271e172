package kvstore_test

// Quantized caches through a real model (qwen3-tiny on the CPU backend), and the
// measurements behind the policy's defaults (memory, greedy drift from fp16, decode
// speed per layout), run with MLXG_KV_MEASURE=1:
//
//	MLXG_KV_MEASURE=1 go test -run TestMeasureKV -v -timeout 60m ./kvstore/
import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	_ "github.com/mlxg/mlxg/runner/model/all"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// measured is one layout TestMeasureKV compares: a base spec and its boundary layers.
type measured struct {
	name     string
	base     kvstore.Spec
	boundary int
}

var (
	a      = kvstore.AffineFormat
	q4     = kvstore.FormatQ4_0
	tables = []measured{
		{"fp16", kvstore.SpecF16, 0},
		{"K8/V4+boundary", kvstore.Spec{K: a(8, 64), V: a(4, 32)}, 2},
		{"K4/V4", kvstore.Spec{K: a(4, 64), V: a(4, 32)}, 0},
		{"q4_0", kvstore.Spec{K: q4, V: q4}, 0},
	}
	k8v8 = kvstore.Spec{K: a(8, 64), V: a(8, 32)}
)

func shapeOf(t testing.TB, m *model.Model) kvstore.ModelShape {
	t.Helper()
	cfg, err := os.ReadFile(filepath.Join(m.Dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := kvstore.ShapeFromConfig(cfg, m.WeightBytes())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func layoutOf(t testing.TB, s kvstore.ModelShape, ms measured) kvstore.Layout {
	t.Helper()
	l, err := kvstore.NewLayout(s, ms.base, ms.boundary, k8v8)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// run feeds prompt, then steps tokens: greedy when forced is nil, else forced's tokens
// (teacher forcing), and returns the tokens chosen and the logits of each step.
func run(t testing.TB, m *model.Model, caches []kvstore.Layer, prompt []int32, steps int, forced []int32) ([]int32, [][]float32) {
	t.Helper()
	var toks []int32
	var all [][]float32
	logits, err := m.Forward(context.Background(), prompt, caches, false)
	for i := 0; i < steps && err == nil; i++ {
		all = append(all, logits)
		next := argmax(logits)
		if forced != nil {
			next = forced[i]
		}
		toks = append(toks, next)
		logits, err = m.Forward(context.Background(), []int32{next}, caches, false)
	}
	if err != nil {
		t.Fatal(err)
	}
	return toks, all
}

func argmax(x []float32) int32 {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return int32(best)
}

func loadTiny(t testing.TB) (*model.Model, []int32) {
	t.Helper()
	dir := testdata.SharedModel(t, "qwen3-tiny")
	m, err := model.Load(dir, cpu.New(0))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompt := tok.Encode("<|im_start|>user\nTell me a story about a cat who learns to read.<|im_end|>\n<|im_start|>assistant\n", false)
	return m, prompt
}

type agreement struct {
	same, firstDiff int
	maxLogitErr     float64
	argmaxForced    int
}

// reference is a free-running greedy run with fp16 caches.
type reference struct {
	prompt []int32
	toks   []int32
	logits [][]float32
}

func fp16Reference(t testing.TB, m *model.Model, prompt []int32, steps int) reference {
	t.Helper()
	s := shapeOf(t, m)
	caches, err := kvstore.NewCaches(s, layoutOf(t, s, tables[0]))
	if err != nil {
		t.Fatal(err)
	}
	toks, logits := run(t, m, caches, prompt, steps, nil)
	return reference{prompt, toks, logits}
}

// compare runs layout l against the fp16 reference: free-running greedy agreement and,
// teacher-forced on the reference tokens, the argmax agreement and largest logit difference.
func compare(t testing.TB, m *model.Model, ref reference, l kvstore.Layout) agreement {
	t.Helper()
	s := shapeOf(t, m)
	caches, err := kvstore.NewCaches(s, l)
	if err != nil {
		t.Fatal(err)
	}
	toks, _ := run(t, m, caches, ref.prompt, len(ref.toks), nil)
	caches, _ = kvstore.NewCaches(s, l)
	_, forcedLogits := run(t, m, caches, ref.prompt, len(ref.toks), ref.toks)
	ag := agreement{firstDiff: -1}
	for i, want := range ref.toks {
		if toks[i] == want {
			ag.same++
		} else if ag.firstDiff < 0 {
			ag.firstDiff = i
		}
		if argmax(forcedLogits[i]) == want {
			ag.argmaxForced++
		}
		for j, v := range forcedLogits[i] {
			ag.maxLogitErr = math.Max(ag.maxLogitErr, math.Abs(float64(v-ref.logits[i][j])))
		}
	}
	return ag
}

// TestQuantizedCachesGenerate runs qwen3-tiny with the default quantized layout and
// with q4_0: teacher-forced on the fp16-cache tokens, nearly every step picks the same
// token and the logits stay close; fp16 through the rotating kind matches exactly.
func TestQuantizedCachesGenerate(t *testing.T) {
	m, prompt := loadTiny(t)
	defer m.Close()
	s := shapeOf(t, m)
	const steps = 16
	ref := fp16Reference(t, m, prompt, steps)
	l := layoutOf(t, s, tables[0])
	l.MaxKVSize = 4096 // Rotating, fp16
	if ag := compare(t, m, ref, l); ag.same != steps || ag.maxLogitErr != 0 {
		t.Errorf("fp16 rotating cache differs from the fp16 Full cache: %+v", ag)
	}
	for _, c := range []struct {
		ms     measured
		maxErr float64
	}{{tables[1], 1}, {tables[3], 4}} {
		ag := compare(t, m, ref, layoutOf(t, s, c.ms))
		t.Logf("%s: %d/%d greedy tokens as fp16 (first difference at %d), teacher-forced argmax %d/%d, max logit error %.3g",
			c.ms.name, ag.same, steps, ag.firstDiff, ag.argmaxForced, steps, ag.maxLogitErr)
		if ag.argmaxForced < steps*7/8 || ag.maxLogitErr > c.maxErr {
			t.Errorf("%s: teacher-forced argmax agrees %d/%d, max logit error %.3g (bound %g)", c.ms.name, ag.argmaxForced, steps, ag.maxLogitErr, c.maxErr)
		}
	}
}

// processCPU is the CPU time the process has used, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func rss() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func TestMeasureKV(t *testing.T) {
	if os.Getenv("MLXG_KV_MEASURE") != "1" {
		t.Skip("set MLXG_KV_MEASURE=1 to run the KV measurements (minutes)")
	}
	r := rand.New(rand.NewPCG(1, 2))

	// 1. Bytes per token on a Qwen3-1.7B-shaped cache (28 layers, 8 KV heads × 128):
	// resident-memory growth over 4096 appended tokens against the spec's arithmetic.
	var qs kvstore.ModelShape
	for i := 0; i < 28; i++ {
		qs.Layers = append(qs.Layers, kvstore.LayerShape{Kind: kvstore.LayerFull, KVHeads: 8, KHeadDim: 128, VHeadDim: 128})
	}
	const n = 4096
	kvec, vvec := randVec(r, 256*8*128), randVec(r, 256*8*128)
	fmt.Printf("\nKV bytes per token, Qwen3-1.7B shape (28 layers × 8 KV heads × 128), %d tokens\n", n)
	fmt.Printf("%-16s %12s %12s %12s %8s\n", "spec", "arithmetic", "RSS growth", "Bytes()", "ratio")
	for _, ms := range tables {
		l := layoutOf(t, qs, ms)
		runtime.GC()
		debug.FreeOSMemory()
		before := rss()
		caches, err := kvstore.NewCaches(qs, l)
		if err != nil {
			t.Fatal(err)
		}
		for p := 0; p < n; p += 256 {
			for _, c := range caches {
				if err := c.Append(kvec, vvec, 256); err != nil {
					t.Fatal(err)
				}
			}
		}
		runtime.GC()
		grown := rss() - before
		var held int64
		for _, c := range caches {
			held += c.Bytes()
		}
		want := l.TokenBytes(qs)
		ratio := float64(grown) / float64(want*n)
		fmt.Printf("%-16s %12d %12.0f %12.0f %8.3f\n", ms.name, want, float64(grown)/n, float64(held)/n, ratio)
		if math.Abs(ratio-1) > 0.05 {
			t.Errorf("%s: resident growth %.0f B/token vs arithmetic %d", ms.name, float64(grown)/n, want)
		}
		runtime.KeepAlive(caches)
	}

	// 2. Decode speed at 4K and 16K context on a random Qwen3-shaped model (8 layers,
	// hidden 1024, 16 heads, 8 KV heads × 128, bf16 weights), caches filled with random KV.
	dir := t.TempDir()
	cfg := randmodel.Config{Arch: "qwen3", VocabSize: 4096, HiddenSize: 1024, IntermediateSize: 2816, NumLayers: 8,
		NumHeads: 16, NumKVHeads: 8, HeadDim: 128, MaxPositions: 32768, RopeTheta: 1e6, RMSNormEps: 1e-6, DType: "bfloat16"}
	if err := randmodel.Generate(dir, cfg, randmodel.Options{Seed: 3}); err != nil {
		t.Fatal(err)
	}
	m, err := model.Load(dir, cpu.New(0))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ms := shapeOf(t, m)
	fmt.Printf("\nDecode, random Qwen3-shaped model (8 layers, 8 KV heads × 128), CPU backend, %d threads; specs\n", runtime.GOMAXPROCS(0))
	fmt.Println("interleaved, best of 4 rounds of 2 steps; tokens per wall second and per CPU second (the machine is shared)")
	fmt.Printf("%-16s %12s %12s %12s %12s\n", "spec", "4K wall", "4K cpu", "16K wall", "16K cpu")
	type best struct{ wall, cpu time.Duration }
	bests := make([][2]best, len(tables))
	for ci, ctx := range []int{4096, 16384} {
		all := make([][]kvstore.Layer, len(tables))
		for si, sp := range tables {
			if all[si], err = kvstore.NewCaches(ms, layoutOf(t, ms, sp)); err != nil {
				t.Fatal(err)
			}
			for p := 0; p < ctx; p += 256 {
				for _, c := range all[si] {
					if err := c.Append(kvec, vvec, 256); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		tok := []int32{1}
		for round := 0; round < 4; round++ {
			for si := range tables {
				start, cpu0 := time.Now(), processCPU()
				for i := 0; i < 2; i++ {
					if _, err := m.Forward(context.Background(), tok, all[si], false); err != nil {
						t.Fatal(err)
					}
				}
				b := best{time.Since(start) / 2, (processCPU() - cpu0) / 2}
				if cur := &bests[si][ci]; cur.wall == 0 || b.wall < cur.wall {
					cur.wall = b.wall
				}
				if cur := &bests[si][ci]; cur.cpu == 0 || b.cpu < cur.cpu {
					cur.cpu = b.cpu
				}
			}
		}
	}
	for si, sp := range tables {
		b := bests[si]
		fmt.Printf("%-16s %12.2f %12.2f %12.2f %12.2f\n", sp.name, 1/b[0].wall.Seconds(), 1/b[0].cpu.Seconds(), 1/b[1].wall.Seconds(), 1/b[1].cpu.Seconds())
	}

	// 3. Greedy agreement with fp16-KV output over 256 tokens on qwen3-tiny, and the max
	// logit error teacher-forced on the fp16 tokens.
	tiny, prompt := loadTiny(t)
	defer tiny.Close()
	ts := shapeOf(t, tiny)
	const steps = 256
	fmt.Printf("\nqwen3-tiny, %d greedy tokens after a %d-token prompt, against fp16 KV\n", steps, len(prompt))
	fmt.Printf("%-16s %10s %12s %16s %14s\n", "spec", "same", "first diff", "forced argmax", "max |Δlogit|")
	ref := fp16Reference(t, tiny, prompt, steps)
	for _, sp := range tables[1:] {
		ag := compare(t, tiny, ref, layoutOf(t, ts, sp))
		fmt.Printf("%-16s %6d/%d %12d %12d/%d %14.4f\n", sp.name, ag.same, steps, ag.firstDiff, ag.argmaxForced, steps, ag.maxLogitErr)
	}
}

func randVec(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	return x
}
