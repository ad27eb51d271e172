package main

// The "stream" scenario: a mixture-of-experts model larger than a memory cap.
//
//	go run ./scripts/bench stream [--layers 16] [--cap 2GiB] [--uniform-embed 3] [--decode 40] ...
//
// It generates a random Qwen3-30B-A3B-shaped MoE cut to --layers layers (128 experts, top 8,
// expert width 768, MLX 4-bit group 64), twice: with randmodel's small embeddings, whose routing
// has a trained MoE's locality, and with large ones (--uniform-embed, randmodel's EmbeddingScale),
// whose routing is near-uniform. For each it records the routing of an uncapped
// run and replays it through the expert-cache policies (runner/residency), then runs the model
// in child processes, each from a cold page cache: uncapped (mapped weights; the decode measured
// on a second pass, warm), under a memory cgroup of --cap with the weights mapped, and under the
// same cap in streaming mode (runner/residency, budget --cap minus --margin). It prints TTFT,
// decode rate, MB read from disk per token, major faults, the expert cache's hit rate after 25
// tokens and the read-ahead's accuracy, and checks that every run produced the same tokens.
//
// The cap is a memory cgroup the bench creates under its own for each capped run
// (internal/memcgroup: cgroup v1 or v2) and removes after it, reading the run's peak use; where
// that is not permitted the capped runs are skipped with a message. The page cache is dropped with /proc/sys/vm/drop_caches where permitted, else
// with posix_fadvise(DONTNEED) on the checkpoint's files.

import (
	"bufio"
	"context"
	_ "embed"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/mlxg/mlxg/api/server"
	"github.com/mlxg/mlxg/internal/memcgroup"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/qwen3moe"
	"github.com/mlxg/mlxg/runner/residency"
)

type streamCfg struct {
	Layers      int     `json:"layers"`
	DenseLayers int     `json:"dense_layers"`
	Cap         int64   `json:"cap_bytes"`
	Margin      int64   `json:"margin_bytes"` // 0: the loader's budget (what the cap allows)
	Uniform     float64 `json:"uniform_embedding_scale"`
	Qwen        float64 `json:"qwen_embedding_scale"`
	Prompt      int     `json:"prompt"`
	Decode      int     `json:"decode"`
	Threads     int     `json:"threads"`
	Cache       string  `json:"cache"`
	Policy      string  `json:"policy"`
	// Tokenizer is a Qwen checkpoint whose tokenizer.json the llama.cpp runs' GGUF gets.
	Tokenizer string `json:"tokenizer"`
	// Timeout stops a run that takes longer (a thrashing mapped model under the cap).
	Timeout time.Duration `json:"timeout_ns"`
}

// streamShape is Qwen3-30B-A3B cut to layers layers.
func streamShape(layers int, embed float64) randmodel.Config {
	return randmodel.Config{
		Arch: "qwen3_moe", VocabSize: 151936, HiddenSize: 2048, IntermediateSize: 6144, NumLayers: layers,
		NumHeads: 32, NumKVHeads: 4, HeadDim: 128, MaxPositions: 40960, RopeTheta: 1e6, RMSNormEps: 1e-6,
		DType: "bfloat16", NumExperts: 128, TopK: 8, MoEIntermediate: 768, NormTopK: true, EmbeddingScale: embed,
	}
}

// denseShape is Qwen3-8B (hidden 4096, MLP 12288, 32 query and 8 KV heads, Qwen's
// vocabulary) cut to layers layers, with tied embeddings so that most of the weights
// are layers: at 26 layers its MLX 4-bit weights are 2.95 GiB, 1.5 times a 2 GiB cap.
func denseShape(layers int) randmodel.Config {
	return randmodel.Config{
		Arch: "qwen3", VocabSize: 151936, HiddenSize: 4096, IntermediateSize: 12288, NumLayers: layers,
		NumHeads: 32, NumKVHeads: 8, HeadDim: 128, MaxPositions: 40960, RopeTheta: 1e6, RMSNormEps: 1e-6,
		DType: "bfloat16", TieWordEmbeddings: true,
	}
}

