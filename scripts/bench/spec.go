package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	_ "github.com/mlxg/mlxg/metal" // registers "mlx"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/compute"
	_ "github.com/mlxg/mlxg/runner/cpu" // registers "cpu"
)

// The --spec scenario (speculative decoding by prompt lookup), in this process on a small
// trained model (qwen3-tiny by default): per backend (cpu, and mlx when MLXG_MLXC_PATH
// points at libmlxc) and workload, decode tok/s with num_draft 0 (plain) and num_draft N
// (prompt lookup), alternating plain, lookup, plain, lookup... after a warm-up of each,
// with the drafted and kept tokens. Workloads:
//   - edit: a raw prompt holding the text the model then writes (specPrompts), as an agent
//     rewriting a file it was shown does; greedy, and the output must be token-identical;
//   - free: a short prompt and sampling (temperature 0.8, top_k 40, top_p 0.9, repeat
//     penalty 1.1, a fixed seed per repeat), which prompt lookup rarely matches: it must
//     not cost.

// SpecConfig is the scenario's settings.
type SpecConfig struct {
	Model    string   `json:"model"`
	Bits     []int    `json:"bits"` // 0: the checkpoint as it is; 4, 8: converted to MLX 4- or 8-bit (group 64)
	Cache    string   `json:"cache"`
	Backends []string `json:"backends"`
	Threads  int      `json:"threads"`
	Repeats  int      `json:"repeats"`
	Decode   int      `json:"decode"`
	NumDraft int      `json:"num_draft"`
	Int8     bool     `json:"int8"` // the CPU backend with 8-bit inputs to its decode products (MLXG_CPU_INT8)
}

// SpecSample is one generation.
type SpecSample struct {
	Backend  string  `json:"backend"`
	Bits     int     `json:"bits"`
	Workload string  `json:"workload"`
	Mode     string  `json:"mode"` // plain or lookup
	Repeat   int     `json:"repeat"`
	Tokens   int     `json:"tokens"`
	DecodeS  float64 `json:"decode_s"`
	TPS      float64 `json:"decode_tps"`
	Drafted  int     `json:"drafted"`
	Kept     int     `json:"kept"`
	Passes   int     `json:"passes"`
	Same     bool    `json:"same_as_plain"` // greedy workloads: the tokens equal plain decoding's
}

// editStart begins the edit workload's text.
const editStart = `In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God said, Let there be light: and there was light.`

// specPrompts are the workloads' prompts. The edit prompt is a text the model is shown and
// then writes again: editStart and the model's own greedy continuation of it (decode
// tokens), then editStart once more, so that what the model writes is, as an agent's edit
// of a file it was shown mostly is, already in its context. (qwen3-tiny does not copy a
// passage it was given, but it does write the same continuation again; its training context
// was 512 tokens, and this prompt stays within it.)
func specPrompts(ctx context.Context, e *runner.Engine, decode int) (edit, free string, err error) {
	o := runner.DefaultOptions()
	o.Temperature, o.RepeatPenalty, o.NumPredict, o.NumDraft = 0, 1, decode, 0
	res, err := e.Generate(ctx, runner.Request{Prompt: editStart, Options: o}, nil)
	if err != nil {
		return "", "", err
	}
	return editStart + res.Text + "\n\n" + editStart, "The Jargon File", nil
}

func runSpec(ctx context.Context, c SpecConfig, out string) error {
	if c.Model == "" {
		c.Model = filepath.Join(os.Getenv("MLXG_SHARED"), "models", "qwen3-tiny")
	}
	if _, err := os.Stat(filepath.Join(c.Model, "config.json")); err != nil {
		return fmt.Errorf("--spec-model %s: no checkpoint there (set MLXG_SHARED or pass --spec-model)", c.Model)
	}
	if len(c.Backends) == 0 {
		c.Backends = []string{"cpu"}
		if os.Getenv("MLXG_MLXC_PATH") != "" {
			c.Backends = append(c.Backends, "mlx")
		}
	}
	fmt.Fprintf(os.Stderr, "spec: %s on %v, %d threads, %d repeats of %d tokens, num_draft %d\n", c.Model, c.Backends, c.Threads, c.Repeats, c.Decode, c.NumDraft)
	var samples []SpecSample
	for _, bits := range c.Bits {
		dir := c.Model
		if bits > 0 {
			dir = filepath.Join(c.Cache, "spec", fmt.Sprintf("%s-q%d", filepath.Base(c.Model), bits))
			if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
				if _, err := create.Convert(ctx, c.Model, dir, create.Options{Bits: bits, GroupSize: 64}); err != nil {
					return fmt.Errorf("converting %s to %d-bit: %w", c.Model, bits, err)
				}
			}
		}
		for _, name := range c.Backends {
			b, err := compute.Open(name, compute.OpenOptions{Threads: c.Threads})
			if err != nil {
				fmt.Fprintf(os.Stderr, "spec: the %s backend does not open (%v): skipped\n", name, err)
				continue
			}
			if i8, ok := b.(interface{ UseInt8(bool) }); ok && c.Int8 {
				i8.UseInt8(true)
			}
			e, err := runner.Load(dir, runner.LoadOptions{Backend: b, Threads: c.Threads, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
			if err != nil {
				return err
			}
			s, err := specBackend(ctx, c, name, bits, e)
			e.Close()
			if err != nil {
				return err
			}
			samples = append(samples, s...)
		}
	}
	fmt.Println(specTable(samples))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	raw, _ := json.MarshalIndent(map[string]any{"config": c, "samples": samples}, "", "  ")
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "spec: samples written to", out)
	return nil
}

