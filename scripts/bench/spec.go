package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	_ "github.com/mlxg/mlxg/metal" // registers "mlx"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/runner/compute"
	_ "github.com/mlxg/mlxg/runner/cpu" // registers "cpu"
)

// The --spec scenario (speculative decoding), in this process on small models: per target
// model, backend (cpu, and mlx when MLXG_MLXC_PATH points at libmlxc) and workload, decode
// tok/s with num_draft 0 (plain) and num_draft N (speculative), alternating plain,
// speculative, plain... after a warm-up of each, with the passes and the drafted and kept
// tokens. Two kinds of target:
//   - lookup: qwen3-tiny (or --spec-model) as stored and converted (--spec-bits), drafted
//     by prompt lookup;
//   - draft: a target and its draft model (--spec-pairs): qwen3-tiny as stored drafted by
//     itself at MLX 4-bit ("tiny-q4"), and the random 0.5B shape drafted by its own first
//     2 layers ("rand-0.5b": randmodel's TailScale, the target's layers from the third on
//     scaled by randTail, so that the 2-layer model of the same seed agrees with it on
//     most greedy tokens).
//
// Workloads:
//   - edit: a raw prompt holding the text the model then writes (editPrompt), as an agent
//     rewriting a file it was shown does; greedy, and the output must be token-identical;
//   - free: a short prompt and sampling (temperature 0.8, top_k 40, top_p 0.9, repeat
//     penalty 1.1, a fixed seed per repeat), which prompt lookup rarely matches: it must
//     not cost.

// SpecConfig is the scenario's settings.
type SpecConfig struct {
	Model      string   `json:"model"`
	Bits       []int    `json:"bits"`  // lookup targets: 0 the checkpoint as it is; 4, 8: converted to MLX 4- or 8-bit (group 64)
	Pairs      []string `json:"pairs"` // draft targets: tiny-q4, rand-0.5b
	Workloads  []string `json:"workloads"`
	Cache      string   `json:"cache"`
	Backends   []string `json:"backends"`
	Threads    int      `json:"threads"`
	Repeats    int      `json:"repeats"`
	Decode     int      `json:"decode"`
	EditTokens int      `json:"edit_tokens"` // the edit workload's text, in tokens of the model's own writing
	NumDraft   int      `json:"num_draft"`
	Int8       bool     `json:"int8"` // the CPU backend with 8-bit inputs to its decode products (MLXG_CPU_INT8)
	Seed       uint64   `json:"seed"` // the random pair's weights
}

// SpecSample is one generation.
type SpecSample struct {
	Backend  string  `json:"backend"`
	Target   string  `json:"target"`
	Drafter  string  `json:"drafter"` // "lookup", or the draft model
	Workload string  `json:"workload"`
	Mode     string  `json:"mode"` // plain or spec
	Repeat   int     `json:"repeat"`
	Tokens   int     `json:"tokens"`
	DecodeS  float64 `json:"decode_s"`
	TPS      float64 `json:"decode_tps"`
	Drafted  int     `json:"drafted"`
	Kept     int     `json:"kept"`
	Passes   int     `json:"passes"`
	Same     bool    `json:"same_as_plain"` // greedy workloads: the tokens equal plain decoding's
}

// specTarget is a model measured with a drafter: prompt lookup (draft "") or a draft model.
type specTarget struct {
	name, dir           string
	draftName, draftDir string
}

// randTail scales the random target's layers after its first 2 (randmodel.Config.TailScale):
// its 2-layer draft then keeps about three quarters of greedy drafts and a third of sampled ones.
const randTail = 0.1

// editStart begins the edit workload's text.
const editStart = `In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters. And God said, Let there be light: and there was light.`

// editEvery: the shown copy of the edit workload's text has every editEvery-th word
// upper-cased, so that what the model writes differs from what it was shown in small places,
// as an edit of a file differs from the file.
const editEvery = 40

// editPrompt is the edit workload's prompt, a text the model is shown and then writes
// again: editStart and the model's own greedy continuation of it (tokens tokens), with
// small changes (editEvery), then editStart once more, so that what the model writes is,
// as an agent's edit of a file it was shown mostly is, already in its context. (qwen3-tiny
// does not copy a passage it was given, but it does write the same continuation again.)
func editPrompt(ctx context.Context, e *runner.Engine, tokens int) (string, error) {
	o := runner.DefaultOptions()
	o.Temperature, o.RepeatPenalty, o.NumPredict, o.NumDraft, o.NumCtx = 0, 1, tokens, 0, 4096
	res, err := e.Generate(ctx, runner.Request{Prompt: editStart, Options: o}, nil)
	if err != nil {
		return "", err
	}
	words := 0
	shown := wordRE.ReplaceAllStringFunc(res.Text, func(w string) string {
		if words++; words%editEvery == 0 {
			return strings.ToUpper(w)
		}
		return w
	})
	return editStart + shown + "\n\n" + editStart, nil
}

