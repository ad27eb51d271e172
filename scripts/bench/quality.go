package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
	_ "github.com/mlxg/mlxg/runner/model/all"
	"github.com/mlxg/mlxg/runner/quality"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// The --quality scenario: what each KV layout costs in the model's answers, in process
// on the CPU backend (runner/quality). The held-out text (quality.LoadHeldOut: English the
// trained model never saw) is fed teacher-forced to the model with an fp16 cache and
// with each layout's, in chunks of 64; at every position, the full-vocabulary KL
// divergence KL(fp16 || layout) of the next-token distributions, whether the greedy
// tokens agree, and each one's perplexity on the text. One pass over the longest context
// measures the shorter ones too (the logits at a position do not depend on what
// follows). Prefix-restored: each layout's cache for the first --quality-restore tokens
// is saved to an SSD prefix tier, read back into fresh caches by a new prefix cache,
// and the rest of the shortest context is scored against the live cache's logits: they
// must be bitwise the same at every position.
//
// With --int8, the 8-bit activations of the CPU backend instead: qwen3-tiny quantized
// (as `mlxg create --quantize q4` and q8 do) on a float backend and on one with 8-bit
// inputs, fed one token at a time (the decode path, where they apply).

// QualityConfig is the scenario's settings.
type QualityConfig struct {
	Models   []string    `json:"models"` // "qwen3-tiny" and/or the random shape's name
	Contexts []int       `json:"contexts"`
	Layouts  [][2]string `json:"layouts"` // name, quality.ParseLayout spec
	Restore  int         `json:"restore_tokens"`
	Threads  int         `json:"threads"`
	Int8     bool        `json:"int8"`
	Int8Ctx  int         `json:"int8_tokens"`
	Shape    string      `json:"shape"`
	Seed     uint64      `json:"seed"`
	Cache    string      `json:"cache"`
	Text     string      `json:"text"` // quality.LoadSource's name
}

// QualityRow is one measured cell.
type QualityRow struct {
	Model      string         `json:"model"`
	Layout     string         `json:"layout"`
	LayoutSpec string         `json:"layout_spec"` // as the policy names it
	BytesRatio float64        `json:"bytes_per_token_vs_fp16"`
	Context    int            `json:"context"`
	Report     quality.Report `json:"report"`
	Restored   quality.Report `json:"restored_vs_live"` // positions Restore to the shortest context
}

// QualityResults is the JSON file.
type QualityResults struct {
	Config  QualityConfig `json:"config"`
	Machine Machine       `json:"machine"`
	Rows    []QualityRow  `json:"rows"`
	Int8    []QualityRow  `json:"int8,omitempty"`
	Table   string        `json:"table"`
}

// layoutFlags collects repeated --layout values.
type layoutFlags []string

func (l *layoutFlags) String() string     { return strings.Join(*l, "; ") }
func (l *layoutFlags) Set(s string) error { *l = append(*l, s); return nil }

// tinyDir is qwen3-tiny's directory: $MLXG_SHARED/models/qwen3-tiny, else the shared
// folder beside the repository.
func tinyDir(repo string) string {
	shared := os.Getenv("MLXG_SHARED")
	if shared == "" {
		shared = filepath.Join(repo, "..", "shared")
	}
	return filepath.Join(shared, "models", "qwen3-tiny")
}

func runQuality(ctx context.Context, c QualityConfig, repo, out string) (err error) {
	start := time.Now()
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "[%6.1fs load %4.1f] %s\n", time.Since(start).Seconds(), loadAverage(), fmt.Sprintf(format, args...))
	}
	res := QualityResults{Config: c, Machine: machineInfo(repo)}
	res.Machine.StartedAt = start.UTC()
	defer func() {
		res.Machine.LoadEnd = loadAverage()
		res.Machine.DurationS = time.Since(start).Seconds()
		res.Table = qualityTable(c, res.Rows) + int8Table(res.Int8)
		fmt.Print(res.Table)
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
	tiny := tinyDir(repo)
	if _, err := os.Stat(filepath.Join(tiny, "config.json")); err != nil {
		return fmt.Errorf("qwen3-tiny not found at %s (set MLXG_SHARED): %w", tiny, err)
	}
	tok, err := tokenizer.Load(tiny) // the Qwen tokenizer; the random shape shares its ids
	if err != nil {
		return err
	}
	heldOut, err := quality.LoadSource(c.Text)
	if err != nil {
		return err
	}
	text := tok.Encode(heldOut, false)
	longest := slices.Max(c.Contexts)
	if c.Int8 {
		longest = c.Int8Ctx
	}
	if len(text) < longest+1 {
		return fmt.Errorf("the held-out text is %d tokens, fewer than the %d a context of %d needs", len(text), longest+1, longest)
	}
	tokens := text[:longest+1]
	logf("machine: %s, %d cores; text %q: %d tokens, %d used", res.Machine.CPU, res.Machine.Cores, c.Text, len(text), len(tokens))
	if c.Int8 {
		res.Int8, err = measureInt8(ctx, c, tiny, tokens, logf)
		return err
	}
	for _, name := range c.Models {
		dir := tiny
		if name != "qwen3-tiny" {
			if dir, err = ensureCheckpoint(c.Cache, name, c.Seed, tiny, logf); err != nil {
				return err
			}
		}
		rows, err := measureLayouts(ctx, c, name, dir, tokens, logf)
		res.Rows = append(res.Rows, rows...)
		if err != nil {
			return err
		}
	}
	return nil
}

