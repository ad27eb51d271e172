package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	_ "github.com/mlxg/mlxg/runner/model/all"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/runner/pipeline"
	"github.com/mlxg/mlxg/runner/pipeline/pipelinetest"
)

// The pipeline on the CPU backend, its ranks goroutines of this test joined by
// pipelinetest's in-memory transport in place of MLX's distributed layer. Every rank
// runs the CPU backend with the same threads as the single-process reference, every
// layer runs the same kernels on the same float32 values, and a hand-over copies
// float32s exactly, so the logits must be bit-identical to the unsplit model's, not
// merely close: any difference is a bug in the split.

// cpuThreads is every backend's threads here: the reference's and each rank's.
const cpuThreads = 2

// pipeArchs are the architectures split: dense (5 layers: 3+2 over two ranks, 2+2+1
// over three), mixture-of-experts (2 layers: over three ranks the last holds only the
// head), hybrid (Gated DeltaNet layers 0-2, full attention layer 3) and Gemma 4 of the
// 26B-A4B kind (4 layers: GELU-gated experts beside the MLP, sliding layers, unit value
// norms that every rank holds, soft-capped logits from a tied head).
func pipeArchs() []struct {
	name string
	cfg  randmodel.Config
} {
	dense := randmodel.Tiny("qwen3", 512)
	dense.NumLayers = 5
	e2b := randmodel.TinyGemma4(512)
	e2b.NumLayers = 8
	return []struct {
		name string
		cfg  randmodel.Config
	}{
		{"qwen3", dense},
		{"qwen3_moe", randmodel.TinyMoE(512)},
		{"qwen3_next", randmodel.TinyQwen3Next(512)},
		{"gemma4", randmodel.TinyGemma4MoE(512)},
		{"gemma4_e2b", e2b},
	}
}