var wordRE = regexp.MustCompile(`[a-z]{3,}`)

// freePrompt begins the free-writing workload.
const freePrompt = "The Jargon File"

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
	targets, err := specTargets(ctx, c)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "spec: %d targets on %v, %d threads, %d repeats of %d tokens, num_draft %d\n", len(targets), c.Backends, c.Threads, c.Repeats, c.Decode, c.NumDraft)
	var samples []SpecSample
	edits := map[string]string{} // the edit prompt per target, made on the first backend
	for _, t := range targets {
		for _, name := range c.Backends {
			s, err := specBackend(ctx, c, name, t, edits)
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
	raw, _ := json.MarshalIndent(map[string]any{"config": c, "samples": samples, "edit_prompts": edits}, "", "  ")
	if err := os.WriteFile(out, raw, 0o644); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "spec: samples written to", out)
	return nil
}

// specTargets makes (converts, generates) the checkpoints the targets need, once, in the cache.
func specTargets(ctx context.Context, c SpecConfig) ([]specTarget, error) {
	base := filepath.Base(c.Model)
	converted := func(bits int) (string, error) {
		if bits == 0 {
			return c.Model, nil
		}
		dir := filepath.Join(c.Cache, "spec", fmt.Sprintf("%s-q%d", base, bits))
		if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
			if _, err := create.Convert(ctx, c.Model, dir, create.Options{Bits: bits, GroupSize: 64}); err != nil {
				return "", fmt.Errorf("converting %s to %d-bit: %w", c.Model, bits, err)
			}
		}
		return dir, nil
	}
	label := func(bits int) string {
		if bits == 0 {
			return base + " as stored"
		}
		return fmt.Sprintf("%s MLX %d-bit", base, bits)
	}
	var ts []specTarget
	for _, bits := range c.Bits {
		dir, err := converted(bits)
		if err != nil {
			return nil, err
		}
		ts = append(ts, specTarget{name: label(bits), dir: dir})
	}
	for _, p := range c.Pairs {
		switch p {
		case "tiny-q4":
			d, err := converted(4)
			if err != nil {
				return nil, err
			}
			ts = append(ts, specTarget{name: label(0), dir: c.Model, draftName: label(4), draftDir: d})
		case "rand-0.5b":
			target, draft := randmodel.Qwen2_0_5B(), randmodel.Qwen2_0_5B()
			target.TailFrom, target.TailScale = 2, randTail
			draft.NumLayers = 2
			dirs := [2]string{}
			for i, m := range []randmodel.Config{target, draft} {
				dirs[i] = filepath.Join(c.Cache, "spec", fmt.Sprintf("qwen2-0.5b-seed%d-bf16-%dl-tail%g", c.Seed, m.NumLayers, randTail))
				if _, err := os.Stat(filepath.Join(dirs[i], "config.json")); err == nil {
					continue
				}
				fmt.Fprintf(os.Stderr, "spec: generating %s\n", dirs[i])
				tmp := dirs[i] + ".tmp"
				os.RemoveAll(tmp)
				if err := randmodel.Generate(tmp, m, randmodel.Options{Seed: c.Seed, TokenizerDir: c.Model}); err != nil {
					return nil, err
				}
				if err := os.Rename(tmp, dirs[i]); err != nil {
					return nil, err
				}
			}
			ts = append(ts, specTarget{name: fmt.Sprintf("random 0.5B bf16 (layers 3-24 x%g)", randTail), dir: dirs[0],
				draftName: "its first 2 layers", draftDir: dirs[1]})
		default:
			return nil, fmt.Errorf("--spec-pairs %q: want tiny-q4 and/or rand-0.5b", p)
		}
	}
	return ts, nil
}