// streamModel generates (once, cached) the MLX 4-bit checkpoint of a case: the MoE with
// embeddings of scale embed, or, with dense, the dense model.
func streamModel(ctx context.Context, c streamCfg, embed float64, dense bool) (string, error) {
	dir := filepath.Join(c.Cache, fmt.Sprintf("stream-moe-%dl-embed%g", c.Layers, embed))
	shape := streamShape(c.Layers, embed)
	if dense {
		dir, shape = filepath.Join(c.Cache, fmt.Sprintf("stream-dense-%dl", c.DenseLayers)), denseShape(c.DenseLayers)
	}
	out := filepath.Join(dir, "mlx4")
	if _, err := os.Stat(filepath.Join(out, "config.json")); err == nil {
		return out, addTokenizer(out, c.Tokenizer)
	}
	hf := filepath.Join(dir, "hf")
	fmt.Printf("generating %s...\n", dir)
	start := time.Now()
	if err := randmodel.Generate(hf, shape, randmodel.Options{Seed: 1}); err != nil {
		return "", err
	}
	if _, err := create.Convert(ctx, hf, out, create.Options{Bits: 4, GroupSize: 64}); err != nil {
		return "", err
	}
	os.RemoveAll(hf) // the bf16 checkpoint is three times the 4-bit one
	fmt.Printf("  done in %s\n", time.Since(start).Round(time.Second))
	return out, addTokenizer(out, c.Tokenizer)
}