// random4Bit writes a random checkpoint of cfg (seed), converted to MLX 4-bit in groups
// of 64, into a temporary folder, and returns it.
func random4Bit(t *testing.T, cfg randmodel.Config, seed uint64) string {
	t.Helper()
	hf := filepath.Join(t.TempDir(), "hf")
	if err := randmodel.Generate(hf, cfg, randmodel.Options{Seed: seed}); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(hf)
	dir := filepath.Join(t.TempDir(), cfg.Arch)
	if _, err := create.Convert(context.Background(), hf, dir, create.Options{Bits: 4, GroupSize: 64}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// pipeRun is what a run returned: every pass's logits, the greedy tokens, the passes
// and the tokens fed.
type pipeRun struct {
	Logits []float32
	Tokens []int32
	Passes int
	Fed    int
}

// greedyRun prefills prompt in chunks of chunk, every row's logits returned, then
// decodes steps tokens greedily, one pass each.
func greedyRun(t *testing.T, m *model.Model, caches []kvstore.Layer, prompt []int32, chunk, steps int) pipeRun {
	t.Helper()
	var r pipeRun
	var logits []float32
	for i := 0; i < len(prompt); i += chunk {
		part := prompt[i:min(i+chunk, len(prompt))]
		l, err := m.Forward(context.Background(), part, caches, true)
		if err != nil {
			t.Fatal(err)
		}
		r.Logits = append(r.Logits, l...)
		r.Passes++
		r.Fed += len(part)
		logits = l[len(l)-m.Config.VocabSize:]
	}
	for range steps {
		id := int32(argmax(logits))
		r.Tokens = append(r.Tokens, id)
		l, err := m.Forward(context.Background(), []int32{id}, caches, false)
		if err != nil {
			t.Fatal(err)
		}
		r.Logits = append(r.Logits, l...)
		r.Passes++
		r.Fed++
		logits = l
	}
	return r
}

func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}

// pipeKV are the caches the runs keep: float32, fp16, and a memory policy's kind of
// layout (keys 8-bit, values 4-bit, the first and last KV layers 8/8), which rank 0
// describes to the workers with a sequence's first pass.
var pipeKV = []string{"fp32", "fp16", "K8/V4+boundary"}

func pipeCaches(t *testing.T, m *model.Model, dir, kind string) []kvstore.Layer {
	t.Helper()
	if kind == "fp32" || kind == "fp16" {
		c, err := m.NewCaches(kind == "fp32")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	shape, err := kvstore.ShapeFromConfig(data, m.WeightBytes())
	if err != nil {
		t.Fatal(err)
	}
	a := kvstore.AffineFormat
	layout, err := kvstore.NewLayout(shape, kvstore.Spec{K: a(8, 32), V: a(4, 32)}, 1, kvstore.Spec{K: a(8, 32), V: a(8, 32)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := kvstore.NewCaches(shape, layout)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.FillCaches(c); err != nil {
		t.Fatal(err)
	}
	return c
}

// bitDiffs counts the values of got that are not bit for bit want's.
func bitDiffs(got, want []float32) int {
	n := 0
	for i := range min(len(got), len(want)) {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			n++
		}
	}
	return n + max(len(got), len(want)) - min(len(got), len(want))
}

type traffic map[[2]int]pipelinetest.Traffic

func snapshot(n *pipelinetest.Net) traffic {
	out := traffic{}
	for s := range n.Size() {
		for d := range n.Size() {
			if s != d {
				out[[2]int{s, d}] = n.Traffic(s, d)
			}
		}
	}
	return out
}

// checkSplit fails t unless every rank of p ran exactly its stage's layers in every one
// of the run's passes (rank 0 also the embeddings, the last rank the head), and the
// activations crossed exactly as a split model's must: each rank's residual stream to
// the next (every fed token's hidden state), and the logits from the last rank to rank 0.
func checkSplit(t *testing.T, p *pipelinetest.Pipeline, stages []pipeline.Stage, r pipeRun, before traffic, m *model.Model) {
	t.Helper()
	hidden, carried, vocab := m.Config.HiddenSize, carriedCols(m), m.Config.VocabSize
	for _, s := range stages {
		w := p.Backends[s.Rank].Work()
		want := map[int]int{}
		for i := s.Lo; i < s.Hi; i++ {
			want[i] = r.Passes
		}
		embeds, heads := 0, 0
		if s.First() {
			embeds = r.Passes
		}
		if s.Last() {
			heads = r.Passes
		}
		if w.Passes != r.Passes || !mapsEqual(w.Layers, want) || w.Embeds != embeds || w.Heads != heads {
			t.Errorf("%v: %d passes, layers run (layer: passes) %v, %d embeddings, %d heads; want %d passes, layers %v, %d embeddings, %d heads",
				s, w.Passes, w.Layers, w.Embeds, w.Heads, r.Passes, want, embeds, heads)
		}
	}
	now := snapshot(p.Net)
	size := len(stages)
	for link, tr := range now {
		src, dst := link[0], link[1]
		floats, values := tr.Floats-before[link].Floats, tr.FloatValues-before[link].FloatValues
		wantFloats, wantValues := 0, 0
		switch {
		case dst == src+1 && stages[dst].Lo < stages[dst].Hi:
			wantFloats, wantValues = r.Passes, r.Fed*(hidden+carried) // what the network carries goes to ranks that run layers
		case dst == src+1: // a last rank holding the head only: the rows of the logits
			wantFloats, wantValues = r.Passes, len(r.Logits)/vocab*hidden
		case src == size-1 && dst == 0:
			wantFloats, wantValues = r.Passes, len(r.Logits)
		}
		if floats != wantFloats || values != wantValues {
			t.Errorf("rank %d to rank %d: %d activation messages of %d values together, want %d of %d", src, dst, floats, values, wantFloats, wantValues)
		}
	}
}

// carriedCols is what m's network hands on beside the stream (Gemma 4's per-layer
// inputs); 0: nothing.
func carriedCols(m *model.Model) int {
	if c, ok := m.Network().(interface{ CarriedCols() int }); ok {
		return c.CarriedCols()
	}
	return 0
}

func mapsEqual(a, b map[int]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// TestPipelineCPU splits a dense, a mixture-of-experts and a hybrid random 4-bit model
// over two and then three ranks of the CPU backend: a 37-token prompt prefilled in
// chunks of 16 (every row's logits) and 6 greedy decode steps, over float32, fp16 and
// K8/V4 caches, give logits bit-identical to the unsplit model's on the same backend and
// the same greedy tokens. Each rank ran exactly its layers in every pass, and the
// residual stream and the logits crossed between the ranks as they must; a hand-over
// changed in flight changes the logits (the comparison is not blind).
func TestPipelineCPU(t *testing.T) {
	prompt, steps := modeltest.Tokens(5, 37), 6
	for i, a := range pipeArchs() {
		dir := random4Bit(t, a.cfg, uint64(3+i))
		ref, err := model.Load(dir, cpu.New(cpuThreads))
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]pipeRun{}
		for _, kind := range pipeKV {
			want[kind] = greedyRun(t, ref, pipeCaches(t, ref, dir, kind), prompt, 16, steps)
		}
		fullBytes := ref.WeightBytes()
		ref.Close()
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d_ranks", a.name, n), func(t *testing.T) {
				p := pipelinetest.Start(t, pipelinetest.Config{Ranks: n, Backend: func(int) compute.Backend { return cpu.New(cpuThreads) }})
				m, err := p.Leader.Load(dir, p.Backends[0])
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				stages, err := pipeline.SplitModel(m.Config, n)
				if err != nil {
					t.Fatal(err)
				}
				if st, ok := pipeline.StageOf(m); !ok || st != stages[0] {
					t.Fatalf("rank 0 loaded %v (a stage: %v), want %v", st, ok, stages[0])
				}
				if m.WeightBytes() >= fullBytes {
					t.Errorf("rank 0 binds %d weight bytes, the whole model %d: it should bind its layers only", m.WeightBytes(), fullBytes)
				}
				for _, kind := range pipeKV {
					for _, b := range p.Backends {
						b.ResetWork()
					}
					before := snapshot(p.Net)
					got := greedyRun(t, m, pipeCaches(t, m, dir, kind), prompt, 16, steps)
					w := want[kind]
					if d := bitDiffs(got.Logits, w.Logits); d > 0 {
						t.Errorf("%s: %d of %d logits differ from the unsplit model's (largest relative difference %.3g)", kind, d, len(w.Logits), modeltest.MaxRel(got.Logits, w.Logits))
					}
					if !slices.Equal(got.Tokens, w.Tokens) {
						t.Errorf("%s: greedy tokens %v, the unsplit model's %v", kind, got.Tokens, w.Tokens)
					}
					checkSplit(t, p, stages, got, before, m)
					t.Logf("%-15s %v: %d passes, logits bit-identical to one process's, tokens %v", kind, stages, got.Passes, got.Tokens)
				}
				// The comparison sees a wrong hand-over: one value of each residual stream
				// sent on, changed by 1, changes the logits.
				p.Net.Tamper = func(src, dst int, v []float32) {
					if dst == src+1 && len(v) > 0 {
						v[0]++
					}
				}
				bad := greedyRun(t, m, pipeCaches(t, m, dir, "fp32"), prompt, 16, 0)
				p.Net.Tamper = nil
				if d := bitDiffs(bad.Logits, want["fp32"].Logits[:len(bad.Logits)]); d == 0 {
					t.Errorf("a changed hand-over left every logit as it was: the comparison cannot see the transfers")
				}
			})
		}
	}
}

