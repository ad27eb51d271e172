package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mlxg/mlxg/registry"
)

// The --streams scenario (continuous batching): N concurrent streams, each a distinct
// question after one shared system prompt, on the 4-bit checkpoint, against Ollama with
// OLLAMA_NUM_PARALLEL=N in the same run. Per stream count and engine: a warm-up round of
// N concurrent requests (the system prompt then sits in mlxg's prefix cache and in each of
// Ollama's N slots), then --repeats measured rounds of N fresh questions sent at once.
// Aggregate decode rate of a round: the tokens streamed while every stream was decoding
// (from the last stream's first token to the first stream's end; each streamed line
// timed, and weighted by its stream's eval_count per line) over that time. TTFT: each
// stream's request sent to its first streamed token, p50 and p99 over every stream of
// every round.

// StreamConfig is the scenario's settings.
type StreamConfig struct {
	Cache       string  `json:"cache"`
	Shape       string  `json:"shape"`
	Seed        uint64  `json:"seed"`
	Bits        int     `json:"bits"`
	Streams     []int   `json:"streams"`
	System      int     `json:"system_tokens"`
	Question    int     `json:"question_tokens"`
	Decode      int     `json:"decode"`
	Repeats     int     `json:"repeats"`
	Threads     int     `json:"threads"`
	Peer        string  `json:"peer"`
	Int8        bool    `json:"int8"` // mlxg-int8 too: mlxg with MLXG_CPU_INT8=1 (mlxg itself has 0)
	NumCtx      int     `json:"num_ctx"`
	Temperature float64 `json:"temperature"`
	SampleSeed  int     `json:"sample_seed"`
}

// streamConfig is the scenario's settings from the bench's flags: the first of --bits
// (default 4), --repeats (default 2), --decode (default 64), --threads, --peer, the sampling
// settings; 2048 system and 256 question tokens (--prompts S,Q sets them).
func streamConfig(cfg Config, streams string, set map[string]bool) (StreamConfig, error) {
	c := StreamConfig{Cache: cfg.Cache, Shape: cfg.Shape, Seed: cfg.Seed, Bits: 4, Repeats: 2, Decode: 64, System: 2048, Question: 256,
		Threads: cfg.Threads, Peer: cfg.Peer, Temperature: cfg.Temperature, SampleSeed: cfg.SampleSeed}
	var err error
	if c.Streams, err = parseInts(streams, "streams"); err != nil {
		return c, err
	}
	if set["bits"] {
		c.Bits = cfg.Bits[0]
	}
	if set["repeats"] {
		c.Repeats = cfg.Repeats
	}
	if set["decode"] {
		c.Decode = cfg.Decode
	}
	if set["prompts"] {
		if len(cfg.Prompts) != 2 {
			return c, fmt.Errorf("--prompts with --streams is SYSTEM,QUESTION (two token counts)")
		}
		c.System, c.Question = cfg.Prompts[0], cfg.Prompts[1]
	}
	c.NumCtx = (c.System+c.Question+c.Decode+255)/256*256 + 256
	return c, nil
}

// StreamSample is one stream of one round.
type StreamSample struct {
	Engine       string    `json:"engine"`
	Streams      int       `json:"streams"`
	Rep          int       `json:"rep"` // 0 is the warm-up
	Stream       int       `json:"stream"`
	PromptTokens int       `json:"prompt_tokens"`
	EvalTokens   int       `json:"eval_tokens"`
	TTFT         Num       `json:"ttft_s"`
	First        float64   `json:"first_token_s"` // since the round started
	Done         float64   `json:"done_s"`
	Lines        []float64 `json:"line_s"` // when each streamed line arrived, since the round started
}

// StreamResults is the JSON file of a --streams run.
type StreamResults struct {
	Config  StreamConfig   `json:"config"`
	Machine Machine        `json:"machine"`
	Samples []StreamSample `json:"samples"`
	Table   string         `json:"table"`
}