// addTokenizer copies a Qwen tokenizer (tokenizer.json and tokenizer_config.json of the
// checkpoint in from) into the model dir when it has none, so that the server's loader,
// mlxg run and mlxg serve can load it (a random model's vocabulary is Qwen's). Without
// from the model stays without one: the streamed run then fails to load it.
func addTokenizer(dir, from string) error {
	if from == "" {
		return nil
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(from, f))
		if err != nil {
			return fmt.Errorf("--tokenizer: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), raw, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// streamResult is one child run.
type streamResult struct {
	Mode        string  `json:"mode"`
	Routing     string  `json:"routing"`
	Load        float64 `json:"load_s"`
	TTFT        float64 `json:"ttft_s"` // the prompt's pass
	DecodeTPS   float64 `json:"decode_tps"`
	StepMedian  float64 `json:"step_median_s"`
	MBPerTok    float64 `json:"disk_mb_per_token"` // /proc/self/io read_bytes over the decode
	CacheMBTok  float64 `json:"stream_mb_per_token"`
	MajFltTok   float64 `json:"major_faults_per_token"`
	HitRate25   float64 `json:"hit_rate_after_25"`
	PrefetchAcc float64 `json:"prefetch_useful"`
	GuessAcc    float64 `json:"route_guess_accuracy"`
	RepeatAcc   float64 `json:"repeat_guess_accuracy"` // the previous token's picks as the guess
	PeakRSS     int64   `json:"peak_rss_bytes"`
	CgroupPeak  int64   `json:"cgroup_peak_bytes"` // the capped run's cgroup: its peak use
	Budget      int64   `json:"weight_budget_bytes"`
	Repeat      float64 `json:"picks_repeated"` // of the routing, uncapped
	// Where a streamed decode step's time goes, per token: waiting for expert reads,
	// the readers' busy time, and the units read.
	WaitTok     float64   `json:"read_wait_s_per_token"`
	ReadTimeTok float64   `json:"read_time_s_per_token"`
	ReadsTok    float64   `json:"reads_per_token"`
	Tokens      []int32   `json:"tokens"`
	Steps       []float64 `json:"steps_s"`
	Err         string    `json:"error,omitempty"`
}

func runStreamScenario(args []string) error {
	home, _ := os.UserHomeDir()
	fs := flag.NewFlagSet("stream", flag.ExitOnError)
	var c streamCfg
	capS := fs.String("cap", "2GiB", "memory cap of the capped runs")
	marginS := fs.String("margin", "0", "a fixed streaming budget of the cap less this margin; 0: the budget the server's loader plans from the memory the cap leaves")
	fs.IntVar(&c.Layers, "layers", 16, "decoder layers of the Qwen3-30B-A3B shape")
	fs.IntVar(&c.DenseLayers, "dense-layers", 26, "decoder layers of the dense case's Qwen3-8B shape")
	fs.Float64Var(&c.Uniform, "uniform-embed", randmodel.RoutingScales["uniform"], "embedding scale of the near-uniform model (registry/randmodel EmbeddingScale; the local one has the default 0.1)")
	fs.Float64Var(&c.Qwen, "qwen-embed", randmodel.RoutingScales["qwen"], "embedding scale of the Qwen-like model, whose router repeats about 48% of a token's picks at the next token")
	fs.IntVar(&c.Prompt, "prompt", 32, "prompt tokens")
	fs.IntVar(&c.Decode, "decode", 40, "decoded tokens (sampled at temperature 1, fixed seed)")
	fs.IntVar(&c.Threads, "threads", 2, "CPU threads")
	fs.DurationVar(&c.Timeout, "timeout", 15*time.Minute, "stop a run that takes longer (reported as stopped)")
	fs.StringVar(&c.Policy, "policy", "frequency", "expert cache policy: frequency, lru or lfu")
	fs.StringVar(&c.Cache, "cache", filepath.Join(home, ".cache", "mlxg-bench"), "directory for the models and results")
	defTok := ""
	if s := os.Getenv("MLXG_SHARED"); s != "" {
		defTok = filepath.Join(s, "models", "qwen3-tiny")
	}
	fs.StringVar(&c.Tokenizer, "tokenizer", defTok, "a Qwen checkpoint whose tokenizer.json goes into the GGUF of the llama.cpp modes (default $MLXG_SHARED/models/qwen3-tiny)")
	routings := fs.String("routing", "local,qwen,uniform", "cases to run: the MoE with local, Qwen-like (qwen) and/or near-uniform (uniform) routing, and dense (a dense model)")
	report := fs.Bool("report", true, "record each model's routing uncapped and replay it through the cache policies")
	modes := fs.String("modes", "uncapped,mmap-capped,stream-capped", "runs per case: uncapped, mmap-capped, stream-capped, llamacpp-capped (llama.cpp on the same weights as Q4_1 GGUF, under the cap) and llamacpp (uncapped)")
	fs.Parse(args)
	capB, err := humanize.ParseBytes(*capS)
	if err != nil {
		return fmt.Errorf("--cap %q: %w", *capS, err)
	}
	marginB, err := humanize.ParseBytes(*marginS)
	if err != nil {
		return fmt.Errorf("--margin %q: %w", *marginS, err)
	}
	c.Cap, c.Margin = int64(capB), int64(marginB)
	if c.Margin >= c.Cap {
		return fmt.Errorf("--margin %s: less than the cap", *marginS)
	}
	if c.Decode < 26 {
		return fmt.Errorf("--decode %d: at least 26, for the hit rate after 25 tokens", c.Decode)
	}
	ctx := context.Background()
	// Each capped run gets a cgroup of its own, for its peak memory.
	capped := true
	if cg, err := memcgroup.New(c.Cap); err != nil {
		fmt.Printf("capped runs skipped: %v\n", err)
		capped = false
	} else {
		cg.Remove()
		fmt.Printf("memory cap: %s, a cgroup under %s for each capped run\n", humanize.IBytes(uint64(c.Cap)), filepath.Dir(cg.Dir))
	}
	var all []streamResult
	for _, routing := range strings.Split(*routings, ",") {
		embed := 0.0
		switch routing {
		case "uniform":
			embed = c.Uniform
		case "qwen":
			embed = c.Qwen
		case "local", "dense":
		default:
			return fmt.Errorf("--routing %q: want local, qwen, uniform or dense", routing)
		}
		dir, err := streamModel(ctx, c, embed, routing == "dense")
		if err != nil {
			return err
		}
		repeat := 0.0
		if routing != "dense" && *report {
			if repeat, err = routingReport(dir, c); err != nil {
				return err
			}
		}
		for _, mode := range strings.Split(*modes, ",") {
			if mode == "" {
				continue // --modes "": generate the models and report their routing only
			}
			var cg *memcgroup.Cgroup
			if strings.HasSuffix(mode, "-capped") {
				if !capped {
					continue
				}
				if cg, err = memcgroup.New(c.Cap); err != nil {
					return err
				}
			}
			var r streamResult
			if strings.HasPrefix(mode, "llamacpp") {
				r, err = llamacppChild(ctx, c, dir, mode, cg)
			} else {
				r, err = streamChild(c, dir, mode, cg)
			}
			if cg != nil {
				r.CgroupPeak = cg.Peak()
				cg.Remove()
			}
			if err != nil {
				return err
			}
			r.Routing, r.Repeat = routing, repeat
			all = append(all, r)
			printStreamResult(r)
		}
	}
	printStreamTable(all, c.Cap)
	out := filepath.Join(c.Cache, "results", "stream-"+time.Now().UTC().Format("20060102-150405")+".json")
	os.MkdirAll(filepath.Dir(out), 0o755)
	raw, _ := json.MarshalIndent(map[string]any{"config": c, "runs": all}, "", "  ")
	fmt.Println("results:", out)
	return os.WriteFile(out, raw, 0o644)
}

// routingReport runs the model uncapped in this process, records which experts each
// token picks at each layer, and replays that trace through the cache policies.
func routingReport(dir string, c streamCfg) (float64, error) {
	m, err := model.Load(dir, cpu.New(c.Threads))
	if err != nil {
		return 0, err
	}
	defer m.Close()
	n, ok := m.Network().(*qwen3moe.Network)
	if !ok {
		return 0, fmt.Errorf("%s is not a qwen3_moe model", dir)
	}
	experts := 0
	var picks [][][]int // layer, token, picks
	for _, l := range n.Layers {
		if l.MoE == nil {
			continue
		}
		experts = l.MoE.Experts
		s, idx := l.MoE, len(picks)
		picks = append(picks, nil)
		s.OnRoute = func(ctx compute.Context, logits compute.Tensor) {
			v, err := ctx.Float32s(logits)
			if err != nil {
				return
			}
			rows, cols := logits.Dims()
			for r := range rows {
				es, _ := s.Routing.Select(v[r*cols : (r+1)*cols])
				picks[idx] = append(picks[idx], es)
			}
		}
	}
	layers := len(picks)
	caches, err := m.NewCaches(false)
	if err != nil {
		return 0, err
	}
	toks := promptTokens(c.Prompt)
	logits, err := m.Forward(context.Background(), toks, caches, false)
	if err != nil {
		return 0, err
	}
	smp := &sampler{s: 42}
	for range c.Decode {
		t := smp.next(logits)
		if logits, err = m.Forward(context.Background(), []int32{t}, caches, false); err != nil {
			return 0, err
		}
	}
	// Decode tokens only (the prompt's pass reads every expert once anyway), in the
	// order a pass uses them: token by token, layer by layer.
	var trace []int
	rep, tot := 0, 0
	for t := c.Prompt; t < c.Prompt+c.Decode; t++ {
		for l := range picks {
			for _, e := range picks[l][t] {
				trace = append(trace, l*experts+e)
				if t > c.Prompt {
					tot++
					if slices.Contains(picks[l][t-1], e) {
						rep++
					}
				}
			}
		}
	}
	repeat := float64(rep) / float64(max(tot, 1))
	// The picks, for replaying them through other cache policies offline.
	rec := filepath.Join(c.Cache, "results", "routing-"+filepath.Base(filepath.Dir(dir))+".json")
	os.MkdirAll(filepath.Dir(rec), 0o755)
	raw, _ := json.Marshal(map[string]any{"experts": experts, "prompt": c.Prompt, "decode": c.Decode, "picks": picks})
	if err := os.WriteFile(rec, raw, 0o644); err != nil {
		return 0, err
	}
	fmt.Printf("routing of %s over %d decoded tokens: %.0f%% of the picks repeat at the next token\n", filepath.Base(filepath.Dir(dir)), c.Decode, 100*repeat)
	units := layers * experts
	for _, share := range []float64{0.25, 0.38, 0.5} {
		fmt.Printf("  cache of %2.0f%% of the experts, hit rate on this trace:", 100*share)
		for _, p := range []residency.Policy{residency.LRU, residency.LFU, residency.Frequency} {
			h := residency.Simulate(trace, units, int(share*float64(units)), p, 0)
			fmt.Printf("  %s %.2f", p, float64(h)/float64(len(trace)))
		}
		fmt.Println()
	}
	return repeat, nil
}

func promptTokens(n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(1000 + (i*7919)%50000)
	}
	return p
}

// sampler draws tokens at temperature 1 from a fixed seed: the same logits give the same
// tokens, and a random model's greedy decode would repeat one token.
type sampler struct{ s uint64 }

func (r *sampler) next(logits []float32) int32 {
	r.s = r.s*6364136223846793005 + 1442695040888963407
	u := float64(r.s>>11) / (1 << 53)
	maxv := logits[0]
	for _, x := range logits {
		maxv = max(maxv, x)
	}
	var sum float64
	for _, x := range logits {
		sum += math.Exp(float64(x - maxv))
	}
	u *= sum
	for i, x := range logits {
		if u -= math.Exp(float64(x - maxv)); u <= 0 {
			return int32(i)
		}
	}
	return int32(len(logits) - 1)
}

// streamChild runs one mode in a child process (in the cgroup for the capped modes)
// after dropping the checkpoint from the page cache.
func streamChild(c streamCfg, dir, mode string, cg *memcgroup.Cgroup) (streamResult, error) {
	dropCache(dir)
	self, err := os.Executable()
	if err != nil {
		return streamResult{}, err
	}
	args := []string{"stream-child", "--dir", dir, "--mode", mode, "--prompt", strconv.Itoa(c.Prompt), "--decode", strconv.Itoa(c.Decode),
		"--threads", strconv.Itoa(c.Threads), "--policy", c.Policy}
	if c.Margin > 0 {
		args = append(args, "--budget", strconv.FormatInt(c.Cap-c.Margin, 10))
	}
	if mode != "uncapped" {
		args = append(args, "--cgroup", cg.Procs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	var r streamResult
	if jerr := json.Unmarshal(lastLine(out), &r); jerr != nil {
		if err == nil {
			err = jerr
		}
		r = streamResult{Mode: mode, Err: fmt.Sprintf("%v (killed by the cap?)", err)}
		if ctx.Err() != nil {
			r.Err = fmt.Sprintf("stopped after %s (--timeout)", c.Timeout)
		}
	}
	return r, nil
}

func lastLine(b []byte) []byte {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return []byte(lines[len(lines)-1])
}

// runStreamChild is one measured run: load, the prompt's pass, sampled decode (temperature 1, fixed seed).
func runStreamChild(args []string) error {
	fs := flag.NewFlagSet("stream-child", flag.ExitOnError)
	dir := fs.String("dir", "", "")
	mode := fs.String("mode", "", "")
	prompt := fs.Int("prompt", 32, "")
	decode := fs.Int("decode", 40, "")
	threads := fs.Int("threads", 2, "")
	budget := fs.Int64("budget", 0, "")
	policy := fs.String("policy", "frequency", "")
	cgroup := fs.String("cgroup", "", "")
	fs.Parse(args)
	r := streamResult{Mode: *mode}
	emit := func(err error) error {
		if err != nil {
			r.Err = err.Error()
		}
		raw, _ := json.Marshal(r)
		fmt.Println(string(raw))
		return nil
	}
	if *cgroup != "" {
		if err := os.WriteFile(*cgroup, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			return emit(fmt.Errorf("joining the cgroup: %w", err))
		}
	}
	start := time.Now()
	var res *residency.Manager
	var m *model.Model
	var err error
	chunk := *prompt // prompt tokens per pass
	if *mode == "stream-capped" {
		p, perr := residency.ParsePolicy(*policy)
		if perr != nil {
			return emit(perr)
		}
		if *budget > 0 {
			res = residency.New(residency.Options{Budget: *budget, Policy: p})
			m, err = model.LoadWith(*dir, cpu.New(*threads), model.LoadConfig{Residency: res})
		} else {
			// As mlxg run DIR and mlxg serve load it: the server's loader plans the load
			// from the memory the cap leaves, streaming when the weights do not fit.
			loader := &server.EngineLoader{Backend: cpu.New(*threads), StreamPolicy: p,
				KV: &kvstore.Policy{Log: slog.New(slog.DiscardHandler)}}
			lm, lerr := server.DirModel(*dir)
			if lerr != nil {
				return emit(lerr)
			}
			plan, perr := loader.Plan(lm, 4096, 0)
			if perr != nil {
				return emit(perr)
			}
			loaded, lerr := loader.Load(context.Background(), plan)
			if lerr != nil {
				return emit(lerr)
			}
			defer loaded.Close()
			m = server.Engine(loaded).Model
			if res = m.Residency(); res == nil {
				return emit(fmt.Errorf("the loader did not stream %s under the cap", *dir))
			}
			r.Budget = plan.WeightBudget
			if plan.MaxBatch > 0 {
				chunk = plan.MaxBatch // as the engine caps num_batch
			}
		}
	} else {
		m, err = model.Load(*dir, cpu.New(*threads))
	}
	if err != nil {
		return emit(err)
	}
	if r.Budget == 0 {
		defer m.Close()
		if res != nil {
			r.Budget = *budget
		}
	}
	r.Load = time.Since(start).Seconds()
	passes := 1
	if *mode == "uncapped" {
		passes = 2 // the second pass decodes from a warm page cache
	}
	for pass := range passes {
		caches, err := m.NewCaches(false)
		if err != nil {
			return emit(err)
		}
		t0 := time.Now()
		var logits []float32
		toks := promptTokens(*prompt)
		for i := 0; i < len(toks); i += chunk {
			if logits, err = m.Forward(context.Background(), toks[i:min(i+chunk, len(toks))], caches, false); err != nil {
				return emit(err)
			}
		}
		if pass == 0 {
			r.TTFT = time.Since(t0).Seconds()
		}
		r.Tokens, r.Steps = nil, nil
		io0, flt0 := procIO(), majFaults()
		var s0, s25 residency.Stats
		if res != nil {
			s0 = res.Stats()
		}
		d0 := time.Now()
		smp := &sampler{s: 42}
		for i := range *decode {
			tok := smp.next(logits)
			r.Tokens = append(r.Tokens, tok)
			if i == 25 && res != nil {
				s25 = res.Stats()
			}
			ts := time.Now()
			if logits, err = m.Forward(context.Background(), []int32{tok}, caches, false); err != nil {
				return emit(err)
			}
			r.Steps = append(r.Steps, time.Since(ts).Seconds())
		}
		el := time.Since(d0).Seconds()
		r.DecodeTPS = float64(*decode) / el
		r.StepMedian = median(r.Steps)
		r.MBPerTok = float64(procIO()-io0) / 1e6 / float64(*decode)
		r.MajFltTok = float64(majFaults()-flt0) / float64(*decode)
		if res != nil {
			s := res.Stats()
			r.CacheMBTok = float64(s.BytesRead-s0.BytesRead) / 1e6 / float64(*decode)
			h, mi := s.Hits-s25.Hits, s.Misses-s25.Misses
			r.HitRate25 = float64(h) / float64(max(h+mi, 1))
			r.PrefetchAcc = float64(s.PrefetchUseful-s0.PrefetchUseful) / float64(max(s.PrefetchIssued-s0.PrefetchIssued, 1))
			r.GuessAcc = float64(s.PredictedRight-s0.PredictedRight) / float64(max(s.Predicted-s0.Predicted, 1))
			r.RepeatAcc = float64(s.RepeatRight-s0.RepeatRight) / float64(max(s.RepeatGuessed-s0.RepeatGuessed, 1))
			r.WaitTok = float64(s.Wait-s0.Wait) / 1e9 / float64(*decode)
			r.ReadTimeTok = float64(s.ReadTime-s0.ReadTime) / 1e9 / float64(*decode)
			r.ReadsTok = float64(s.Reads-s0.Reads) / float64(*decode)
		}
	}
	r.PeakRSS = peakRSS()
	return emit(nil)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// procIO is this process's bytes read from storage (/proc/self/io read_bytes).
func procIO() int64 {
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "read_bytes: "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func majFaults() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Majflt
}

// dropCache drops the checkpoint's files from the page cache: all of it where
// /proc/sys/vm/drop_caches may be written, else the files' pages (posix_fadvise).
func dropCache(dir string) {
	exec.Command("sync").Run()
	if os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0o200) == nil {
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			residency.DropCache(f, 0, st.Size())
		}
	}
}

func printStreamResult(r streamResult) {
	if r.Err != "" {
		fmt.Printf("  %-8s %-14s error: %s\n", r.Routing, r.Mode, r.Err)
		return
	}
	fmt.Printf("  %-8s %-14s load %.1fs TTFT %.2fs decode %.2f tok/s (median step %.3fs) disk %.1f MB/tok faults %.0f/tok",
		r.Routing, r.Mode, r.Load, r.TTFT, r.DecodeTPS, r.StepMedian, r.MBPerTok, r.MajFltTok)
	if r.Mode == "stream-capped" {
		fmt.Printf(" budget %s streamed %.1f MB/tok (%.1f reads) hit rate after 25 tok %.2f read-ahead used %.2f guess %.2f (previous token's %.2f) waiting for reads %.3fs/tok, readers busy %.3fs/tok",
			humanize.IBytes(uint64(r.Budget)), r.CacheMBTok, r.ReadsTok, r.HitRate25, r.PrefetchAcc, r.GuessAcc, r.RepeatAcc, r.WaitTok, r.ReadTimeTok)
	}
	fmt.Printf(" peak RSS %s", humanize.IBytes(uint64(r.PeakRSS)))
	if r.CgroupPeak > 0 {
		fmt.Printf(" cgroup peak %s", humanize.IBytes(uint64(r.CgroupPeak)))
	}
	fmt.Println()
}

func printStreamTable(all []streamResult, capB int64) {
	fmt.Println("\nrouting   repeat  run             TTFT s  TTFT vs uncapped  decode tok/s  vs uncapped  disk MB/tok  streamed MB/tok  hit@25  read wait s/tok  peak of cap  same tokens")
	var ref = map[string]streamResult{}
	for _, r := range all {
		if r.Mode == "uncapped" && r.Err == "" {
			ref[r.Routing] = r
		}
	}
	for _, r := range all {
		u, ok := ref[r.Routing]
		ratio, same, ttft := "-", "-", "-"
		if ok && r.Err == "" {
			ratio = fmt.Sprintf("%.0f%%", 100*r.DecodeTPS/u.DecodeTPS)
			ttft = fmt.Sprintf("%.2fx", r.TTFT/u.TTFT)
			if !strings.HasPrefix(r.Mode, "llamacpp") { // llama.cpp samples with its own sampler
				same = strconv.FormatBool(slices.Equal(r.Tokens, u.Tokens))
			}
		}
		repeat := "-"
		if r.Repeat > 0 {
			repeat = fmt.Sprintf("%.0f%%", 100*r.Repeat)
		}
		if r.Err != "" {
			fmt.Printf("%-9s %6s  %-15s error: %s\n", r.Routing, repeat, r.Mode, r.Err)
			continue
		}
		hit, streamed, wait, peak := "-", "-", "-", "-"
		if r.Mode == "stream-capped" {
			hit, streamed, wait = fmt.Sprintf("%.2f", r.HitRate25), fmt.Sprintf("%.1f", r.CacheMBTok), fmt.Sprintf("%.3f", r.WaitTok)
		}
		if r.CgroupPeak > 0 {
			peak = fmt.Sprintf("%.0f%%", 100*float64(r.CgroupPeak)/float64(capB))
		}
		fmt.Printf("%-9s %6s  %-15s %6.2f  %16s  %12.2f  %11s  %11.1f  %15s  %6s  %15s  %11s  %s\n", r.Routing, repeat, r.Mode, r.TTFT, ttft, r.DecodeTPS, ratio, r.MBPerTok, streamed, hit, wait, peak, same)
	}
	// mlxg streaming against llama.cpp under the same cap, per case.
	byMode := map[[2]string]streamResult{}
	for _, r := range all {
		if r.Err == "" {
			byMode[[2]string{r.Routing, r.Mode}] = r
		}
	}
	for _, r := range all {
		if r.Mode != "stream-capped" || r.Err != "" {
			continue
		}
		if l, ok := byMode[[2]string{r.Routing, "llamacpp-capped"}]; ok && l.DecodeTPS > 0 {
			fmt.Printf("%s: mlxg streaming decodes %.1fx llama.cpp under the same cap (%.2f against %.2f tok/s)\n", r.Routing, r.DecodeTPS/l.DecodeTPS, r.DecodeTPS, l.DecodeTPS)
		}
	}
}

// peakRSS is VmHWM of /proc/self/status (getrusage's maxrss carries the parent's over exec).
func peakRSS() int64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n * 1024
		}
	}
	return 0
}