// batchRun runs three sequences of 20, 7 and 13 prompt tokens through batched passes
// (ForwardBatch, continuous batching's pass): their prompts together, then steps greedy
// steps together. It returns every pass's logits (each sequence's last row) and tokens.
func batchRun(t *testing.T, m *model.Model, steps int) pipeRun {
	t.Helper()
	var seqs []model.Sequence
	for i, n := range []int{20, 7, 13} {
		caches, err := m.NewCaches(false)
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, model.Sequence{Tokens: modeltest.Tokens(uint64(30+i), n), Caches: caches})
	}
	var r pipeRun
	for step := 0; step <= steps; step++ {
		res := m.ForwardBatch(context.Background(), seqs)
		r.Passes++
		for i := range seqs {
			if res[i].Err != nil {
				t.Fatal(res[i].Err)
			}
			r.Fed += len(seqs[i].Tokens)
			r.Logits = append(r.Logits, res[i].Logits...)
			id := int32(argmax(res[i].Logits))
			r.Tokens = append(r.Tokens, id)
			seqs[i].Tokens = []int32{id}
		}
	}
	return r
}

// TestPipelineBatchCPU runs batched passes of three sequences over two and three CPU
// ranks, for a dense and a hybrid model: each pass is one batched pass on every rank,
// whose logits are bit-identical to the unsplit model's batched pass. Before, a model
// that a worker refuses fails its load, naming the rank, and the pipeline goes on.
func TestPipelineBatchCPU(t *testing.T) {
	const steps = 4
	for i, a := range pipeArchs() {
		if a.name == "qwen3_moe" {
			continue
		}
		dir := random4Bit(t, a.cfg, uint64(6+i))
		ref, err := model.Load(dir, cpu.New(cpuThreads))
		if err != nil {
			t.Fatal(err)
		}
		want := batchRun(t, ref, steps)
		ref.Close()
		if err := os.Symlink(dir, dir+"-refused"); err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d_ranks", a.name, n), func(t *testing.T) {
				p := pipelinetest.Start(t, pipelinetest.Config{
					Ranks:   n,
					Backend: func(int) compute.Backend { return cpu.New(cpuThreads) },
					Open: func(dir string, s pipeline.Stage, b *pipelinetest.Backend) (*model.Model, error) {
						if strings.HasSuffix(dir, "-refused") && b.Rank() == n-1 {
							return nil, fmt.Errorf("refused (the test's)")
						}
						return pipeline.LoadStage(dir, b, s)
					},
				})
				_, err := p.Leader.Load(dir+"-refused", p.Backends[0])
				if !errors.Is(err, pipeline.ErrRankFailed) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d could not load", n-1)) {
					t.Fatalf("loading a model rank %d refuses: %v", n-1, err)
				}
				m, err := p.Leader.Load(dir, p.Backends[0])
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				if !m.Batched() {
					t.Fatal("the stage does not batch")
				}
				stages, err := pipeline.SplitModel(m.Config, n)
				if err != nil {
					t.Fatal(err)
				}
				before := snapshot(p.Net)
				got := batchRun(t, m, steps)
				if d := bitDiffs(got.Logits, want.Logits); d > 0 {
					t.Errorf("%d of %d logits differ from the unsplit batched pass's (largest relative difference %.3g)", d, len(want.Logits), modeltest.MaxRel(got.Logits, want.Logits))
				}
				if !slices.Equal(got.Tokens, want.Tokens) {
					t.Errorf("greedy tokens %v, the unsplit model's %v", got.Tokens, want.Tokens)
				}
				checkSplit(t, p, stages, got, before, m)
				t.Logf("%v: %d batched passes of 3 sequences, logits bit-identical to one process's, tokens %v", stages, got.Passes, got.Tokens)
			})
		}
	}
}

