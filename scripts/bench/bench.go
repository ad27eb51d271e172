package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/mlxg/mlxg/registry"
)

// Engine is one side of the comparison for one bit width.
type Engine struct {
	Name          string  `json:"engine"` // mlxg, ollama or llamacpp
	Label         string  `json:"label"`  // e.g. "ollama q4_K_M"
	Model         string  `json:"model"`
	BytesPerToken int64   `json:"weight_bytes_per_token"`
	CeilingTPS    float64 `json:"ceiling_tps"`
	PeakRSS       int64   `json:"peak_rss_bytes"`
	KVBytes       int64   `json:"kv_bytes_per_token"`
	KVLayout      string  `json:"kv_layout"`
	Bits          int     `json:"bits"`
	Srv           *Server `json:"-"`
}

// Machine describes where the run happened.
type Machine struct {
	CPU        string    `json:"cpu"`
	Cores      int       `json:"cores"`
	OS         string    `json:"os"`
	GoVersion  string    `json:"go"`
	Commit     string    `json:"mlxg_commit"`
	Ollama     string    `json:"ollama"`
	LlamaCpp   string    `json:"llamacpp,omitempty"`
	LoadStart  float64   `json:"load1_start"`
	LoadEnd    float64   `json:"load1_end"`
	Bandwidth  []float64 `json:"bandwidth_bytes_per_s"` // measured at the start and at the end
	StartedAt  time.Time `json:"started_at"`
	DurationS  float64   `json:"duration_s"`
	MemTotalGB float64   `json:"mem_total_gb"`
}

// Results is the JSON file.
type Results struct {
	Config  Config    `json:"config"`
	Machine Machine   `json:"machine"`
	Engines []*Engine `json:"engines"`
	Samples []Sample  `json:"samples"`
	Table   string    `json:"table"`
}

// Bench runs one invocation.
type Bench struct {
	Cfg       Config
	Repo      string
	OllamaBin string
	OutPath   string

	start    time.Time
	runDir   string
	prompter *Prompter
	seed     uint64 // next prompt seed
	res      Results
}

func (b *Bench) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs load %4.1f] %s\n", time.Since(b.start).Seconds(), loadAverage(), fmt.Sprintf(format, args...))
}

// Run does everything the package doc says and writes the results even when a later step fails.
func (b *Bench) Run(ctx context.Context) (err error) {
	c := b.Cfg
	b.runDir = filepath.Join(c.Cache, "runs", b.start.UTC().Format("20060102-150405"))
	if err := os.MkdirAll(b.runDir, 0o755); err != nil {
		return err
	}
	b.res = Results{Config: c, Machine: machineInfo(b.Repo)}
	b.res.Machine.StartedAt = b.start.UTC()
	defer func() {
		if err != nil && len(b.res.Samples) > 0 { // what was measured before the failure
			b.res.Table = b.report()
			fmt.Print(b.res.Table)
		}
		b.res.Machine.LoadEnd = loadAverage()
		b.res.Machine.DurationS = time.Since(b.start).Seconds()
		if werr := b.writeJSON(); werr != nil && err == nil {
			err = werr
		}
	}()
	b.logf("machine: %s, %d cores, load average %.2f; logs in %s", b.res.Machine.CPU, b.res.Machine.Cores, b.res.Machine.LoadStart, b.runDir)
	b.measureBandwidth()

	tokDir, err := findTokenizer(ctx, c.Cache, b.Repo, b.logf)
	if err != nil {
		return err
	}
	if b.prompter, err = NewPrompter(tokDir); err != nil {
		return err
	}
	src, err := ensureCheckpoint(c.Cache, c.Shape, c.Seed, tokDir, b.logf)
	if err != nil {
		return err
	}
	b.logf("building mlxg from %s", b.Repo)
	mlxgBin, err := buildMLXG(ctx, b.Repo, c.Cache)
	if err != nil {
		return err
	}
	var ollamaBin string
	if c.Peer == "ollama" {
		if ollamaBin, err = findOllama(ctx, b.OllamaBin, c.Cache, b.logf); err != nil {
			return err
		}
		// "Warning: could not connect to a running Ollama instance\nWarning: client version is 0.17.4"
		if v, err := exec.CommandContext(ctx, ollamaBin, "--version").CombinedOutput(); err == nil {
			if f := strings.Fields(string(v)); len(f) > 0 {
				b.res.Machine.Ollama = "ollama " + f[len(f)-1]
			}
		}
	}
	var llamaScript string
	if c.LlamaCpp {
		if llamaScript, err = ensureLlamaCpp(ctx, c.Cache, b.logf); err != nil {
			return err
		}
		b.res.Machine.LlamaCpp = "node-llama-cpp " + NodeLlamaCppVersion
	}
	store := &registry.Store{HubCache: filepath.Join(c.Cache, "hf"), Home: filepath.Join(c.Cache, "mlxg-home")}

	for i, bits := range c.Bits {
		if err := b.runBits(ctx, bits, i == 0 && c.Prefix, src, mlxgBin, ollamaBin, llamaScript, store); err != nil {
			return err
		}
	}
	b.measureBandwidth()
	b.res.Machine.LoadEnd = loadAverage()
	for _, e := range b.res.Engines { // the ceiling from the best of every bandwidth reading
		e.CeilingTPS = Ceiling(b.bandwidth(), e.BytesPerToken)
	}
	b.res.Table = b.report()
	fmt.Print(b.res.Table)
	return nil
}