// measureLayouts runs the layouts on one model.
func measureLayouts(ctx context.Context, c QualityConfig, name, dir string, tokens []int32, logf func(string, ...any)) ([]QualityRow, error) {
	m, err := model.Load(dir, cpu.New(c.Threads))
	if err != nil {
		return nil, err
	}
	defer m.Close()
	shape, err := quality.Shape(m)
	if err != nil {
		return nil, err
	}
	f16, err := quality.ParseLayout(shape, "kv-bits=16")
	if err != nil {
		return nil, err
	}
	ref := quality.Side{Name: "fp16", Model: m, Caches: quality.LayoutCaches(m, f16)}
	var tests []quality.Side
	var rows []QualityRow
	for _, l := range c.Layouts {
		lay, err := quality.ParseLayout(shape, l[1])
		if err != nil {
			return nil, err
		}
		if lay.Base == kvstore.SpecF16 && lay.Boundary == kvstore.SpecF16 {
			continue // the reference itself
		}
		tests = append(tests, quality.Side{Name: l[0], Model: m, Caches: quality.LayoutCaches(m, lay)})
		for _, n := range c.Contexts {
			rows = append(rows, QualityRow{Model: name, Layout: l[0], LayoutSpec: lay.Base.String() + boundaryNote(lay),
				BytesRatio: float64(lay.TokenBytes(shape)) / float64(f16.TokenBytes(shape)), Context: n})
		}
	}
	row := func(layout, ctx int) *QualityRow { return &rows[layout*len(c.Contexts)+ctx] }
	progress := func(fed int, reps []quality.Report) {
		if i := slices.Index(c.Contexts, fed); i >= 0 {
			for k, r := range reps {
				row(k, i).Report = r
			}
			logf("%s: %d tokens scored", name, fed)
		}
	}
	logf("%s: fp16 and %d layouts over %d tokens", name, len(tests), len(tokens)-1)
	if _, err := quality.CompareAll(ctx, ref, tests, tokens, quality.Options{Progress: progress}); err != nil {
		return rows, err
	}
	if c.Restore <= 0 {
		return rows, nil
	}
	tmp, err := os.MkdirTemp("", "mlxg-quality-prefix-")
	if err != nil {
		return rows, err
	}
	defer os.RemoveAll(tmp)
	// Bitwise-equal logits after the restored prefix mean the restored cache holds what
	// the live one does, so the shortest context is enough to check it.
	short := tokens[:slices.Min(c.Contexts)+1]
	for k, live := range tests {
		restored, err := quality.Restored(ctx, live, short, c.Restore, filepath.Join(tmp, fmt.Sprint(k)))
		if err != nil {
			return rows, err
		}
		r, err := quality.Compare(ctx, live, restored, short, quality.Options{})
		if err != nil {
			return rows, err
		}
		logf("%s %s: %d tokens restored from the SSD tier, then against the live cache: %v", name, live.Name, c.Restore, r)
		for i := range c.Contexts {
			row(k, i).Restored = r
		}
	}
	return rows, nil
}

// boundaryNote spells a layout's boundary layers, if any.
func boundaryNote(l kvstore.Layout) string {
	if l.BoundaryLayers == 0 {
		return ""
	}
	return fmt.Sprintf(" + boundary %d@%s", l.BoundaryLayers, l.Boundary.String())
}