// TestPipelineRefusesUnsplittableCPU: a Gemma 4 of the E2B kind over more ranks than its
// KV-shared layers leave places to cut (6 layers, 4 and 5 reading the KV of 3 and 2: cuts
// after layers 0 and 1 and a last rank of the head only, for at most 4 ranks) fails its
// load on rank 0 with the reason, before any worker loads it, as a refusal the server
// answers with a 400 (registry.ErrUnsupported); the pipeline then loads and runs a model
// it can split.
func TestPipelineRefusesUnsplittableCPU(t *testing.T) {
	e2b := random4Bit(t, randmodel.TinyGemma4(512), 12)
	dense := random4Bit(t, pipeArchs()[0].cfg, 13)
	var opened atomic.Int32
	p := pipelinetest.Start(t, pipelinetest.Config{
		Ranks:   5,
		Backend: func(int) compute.Backend { return cpu.New(cpuThreads) },
		Open: func(dir string, s pipeline.Stage, b *pipelinetest.Backend) (*model.Model, error) {
			opened.Add(1)
			return pipeline.LoadStage(dir, b, s)
		},
	})
	_, err := p.Leader.Load(e2b, p.Backends[0])
	if !errors.Is(err, registry.ErrUnsupported) || !strings.Contains(err.Error(), "6 layers cannot be split over 5 ranks: a layer that reads another layer's KV runs on that layer's rank") {
		t.Fatalf("splitting a Gemma 4 E2B over 5 ranks: %v", err)
	}
	if n := opened.Load(); n != 0 {
		t.Errorf("%d workers loaded the model rank 0 refused", n)
	}
	ref, err := model.Load(dense, cpu.New(cpuThreads))
	if err != nil {
		t.Fatal(err)
	}
	prompt := modeltest.Tokens(5, 12)
	want := greedyRun(t, ref, pipeCaches(t, ref, dense, "fp32"), prompt, 16, 3).Tokens
	ref.Close()
	m, err := p.Leader.Load(dense, p.Backends[0])
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if got := greedyRun(t, m, pipeCaches(t, m, dense, "fp32"), prompt, 16, 3).Tokens; !slices.Equal(got, want) {
		t.Errorf("after the refusal: tokens %v, the unsplit model's %v", got, want)
	}
}