func specBackend(ctx context.Context, c SpecConfig, backend string, t specTarget, edits map[string]string) ([]SpecSample, error) {
	b, err := compute.Open(backend, compute.OpenOptions{Threads: c.Threads})
	if err != nil {
		fmt.Fprintf(os.Stderr, "spec: the %s backend does not open (%v): skipped\n", backend, err)
		return nil, nil
	}
	if i8, ok := b.(interface{ UseInt8(bool) }); ok && c.Int8 {
		i8.UseInt8(true)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	e, err := runner.Load(t.dir, runner.LoadOptions{Backend: b, Threads: c.Threads, Logger: quiet})
	if err != nil {
		return nil, err
	}
	defer e.Close()
	drafter := "lookup"
	if t.draftDir != "" {
		d, err := runner.Load(t.draftDir, runner.LoadOptions{Backend: b, Threads: c.Threads, Logger: quiet})
		if err != nil {
			return nil, err
		}
		defer d.Close()
		if err := e.SetDraft(d); err != nil {
			return nil, err
		}
		defer e.SetDraft(nil)
		drafter = t.draftName
	}
	var samples []SpecSample
	for _, w := range c.Workloads {
		prompt, greedy := freePrompt, w == "edit"
		if greedy {
			if prompt = edits[t.dir]; prompt == "" {
				if prompt, err = editPrompt(ctx, e, c.EditTokens); err != nil {
					return nil, err
				}
				edits[t.dir] = prompt
				n := len(e.Tokenizer.Encode(prompt, true))
				if n+c.Decode > 4096 {
					return nil, fmt.Errorf("the edit prompt of %d tokens and %d more do not fit the context of 4096: lower --spec-edit-tokens", n, c.Decode)
				}
				fmt.Fprintf(os.Stderr, "spec: %s: the edit prompt has %d tokens\n", t.name, n)
			}
		}
		var plainTokens []int32
		for rep := -1; rep < c.Repeats; rep++ { // -1: the warm-up
			for _, mode := range []string{"plain", "spec"} {
				o := runner.DefaultOptions()
				o.NumPredict, o.NumCtx = c.Decode, 4096
				o.Seed = 1000 + max(rep, 0)
				if greedy {
					o.Temperature, o.RepeatPenalty = 0, 1
				}
				o.NumDraft = 0
				if mode == "spec" {
					o.NumDraft = c.NumDraft
				}
				res, err := e.Generate(ctx, runner.Request{Prompt: prompt, Options: o}, nil)
				if err != nil {
					return nil, err
				}
				if rep < 0 {
					continue
				}
				s := SpecSample{Backend: backend, Target: t.name, Drafter: drafter, Workload: w, Mode: mode, Repeat: rep, Tokens: res.EvalCount,
					DecodeS: res.EvalDuration.Seconds(), TPS: res.EvalRate(), Drafted: res.DraftTokens, Kept: res.DraftAccepted, Passes: res.DraftPasses}
				if mode == "plain" {
					plainTokens = res.Tokens
				}
				s.Same = slices.Equal(res.Tokens, plainTokens)
				fmt.Fprintf(os.Stderr, "spec: %s %s (%s) %s %s #%d: %d tokens at %.1f tok/s, %d passes, %d drafted, %d kept\n", backend, t.name, drafter, w, mode, rep, s.Tokens, s.TPS, s.Passes, s.Drafted, s.Kept)
				samples = append(samples, s)
			}
		}
	}
	return samples, nil
}

// specTable prints medians per backend, target, drafter and workload: plain and speculative
// decode rates, the median of the rounds' ratios (each round runs plain then speculative,
// so a ratio compares runs made one after the other), the acceptance rate, kept drafts per
// token, and whether the greedy output was identical.
func specTable(samples []SpecSample) string {
	type key struct{ backend, target, drafter, workload string }
	var keys []key
	for _, s := range samples {
		if k := (key{s.Backend, s.Target, s.Drafter, s.Workload}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	var rows [][]string
	for _, k := range keys {
		var plain, spec, ratios []float64
		drafted, kept, tokens, passes, same, greedy := 0, 0, 0, 0, true, k.workload == "edit"
		byRound := map[int]float64{}
		for _, s := range samples {
			if (key{s.Backend, s.Target, s.Drafter, s.Workload}) != k {
				continue
			}
			if s.Mode == "plain" {
				plain = append(plain, s.TPS)
				byRound[s.Repeat] = s.TPS
				continue
			}
			spec = append(spec, s.TPS)
			if p := byRound[s.Repeat]; p > 0 {
				ratios = append(ratios, s.TPS/p)
			}
			drafted, kept, tokens, passes = drafted+s.Drafted, kept+s.Kept, tokens+s.Tokens, passes+s.Passes
			same = same && s.Same
		}
		acc := "-"
		if drafted > 0 {
			acc = strconv.FormatFloat(100*float64(kept)/float64(drafted), 'f', 1, 64) + "%"
		}
		identical := "n/a (sampled)"
		if greedy {
			identical = map[bool]string{true: "yes", false: "NO"}[same]
		}
		n := max(len(spec), 1)
		rows = append(rows, []string{k.backend, k.target, k.drafter, k.workload, FormatSummary(Summarize(plain)), FormatSummary(Summarize(spec)),
			fmt.Sprintf("%.2fx", Summarize(ratios).Median), fmt.Sprintf("%.1f", float64(passes)/float64(n)), acc,
			fmt.Sprintf("%.2f", float64(kept)/float64(max(tokens, 1))), identical})
	}
	return Table([]string{"backend", "target", "drafter", "workload", "plain tok/s", "spec tok/s", "spec/plain", "passes", "accepted", "kept/token", "token-identical"}, rows)
}