// runStreams runs the scenario; out is the JSON file to write.
func runStreams(ctx context.Context, c StreamConfig, repo, ollamaBin, out string) (err error) {
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs load %4.1f] %s\n", time.Since(start).Seconds(), loadAverage(), fmt.Sprintf(format, args...))
	}
	runDir := filepath.Join(c.Cache, "runs", "streams-"+start.UTC().Format("20060102-150405"))
	if err := os.MkdirAll(runDir, 0o755); err != nil {
		return err
	}
	res := StreamResults{Config: c, Machine: machineInfo(repo)}
	res.Machine.StartedAt = start.UTC()
	defer func() {
		res.Machine.LoadEnd = loadAverage()
		res.Machine.DurationS = time.Since(start).Seconds()
		if len(res.Samples) > 0 {
			res.Table = streamTable(c, res.Samples)
			fmt.Print(res.Table)
		}
		b, jerr := json.MarshalIndent(res, "", "  ")
		if jerr == nil {
			if jerr = os.MkdirAll(filepath.Dir(out), 0o755); jerr == nil {
				jerr = os.WriteFile(out, b, 0o644)
			}
		}
		if jerr != nil && err == nil {
			err = jerr
		}
		logf("results in %s", out)
	}()
	logf("machine: %s, %d cores, load average %.2f; logs in %s", res.Machine.CPU, res.Machine.Cores, res.Machine.LoadStart, runDir)
	tokDir, err := findTokenizer(ctx, c.Cache, repo, logf)
	if err != nil {
		return err
	}
	prompter, err := NewPrompter(tokDir)
	if err != nil {
		return err
	}
	src, err := ensureCheckpoint(c.Cache, c.Shape, c.Seed, tokDir, logf)
	if err != nil {
		return err
	}
	// A binary of its own (another run's build in the shared cache may be of another tree),
	// or MLXG_BENCH_MLXG_BIN's on a machine without Go.
	mlxgBin := os.Getenv("MLXG_BENCH_MLXG_BIN")
	if mlxgBin == "" {
		mlxgBin = filepath.Join(runDir, "mlxg")
		logf("building mlxg from %s", repo)
		cmd := exec.CommandContext(ctx, "go", "build", "-o", mlxgBin, "./cmd/mlxg")
		cmd.Dir, cmd.Env = repo, append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("building mlxg from %s: %w\n%s", repo, err, tail(string(b), 3000))
		}
	}
	// MLXG_BENCH_ENGINES=mlxg or =ollama runs one side only (a run split in two).
	engines := os.Getenv("MLXG_BENCH_ENGINES")
	runs := func(e string) bool { return engines == "" || strings.Contains(engines, e) }
	save := func() {
		if b, err := json.MarshalIndent(res, "", "  "); err == nil && os.MkdirAll(filepath.Dir(out), 0o755) == nil {
			os.WriteFile(out, b, 0o644)
		}
	}
	store := &registry.Store{HubCache: filepath.Join(c.Cache, "hf"), Home: filepath.Join(c.Cache, "mlxg-home")}
	name := fmt.Sprintf("bench-%s-s%d-q%d", c.Shape, c.Seed, c.Bits)
	if _, err := ensureMLXModel(ctx, store, name, src, c.Bits, logf); err != nil && runs("mlxg") {
		return err
	}
	if c.Peer == "ollama" {
		if ollamaBin, err = findOllama(ctx, ollamaBin, c.Cache, logf); err != nil {
			return err
		}
		if v, err := exec.CommandContext(ctx, ollamaBin, "--version").CombinedOutput(); err == nil {
			if f := strings.Fields(string(v)); len(f) > 0 {
				res.Machine.Ollama = "ollama " + f[len(f)-1]
			}
		}
	}
	system, err := prompter.Prompt(c.System, 7)
	if err != nil {
		return err
	}
	seed := uint64(1000)
	question := func() (string, error) {
		seed++
		return prompter.Prompt(c.Question, seed)
	}
	options := map[string]any{"num_predict": c.Decode, "temperature": c.Temperature, "seed": c.SampleSeed,
		"num_ctx": c.NumCtx, "num_thread": c.Threads}
	maxStreams := slices.Max(c.Streams)

	// round sends n fresh questions at once and records each stream.
	round := func(srv *Server, engine, model string, n, rep int) error {
		prompts := make([]string, n)
		for i := range prompts {
			q, err := question()
			if err != nil {
				return err
			}
			prompts[i] = system + q
		}
		samples := make([]StreamSample, n)
		errs := make([]error, n)
		t0 := time.Now()
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				s, err := streamOne(ctx, srv, model, prompts[i], options, t0)
				if err != nil {
					errs[i] = err
					return
				}
				s.Engine, s.Streams, s.Rep, s.Stream = engine, n, rep, i
				samples[i] = s
			})
		}
		wg.Wait()
		if err := errorsJoin(errs); err != nil {
			return err
		}
		res.Samples = append(res.Samples, samples...)
		save() // a run cut short keeps what it measured
		agg := roundDecode(samples)
		ttfts := make([]float64, n)
		for i, s := range samples {
			ttfts[i] = float64(s.TTFT)
		}
		logf("%s, %d streams, round %d: aggregate decode %.1f tok/s, TTFT %s s, %.1f s in all", engine, n, rep, agg,
			FormatSummary(Summarize(ttfts)), time.Since(t0).Seconds())
		return nil
	}
	measure := func(srv *Server, engine, model string, n int) error {
		for rep := 0; rep <= c.Repeats; rep++ {
			if err := round(srv, engine, model, n, rep); err != nil {
				return err
			}
		}
		return nil
	}

	// mlxg: one server batching up to the most streams measured, on the float path
	// (MLXG_CPU_INT8=0); with --int8, a second one with 8-bit inputs in every decode product
	// (MLXG_CPU_INT8=1), its prefix cache a directory of its own. The default, 8-bit inputs
	// in batched steps only, runs one stream as the first and several as the second.
	variants := []string{"mlxg"}
	if c.Int8 {
		variants = append(variants, "mlxg-int8")
	}
	for _, engine := range variants {
		if !runs(engine) {
			continue
		}
		ms := &Server{Name: engine, Bin: mlxgBin,
			Args: []string{"serve", "--threads", fmt.Sprint(c.Threads), "--block-ssd-cache-dir", filepath.Join(runDir, "prefix-"+engine)},
			Env: []string{"HF_HUB_CACHE=" + store.HubCache, "MLXG_HOME=" + store.Home, "MLXG_KEEP_ALIVE=-1", "MLXG_BACKEND=cpu",
				fmt.Sprintf("MLXG_CONTEXT_LENGTH=%d", c.NumCtx), fmt.Sprintf("MLXG_NUM_PARALLEL=%d", maxStreams),
				fmt.Sprintf("MLXG_CPU_INT8=%v", engine == "mlxg-int8")},
			LogPath: filepath.Join(runDir, engine+".log")}
		if err := ms.Start(ctx, hostEnv["mlxg"]); err != nil {
			return err
		}
		for _, n := range c.Streams {
			if err := measure(ms, engine, name, n); err != nil {
				ms.Stop()
				return err
			}
		}
		ms.Stop()
	}
	if c.Peer != "ollama" || !runs("ollama") {
		return nil
	}
	olModel := fmt.Sprintf("bench-%s-s%d-%s", c.Shape, c.Seed, strings.ToLower(ollamaQuant[c.Bits]))
	for i, n := range c.Streams {
		ol := &Server{Name: "ollama", Bin: ollamaBin, Args: []string{"serve"},
			Env: []string{"OLLAMA_MODELS=" + filepath.Join(c.Cache, "ollama-models"), "OLLAMA_KEEP_ALIVE=-1",
				fmt.Sprintf("OLLAMA_NUM_PARALLEL=%d", n), "OLLAMA_MAX_LOADED_MODELS=1", fmt.Sprintf("OLLAMA_CONTEXT_LENGTH=%d", c.NumCtx)},
			LogPath: filepath.Join(runDir, fmt.Sprintf("ollama-%d.log", n))}
		if err := ol.Start(ctx, hostEnv["ollama"]); err != nil {
			return err
		}
		if i == 0 {
			if _, err := ensureOllamaModel(ctx, ol, ollamaBin, olModel, src, ollamaQuant[c.Bits], logf); err != nil {
				ol.Stop()
				return err
			}
		}
		err := measure(ol, "ollama", olModel, n)
		ol.Stop()
		if err != nil {
			return err
		}
	}
	return nil
}