// measureBandwidth records one bandwidth reading with the engines' thread count.
func (b *Bench) measureBandwidth() {
	bw := MeasureBandwidth(b.Cfg.BWBytes, b.Cfg.Threads, 5)
	b.res.Machine.Bandwidth = append(b.res.Machine.Bandwidth, bw)
	b.logf("memory read bandwidth, %d threads over %d MiB: %.2f GB/s", b.Cfg.Threads, b.Cfg.BWBytes>>20, bw/1e9)
}

// bandwidth is the best reading: noise on a shared machine only ever lowers it.
func (b *Bench) bandwidth() float64 {
	best := 0.0
	for _, v := range b.res.Machine.Bandwidth {
		best = max(best, v)
	}
	return best
}

// runBits prepares both engines for one bit width and measures every scenario.
func (b *Bench) runBits(ctx context.Context, bits int, prefix bool, src, mlxgBin, ollamaBin, llamaScript string, store *registry.Store) error {
	c := b.Cfg
	name := fmt.Sprintf("bench-%s-s%d-q%d", c.Shape, c.Seed, bits)
	m, err := ensureMLXModel(ctx, store, name, src, bits, b.logf)
	if err != nil {
		return err
	}
	ts, tied, err := MLXTensors(m.Dir)
	if err != nil {
		return err
	}
	mlx := &Engine{Name: "mlxg", Label: fmt.Sprintf("mlxg %d-bit", bits), Model: name, Bits: bits, BytesPerToken: BytesPerToken(ts, "model.embed_tokens.", tied)}
	prefixDir := filepath.Join(b.runDir, fmt.Sprintf("prefix-q%d", bits))
	defer os.RemoveAll(prefixDir) // after the servers stop (deferred below): KV blocks of every prompt, hundreds of MB
	mlx.Srv = &Server{Name: "mlxg", Bin: mlxgBin,
		Args: []string{"serve", "--threads", fmt.Sprint(c.Threads),
			"--block-ssd-cache-dir", prefixDir, "--prompt-cache-hot", "0"},
		Env: []string{"HF_HUB_CACHE=" + store.HubCache, "MLXG_HOME=" + store.Home, "MLXG_KEEP_ALIVE=-1",
			fmt.Sprintf("MLXG_CONTEXT_LENGTH=%d", c.NumCtx), "MLXG_BACKEND=cpu"},
		LogPath: filepath.Join(b.runDir, fmt.Sprintf("mlxg-q%d.log", bits))}
	kv, layout, f16, err := kvPerToken(m.Dir, c.NumCtx)
	if err != nil {
		return err
	}
	mlx.KVBytes, mlx.KVLayout = kv, layout
	engines := []*Engine{mlx}
	if c.Peer == "ollama" {
		q := ollamaQuant[bits]
		ol := &Engine{Name: "ollama", Label: "ollama " + q, Model: fmt.Sprintf("bench-%s-s%d-%s", c.Shape, c.Seed, strings.ToLower(q)), Bits: bits,
			KVBytes: f16, KVLayout: "f16"}
		ol.Srv = &Server{Name: "ollama", Bin: ollamaBin, Args: []string{"serve"},
			Env: []string{"OLLAMA_MODELS=" + filepath.Join(c.Cache, "ollama-models"), "OLLAMA_KEEP_ALIVE=-1",
				"OLLAMA_NUM_PARALLEL=1", "OLLAMA_MAX_LOADED_MODELS=1", fmt.Sprintf("OLLAMA_CONTEXT_LENGTH=%d", c.NumCtx)},
			LogPath: filepath.Join(b.runDir, fmt.Sprintf("ollama-q%d.log", bits))}
		engines = append(engines, ol)
	}
	for _, e := range engines {
		if err := e.Srv.Start(ctx, hostEnv[e.Name]); err != nil {
			return err
		}
		defer func() { e.PeakRSS = max(e.PeakRSS, e.Srv.Stop()) }()
		b.res.Engines = append(b.res.Engines, e)
	}
	if c.Peer == "ollama" {
		ol := engines[1]
		created, err := ensureOllamaModel(ctx, ol.Srv, ollamaBin, ol.Model, src, ollamaQuant[bits], b.logf)
		if err != nil {
			return err
		}
		if created { // the conversion's memory is not the engine's: measure from a fresh server
			ol.Srv.Stop()
			if err := ol.Srv.Start(ctx, "OLLAMA_HOST"); err != nil {
				return err
			}
		}
		ts, tied, err := ollamaTensors(ctx, ol.Srv, ol.Model)
		if err != nil {
			return err
		}
		ol.BytesPerToken = BytesPerToken(ts, "token_embd.", tied)
		if c.LlamaCpp { // the same GGUF file, served by llama.cpp itself
			gguf, err := ollamaGGUF(filepath.Join(c.Cache, "ollama-models"), ol.Model)
			if err != nil {
				return err
			}
			lc := &Engine{Name: "llamacpp", Label: "llama.cpp " + ollamaQuant[bits], Model: gguf, Bits: bits,
				BytesPerToken: ol.BytesPerToken, KVBytes: f16, KVLayout: "f16"}
			lc.Srv = &Server{Name: "llamacpp", Bin: "node", Args: []string{llamaScript},
				Env:     []string{fmt.Sprintf("LLAMACPP_THREADS=%d", c.Threads), fmt.Sprintf("LLAMACPP_CONTEXT=%d", c.NumCtx)},
				LogPath: filepath.Join(b.runDir, fmt.Sprintf("llamacpp-q%d.log", bits))}
			if err := lc.Srv.Start(ctx, hostEnv[lc.Name]); err != nil {
				return err
			}
			defer func() { lc.PeakRSS = max(lc.PeakRSS, lc.Srv.Stop()) }()
			b.res.Engines = append(b.res.Engines, lc)
			engines = append(engines, lc)
		}
	}
	for _, e := range engines {
		e.CeilingTPS = Ceiling(b.bandwidth(), e.BytesPerToken)
		b.logf("%s: %s, %.1f MiB of weights read per token, ceiling %.1f tok/s, KV cache %s: %d bytes per token",
			e.Label, e.Model, float64(e.BytesPerToken)/(1<<20), e.CeilingTPS, e.KVLayout, e.KVBytes)
	}

	// Warm-up (rep 0, left out of the table): loads the models and faults their weights in.
	p0 := c.Prompts[0]
	if err := b.measure(ctx, engines, fmt.Sprintf("prompt-%d", p0), 0, p0, c.Decode); err != nil {
		return err
	}
	for rep := 1; rep <= c.Repeats; rep++ {
		for i, p := range c.Prompts {
			if i > 0 && (bits == 8 && c.MaxPrompt8 > 0 && p > c.MaxPrompt8 || p > longPrompt && rep > c.LongRepeats) {
				continue
			}
			predict := c.LongDecode
			if i == 0 {
				predict = c.Decode
			}
			if err := b.measure(ctx, engines, fmt.Sprintf("prompt-%d", p), rep, p, predict); err != nil {
				return err
			}
		}
	}
	if prefix {
		return b.prefixScenarios(ctx, engines)
	}
	return nil
}