//go:embed llamacpp-stream.mjs
var llamacppStream []byte

// llamacppChild runs one mode in llama.cpp (node-llama-cpp): the checkpoint converted to
// a Q4_1 GGUF of the same weights (gguf.go), from a cold page cache, in the cgroup for
// llamacpp-capped.
func llamacppChild(ctx context.Context, c streamCfg, dir, mode string, cg *memcgroup.Cgroup) (streamResult, error) {
	r := streamResult{Mode: mode}
	if c.Tokenizer == "" {
		r.Err = "no tokenizer for the GGUF: pass --tokenizer DIR (a Qwen checkpoint) or set MLXG_SHARED"
		return r, nil
	}
	gguf := filepath.Join(filepath.Dir(dir), "q4_1.gguf")
	if _, err := os.Stat(gguf); err != nil {
		fmt.Printf("writing %s...\n", gguf)
	}
	if err := writeGGUF(dir, c.Tokenizer, gguf); err != nil {
		return r, err
	}
	server, err := ensureLlamaCpp(ctx, c.Cache, func(f string, a ...any) { fmt.Printf(f+"\n", a...) })
	if err != nil {
		r.Err = err.Error()
		return r, nil
	}
	script := filepath.Join(filepath.Dir(server), "llamacpp-stream.mjs")
	if err := os.WriteFile(script, llamacppStream, 0o644); err != nil {
		return r, err
	}
	dropCache(dir)
	dropCache(filepath.Dir(gguf))
	arg, _ := json.Marshal(map[string]any{"prompt": promptTokens(c.Prompt), "decode": c.Decode, "threads": c.Threads})
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	var cmd *exec.Cmd
	if mode == "llamacpp-capped" {
		cmd = exec.CommandContext(ctx, "sh", "-c", `echo $$ > "$1" && shift && exec node "$@"`, "sh", cg.Procs, script, gguf, string(arg))
	} else {
		cmd = exec.CommandContext(ctx, "node", script, gguf, string(arg))
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	var res struct {
		Load       float64 `json:"load_s"`
		TTFT       float64 `json:"ttft_s"`
		DecodeTPS  float64 `json:"decode_tps"`
		StepMedian float64 `json:"step_median_s"`
		Tokens     []int32 `json:"tokens"`
		Error      string  `json:"error"`
	}
	if jerr := json.Unmarshal(lastLine(out), &res); jerr != nil {
		r.Err = fmt.Sprintf("llama.cpp: %v %v (killed by the cap?)", err, jerr)
		if ctx.Err() != nil {
			r.Err = fmt.Sprintf("llama.cpp stopped after %s (--timeout)", c.Timeout)
		}
		return r, nil
	}
	r.Load, r.TTFT, r.DecodeTPS, r.StepMedian, r.Tokens, r.Err = res.Load, res.TTFT, res.DecodeTPS, res.StepMedian, res.Tokens, res.Error
	return r, nil
}