func errorsJoin(errs []error) error {
	var msgs []string
	for _, e := range errs {
		if e != nil {
			msgs = append(msgs, e.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(msgs, "; "))
}

// roundDecode is a round's aggregate decode rate while every stream decodes: the tokens
// streamed from the last stream's first token to the first stream's end, over that time
// (each line counts its stream's eval_count / lines tokens). When no such window exists (a
// stream ended before another began), every token over the first token to the last end.
func roundDecode(samples []StreamSample) float64 {
	if len(samples) == 0 {
		return nan
	}
	w0, w1 := samples[0].First, samples[0].Done
	first, done, all := w0, w1, 0
	for _, s := range samples {
		w0, w1 = max(w0, s.First), min(w1, s.Done)
		first, done = min(first, s.First), max(done, s.Done)
		all += s.EvalTokens
	}
	if w1-w0 < 0.05*(done-first) || w1 <= w0 {
		if done <= first {
			return nan
		}
		return float64(all) / (done - first)
	}
	tokens := 0.0
	for _, s := range samples {
		if len(s.Lines) == 0 {
			continue
		}
		per := float64(s.EvalTokens) / float64(len(s.Lines))
		for _, t := range s.Lines {
			if t > w0 && t <= w1 {
				tokens += per
			}
		}
	}
	return tokens / (w1 - w0)
}

// streamOne streams one raw completion from srv, timing every line since t0.
func streamOne(ctx context.Context, srv *Server, model, prompt string, options map[string]any, t0 time.Time) (StreamSample, error) {
	var out StreamSample
	body, err := json.Marshal(genRequest{Model: model, Prompt: prompt, Raw: true, Stream: true, KeepAlive: -1, Options: options})
	if err != nil {
		return out, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/api/generate", bytes.NewReader(body))
	if err != nil {
		return out, err
	}
	sent := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return out, fmt.Errorf("%s: %w", srv.Name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return out, fmt.Errorf("%s: /api/generate: %s: %s", srv.Name, resp.Status, strings.TrimSpace(string(msg)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		now := time.Now()
		var c genChunk
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return out, fmt.Errorf("%s: bad NDJSON line %q: %w", srv.Name, sc.Text(), err)
		}
		if c.Error != "" {
			return out, fmt.Errorf("%s: %s", srv.Name, c.Error)
		}
		if len(out.Lines) == 0 {
			out.TTFT, out.First = Num(now.Sub(sent).Seconds()), now.Sub(t0).Seconds()
		}
		if c.Done {
			out.Done = now.Sub(t0).Seconds()
			out.PromptTokens, out.EvalTokens = c.PromptEvalCount, c.EvalCount
			return out, nil
		}
		out.Lines = append(out.Lines, now.Sub(t0).Seconds())
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("%s: reading the answer: %w", srv.Name, err)
	}
	return out, fmt.Errorf("%s: the answer ended without a final (done) line", srv.Name)
}

// percentile is the p-th percentile (0..100) of xs, nearest rank.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return nan
	}
	s := slices.Sorted(slices.Values(xs))
	i := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// streamTable prints, per stream count, each engine's aggregate decode rate (median over the
// rounds, min–max), its ratio to the engine's own one-stream rate, and TTFT p50/p99, with
// mlxg's ratio to Ollama; with --int8, mlxg-int8's too, and its ratio to plain mlxg's one stream.
func streamTable(c StreamConfig, samples []StreamSample) string {
	type cell struct {
		agg        Summary
		p50, p99   float64
		haveRounds bool
	}
	stats := map[string]map[int]cell{}
	for _, e := range []string{"mlxg", "mlxg-int8", "ollama"} {
		stats[e] = map[int]cell{}
		for _, n := range c.Streams {
			var aggs, ttfts []float64
			for rep := 1; rep <= c.Repeats; rep++ {
				var round []StreamSample
				for _, s := range samples {
					if s.Engine == e && s.Streams == n && s.Rep == rep {
						round = append(round, s)
						ttfts = append(ttfts, float64(s.TTFT))
					}
				}
				if len(round) > 0 {
					aggs = append(aggs, roundDecode(round))
				}
			}
			if len(aggs) > 0 {
				stats[e][n] = cell{agg: Summarize(aggs), p50: percentile(ttfts, 50), p99: percentile(ttfts, 99), haveRounds: true}
			}
		}
	}
	base := func(e string) float64 { return stats[e][c.Streams[0]].agg.Median }
	header := []string{"streams", "mlxg decode tok/s (agg)", "x 1 stream", "mlxg TTFT p50 / p99 s"}
	peer := false
	for _, n := range c.Streams {
		peer = peer || stats["ollama"][n].haveRounds
	}
	int8 := false
	for _, n := range c.Streams {
		int8 = int8 || stats["mlxg-int8"][n].haveRounds
	}
	if int8 {
		header = append(header, "mlxg-int8 decode tok/s (agg)", "x 1 stream", "x mlxg 1 stream", "mlxg-int8 TTFT p50 / p99 s")
	}
	if peer {
		header = append(header, "ollama decode tok/s (agg)", "x 1 stream", "ollama TTFT p50 / p99 s", "mlxg/ollama decode", "mlxg/ollama TTFT p50")
		if int8 {
			header = append(header, "mlxg-int8/ollama decode")
		}
	}
	var rows [][]string
	for _, n := range c.Streams {
		m, m8 := stats["mlxg"][n], stats["mlxg-int8"][n]
		row := []string{fmt.Sprint(n), FormatSummary(m.agg), fmt.Sprintf("%.2fx", m.agg.Median/base("mlxg")),
			fmt.Sprintf("%s / %s", formatNum(m.p50), formatNum(m.p99))}
		if int8 {
			row = append(row, FormatSummary(m8.agg), fmt.Sprintf("%.2fx", m8.agg.Median/base("mlxg-int8")),
				fmt.Sprintf("%.2fx", m8.agg.Median/base("mlxg")), fmt.Sprintf("%s / %s", formatNum(m8.p50), formatNum(m8.p99)))
		}
		if peer {
			o := stats["ollama"][n]
			row = append(row, FormatSummary(o.agg), fmt.Sprintf("%.2fx", o.agg.Median/base("ollama")),
				fmt.Sprintf("%s / %s", formatNum(o.p50), formatNum(o.p99)),
				fmt.Sprintf("%.2fx", m.agg.Median/o.agg.Median), fmt.Sprintf("%.2fx", o.p50/m.p50))
			if int8 {
				row = append(row, fmt.Sprintf("%.2fx", m8.agg.Median/o.agg.Median))
			}
		}
		rows = append(rows, row)
	}
	return fmt.Sprintf("\n%s %d-bit, %d threads, %d-token shared system prompt + %d-token question per stream, %d tokens decoded per stream, %d rounds per cell\n%s",
		c.Shape, c.Bits, c.Threads, c.System, c.Question, c.Decode, c.Repeats, Table(header, rows))
}