// hostEnv names each engine's variable for its listen address.
var hostEnv = map[string]string{"mlxg": "MLXG_HOST", "ollama": "OLLAMA_HOST", "llamacpp": "LLAMACPP_HOST"}

// longPrompt is the longest prompt measured every repeat; longer ones get --long-repeats, since
// one 4K prefill of each engine takes minutes on 2 cores.
const longPrompt = 1024

// options are the request options of every engine: Ollama's names.
func (b *Bench) options(predict int) map[string]any {
	return map[string]any{"num_predict": predict, "temperature": b.Cfg.Temperature, "seed": b.Cfg.SampleSeed,
		"num_ctx": b.Cfg.NumCtx, "num_thread": b.Cfg.Threads}
}

// newPrompt is a prompt of n tokens no earlier request began with.
func (b *Bench) newPrompt(n int) (string, error) {
	b.seed++
	return b.prompter.Prompt(n, b.seed)
}

// measure sends one fresh prompt of n tokens to every engine in turn.
func (b *Bench) measure(ctx context.Context, engines []*Engine, scenario string, rep, n, predict int) error {
	prompt, err := b.newPrompt(n)
	if err != nil {
		return err
	}
	return b.send(ctx, engines, scenario, rep, prompt, predict)
}

func (b *Bench) send(ctx context.Context, engines []*Engine, scenario string, rep int, prompt string, predict int) error {
	for _, e := range engines {
		s, err := e.Srv.Generate(ctx, e.Model, prompt, b.options(predict))
		if err != nil {
			return fmt.Errorf("%s, rep %d: %w (server log: %s)", scenario, rep, err, e.Srv.LogPath)
		}
		s.Engine, s.Quant, s.Scenario, s.Rep = e.Name, fmt.Sprintf("q%d", e.Bits), scenario, rep
		b.res.Samples = append(b.res.Samples, s)
		b.logf("%-15s %-14s rep %d: %5d prompt tok at %7.1f tok/s, TTFT %6.2f s, %3d tok at %5.1f tok/s",
			e.Label, scenario, rep, s.PromptTokens, s.PrefillTPS, s.TTFT, s.EvalTokens, s.DecodeTPS)
	}
	return nil
}