func specBackend(ctx context.Context, c SpecConfig, backend string, bits int, e *runner.Engine) ([]SpecSample, error) {
	edit, free, err := specPrompts(ctx, e, c.Decode)
	if err != nil {
		return nil, err
	}
	var samples []SpecSample
	for _, w := range []struct {
		name, prompt string
		greedy       bool
	}{{"edit", edit, true}, {"free", free, false}} {
		var plainTokens []int32
		for rep := -1; rep < c.Repeats; rep++ { // -1: the warm-up
			for _, mode := range []string{"plain", "lookup"} {
				o := runner.DefaultOptions()
				o.NumPredict, o.NumCtx = c.Decode, 4096
				o.Seed = 1000 + max(rep, 0)
				if w.greedy {
					o.Temperature, o.RepeatPenalty = 0, 1
				}
				o.NumDraft = 0
				if mode == "lookup" {
					o.NumDraft = c.NumDraft
				}
				res, err := e.Generate(ctx, runner.Request{Prompt: w.prompt, Options: o}, nil)
				if err != nil {
					return nil, err
				}
				if rep < 0 {
					continue
				}
				s := SpecSample{Backend: backend, Bits: bits, Workload: w.name, Mode: mode, Repeat: rep, Tokens: res.EvalCount,
					DecodeS: res.EvalDuration.Seconds(), TPS: res.EvalRate(), Drafted: res.DraftTokens, Kept: res.DraftAccepted, Passes: res.DraftPasses}
				if mode == "plain" {
					plainTokens = res.Tokens
				}
				s.Same = slices.Equal(res.Tokens, plainTokens)
				fmt.Fprintf(os.Stderr, "spec: %s q%d %s %s #%d: %d tokens at %.1f tok/s, %d drafted, %d kept\n", backend, bits, w.name, mode, rep, s.Tokens, s.TPS, s.Drafted, s.Kept)
				samples = append(samples, s)
			}
		}
	}
	return samples, nil
}

// specTable prints medians per backend and workload: plain and lookup decode rates, their
// ratio, the acceptance rate and whether the greedy output was identical.
func specTable(samples []SpecSample) string {
	type key struct {
		backend  string
		bits     int
		workload string
	}
	var keys []key
	for _, s := range samples {
		if k := (key{s.Backend, s.Bits, s.Workload}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var rows [][]string
	for _, k := range keys {
		var plain, look []float64
		drafted, kept, tokens, same, greedy := 0, 0, 0, true, k.workload == "edit"
		for _, s := range samples {
			if s.Backend != k.backend || s.Bits != k.bits || s.Workload != k.workload {
				continue
			}
			if s.Mode == "plain" {
				plain = append(plain, s.TPS)
				continue
			}
			look = append(look, s.TPS)
			drafted, kept, tokens = drafted+s.Drafted, kept+s.Kept, tokens+s.Tokens
			same = same && s.Same
		}
		p, l := Summarize(plain), Summarize(look)
		acc := "-"
		if drafted > 0 {
			acc = strconv.FormatFloat(100*float64(kept)/float64(drafted), 'f', 1, 64) + "%"
		}
		identical := "n/a (sampled)"
		if greedy {
			identical = map[bool]string{true: "yes", false: "NO"}[same]
		}
		weights := "as stored"
		if k.bits > 0 {
			weights = fmt.Sprintf("MLX %d-bit", k.bits)
		}
		rows = append(rows, []string{k.backend, weights, k.workload, FormatSummary(p), FormatSummary(l),
			fmt.Sprintf("%.2fx", Ratio(l, p)), acc, fmt.Sprintf("%.2f", float64(kept)/float64(max(tokens, 1))), identical})
	}
	return Table([]string{"backend", "weights", "workload", "plain tok/s", "lookup tok/s", "lookup/plain", "accepted", "kept/token", "token-identical"}, rows)
}