// rankStates is each rank's State in m.Ranks().
func rankStates(m *model.Model) []string {
	var s []string
	for _, r := range m.Ranks() {
		s = append(s, r.State)
	}
	return s
}

// TestPipelineRankGoneCPU makes a worker rank go away mid-pipeline as a dead machine
// does on MLX's ring (its transfers never complete): a request in flight fails once
// rank 0 learns it (the liveness connection's notice, Leader.RankGone) or once the
// exchange's timeout passes, with ErrRankFailed naming the cause; later requests fail
// at once, and Ranks shows the rank gone and the others stalled. (The MLX test of the
// whole server is cmd/mlxg's TestDistributedServeRankDies.)
func TestPipelineRankGoneCPU(t *testing.T) {
	dir := random4Bit(t, pipeArchs()[0].cfg, 11)
	prompt := modeltest.Tokens(5, 12)
	start := func(t *testing.T) (*pipelinetest.Pipeline, *model.Model, []kvstore.Layer) {
		p := pipelinetest.Start(t, pipelinetest.Config{Ranks: 3, Backend: func(int) compute.Backend { return cpu.New(cpuThreads) }})
		m, err := p.Leader.Load(dir, p.Backends[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { m.Close() })
		caches, err := m.NewCaches(true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Forward(context.Background(), prompt, caches, false); err != nil {
			t.Fatal(err)
		}
		if s := rankStates(m); !slices.Equal(s, []string{"ready", "ready", "ready"}) {
			t.Fatalf("ranks before: %v", s)
		}
		return p, m, caches
	}
	// fails runs a decode step and returns its error, failing t when it took longer
	// than within.
	fails := func(t *testing.T, m *model.Model, caches []kvstore.Layer, within time.Duration, during func()) error {
		t.Helper()
		began := time.Now()
		done := make(chan error, 1)
		go func() {
			_, err := m.Forward(context.Background(), []int32{7}, caches, false)
			done <- err
		}()
		if during != nil {
			during()
		}
		select {
		case err := <-done:
			if !errors.Is(err, pipeline.ErrRankFailed) {
				t.Fatalf("a pass with a rank gone: %v, want ErrRankFailed", err)
			}
			return err
		case <-time.After(within + 10*time.Second):
			t.Fatalf("a pass with a rank gone still runs after %v", time.Since(began))
		}
		return nil
	}

	t.Run("notice", func(t *testing.T) {
		p, m, caches := start(t)
		p.Leader.Timeout = 0 // none: only the notice ends the pass
		p.Net.Cut(1)
		err := fails(t, m, caches, 0, func() {
			time.Sleep(200 * time.Millisecond) // the pass is blocked on the dead rank by now
			p.Leader.RankGone(1, errors.New("rank 1 (test) is gone"))
		})
		if !strings.Contains(err.Error(), "rank 1 (test) is gone") {
			t.Errorf("the pass's error %q does not say which rank went", err)
		}
		began := time.Now()
		fails(t, m, caches, 0, nil)
		if d := time.Since(began); d > time.Second {
			t.Errorf("a later pass took %v to fail", d)
		}
		if s := rankStates(m); !slices.Equal(s, []string{"stalled", "gone", "stalled"}) {
			t.Errorf("ranks after rank 1 went: %v", s)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		p, m, caches := start(t)
		p.Leader.Timeout = 300 * time.Millisecond
		p.Net.Cut(2)
		err := fails(t, m, caches, p.Leader.Timeout, nil)
		if !strings.Contains(err.Error(), "did not answer within") {
			t.Errorf("the pass's error %q does not say the workers timed out", err)
		}
		if s := rankStates(m); !slices.Equal(s, []string{"stalled", "stalled", "stalled"}) {
			t.Errorf("ranks after the timeout: %v", s)
		}
	})
}