// prefixScenarios measures time to first token for a prompt seen for the first time (cold),
// the same prompt again (mlxg: RAM prefix tier; Ollama: its slot's cache), and again after both
// servers restart (mlxg: SSD tier, with --prompt-cache-hot 0 so nothing is preloaded; Ollama:
// cold again).
func (b *Bench) prefixScenarios(ctx context.Context, engines []*Engine) error {
	c := b.Cfg
	prompts := make([]string, c.Repeats)
	for r := range prompts {
		p, err := b.newPrompt(c.PrefixTokens)
		if err != nil {
			return err
		}
		prompts[r] = p
		if err := b.send(ctx, engines, "prefix-cold", r+1, p, 1); err != nil {
			return err
		}
		if err := b.send(ctx, engines, "prefix-hit", r+1, p, 1); err != nil {
			return err
		}
	}
	b.logf("restarting the servers")
	for _, e := range engines {
		e.PeakRSS = max(e.PeakRSS, e.Srv.Stop())
		if err := e.Srv.Start(ctx, hostEnv[e.Name]); err != nil {
			return err
		}
		// Load the model first, so that the measure below is the prompt's, not the load's.
		if _, err := e.Srv.Generate(ctx, e.Model, "", b.options(1)); err != nil {
			return fmt.Errorf("loading %s after the restart: %w", e.Model, err)
		}
	}
	for r, p := range prompts {
		if err := b.send(ctx, engines, "prefix-restart", r+1, p, 1); err != nil {
			return err
		}
	}
	return nil
}

func (b *Bench) writeJSON() error {
	if err := os.MkdirAll(filepath.Dir(b.OutPath), 0o755); err != nil {
		return err
	}
	raw, err := json.MarshalIndent(b.res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(b.OutPath, raw, 0o644); err != nil {
		return err
	}
	b.logf("raw results: %s", b.OutPath)
	return nil
}

// machineInfo reads the CPU model, memory and the source commit.
func machineInfo(repo string) Machine {
	m := Machine{Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, GoVersion: runtime.Version(), LoadStart: loadAverage()}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(raw)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb float64
		if _, err := fmt.Sscanf(string(raw), "MemTotal: %f kB", &kb); err == nil {
			m.MemTotalGB = kb / (1 << 20)
		}
	}
	if out, err := exec.Command("git", "-C", repo, "rev-parse", "--short", "HEAD").Output(); err == nil {
		m.Commit = strings.TrimSpace(string(out))
		if st, err := exec.Command("git", "-C", repo, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
			m.Commit += "+dirty"
		}
	}
	return m
}