// measureInt8 compares 8-bit inputs with float on qwen3-tiny at 4 and 8 bits.
func measureInt8(ctx context.Context, c QualityConfig, tiny string, tokens []int32, logf func(string, ...any)) ([]QualityRow, error) {
	tmp, err := os.MkdirTemp("", "mlxg-quality-int8-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var rows []QualityRow
	for _, bits := range []int{4, 8} {
		dir := filepath.Join(tmp, fmt.Sprintf("q%d", bits))
		logf("quantizing qwen3-tiny to %d bits, group 64", bits)
		if _, err := create.Convert(ctx, tiny, dir, create.Options{Bits: bits, GroupSize: 64}); err != nil {
			return rows, err
		}
		load := func(int8 bool) (*model.Model, error) {
			be := cpu.New(c.Threads)
			be.UseInt8(int8)
			return model.Load(dir, be)
		}
		fm, err := load(false)
		if err != nil {
			return rows, err
		}
		im, err := load(true)
		if err != nil {
			fm.Close()
			return rows, err
		}
		side := func(name string, m *model.Model) quality.Side {
			return quality.Side{Name: name, Model: m, Caches: func() ([]kvstore.Layer, error) { return m.NewCaches(false) }}
		}
		name := fmt.Sprintf("qwen3-tiny q%d", bits)
		logf("%s: float against 8-bit inputs, %d tokens one at a time", name, len(tokens)-1)
		r, err := quality.Compare(ctx, side("float", fm), side("int8", im), tokens, quality.Options{Chunk: 1})
		fm.Close()
		im.Close()
		if err != nil {
			return rows, err
		}
		logf("%s, 8-bit inputs against float: %v", name, r)
		rows = append(rows, QualityRow{Model: name, Layout: "8-bit inputs vs float", Context: len(tokens) - 1, Report: r})
	}
	return rows, nil
}

func pct(r quality.Report) string { return fmt.Sprintf("%.2f%%", 100*r.Top1()) }

// qualityTable is the layouts' table.
func qualityTable(c QualityConfig, rows []QualityRow) string {
	if len(rows) == 0 {
		return ""
	}
	header := []string{"model", "KV layout", "bytes/token vs fp16", "context", "top-1 agreement", fmt.Sprintf("top-1 where fp16's gap ≥ %g", quality.DefaultClearGap), "mean KL", "max KL", "perplexity fp16 → layout"}
	if c.Restore > 0 {
		header = append(header, fmt.Sprintf("first %d tokens restored from SSD: logits ≡ live", c.Restore))
	}
	var cells [][]string
	for _, r := range rows {
		row := []string{r.Model, r.Layout + " (" + r.LayoutSpec + ")", fmt.Sprintf("%.3fx", r.BytesRatio), fmt.Sprint(r.Context),
			pct(r.Report), fmt.Sprintf("%.2f%% of %d", 100*r.Report.Top1Clear(), r.Report.Clear), fmt.Sprintf("%.2e", r.Report.MeanKL), fmt.Sprintf("%.2e", r.Report.MaxKL),
			fmt.Sprintf("%.2f → %.2f", r.Report.PPLRef, r.Report.PPLTest)}
		if c.Restore > 0 {
			switch rr := r.Restored; {
			case rr.Positions == 0:
				row = append(row, "–")
			case rr.Identical == rr.Positions:
				row = append(row, fmt.Sprintf("yes: %d/%d bitwise", rr.Identical, rr.Positions))
			default:
				row = append(row, fmt.Sprintf("NO: %d/%d bitwise, KL %.2e", rr.Identical, rr.Positions, rr.MeanKL))
			}
		}
		cells = append(cells, row)
	}
	return Table(header, cells)
}

// int8Table is the 8-bit inputs' table.
func int8Table(rows []QualityRow) string {
	if len(rows) == 0 {
		return ""
	}
	var cells [][]string
	for _, r := range rows {
		cells = append(cells, []string{r.Model, r.Layout, fmt.Sprint(r.Context), fmt.Sprintf("%s (%d/%d)", pct(r.Report), r.Report.Top1Agree, r.Report.Positions),
			fmt.Sprintf("%.2e", r.Report.MeanKL), fmt.Sprintf("%.2e", r.Report.MaxKL), fmt.Sprintf("%.3f → %.3f", r.Report.PPLRef, r.Report.PPLTest)})
	}
	return Table([]string{"model", "compared", "tokens", "top-1 agreement", "mean KL", "max KL", "perplexity float → int8"}, cells)
}
