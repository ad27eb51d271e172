package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/dustin/go-humanize"
	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/api/server"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/residency"
)

// newFitCmd is `mlxg fit MODEL [--ctx N]`: what the KV-cache policy would choose for a
// model on this machine (or on one with --total/--available), under each pressure level.
func newFitCmd() *cobra.Command {
	var (
		ctx              int
		total, available string
		opts             kvstore.Options
	)
	cmd := &cobra.Command{
		Use:   "fit MODEL",
		Short: "Show how a model fits in memory: weights, KV bytes per token, the largest context at each pressure level",
		Long: `fit reads a model's config.json and safetensors headers (a directory, or a model name in the store)
and this machine's memory, and prints what the KV-cache policy would choose: KV bytes per token under
fp16, each step of the policy's ladder (its measured quality beside it) and q4_0, the largest context that fits at normal, warn and critical memory
pressure, and the predicted peak memory and headroom. The KV flags and MLXG_KV_* variables apply
as they do to serve.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if ctx < 0 {
				return fmt.Errorf("--ctx %d: the context must be 0 (sized from memory) or more", ctx)
			}
			if err := opts.ApplyEnv(os.Getenv); err != nil {
				return err
			}
			dir, err := modelDir(args[0])
			if err != nil {
				return err
			}
			shape, err := readShape(dir)
			if err != nil {
				return err
			}
			mem, err := sysmem.System().Read()
			if err != nil && (total == "" || available == "") {
				return fmt.Errorf("%w (or give both --total and --available)", err)
			}
			if err := overrideBytes(&mem.Total, total, "--total"); err != nil {
				return err
			}
			if err := overrideBytes(&mem.Available, available, "--available"); err != nil {
				return err
			}
			if total != "" || available != "" {
				mem.Source = "given"
			}
			mem.Available = min(mem.Available, mem.Total)
			return printFit(cmd.OutOrStdout(), dir, shape, mem, ctx, opts)
		},
	}
	cmd.Flags().IntVar(&ctx, "ctx", 0, "context length to plan for (default: sized from memory, as serve does with no num_ctx)")
	cmd.Flags().StringVar(&total, "total", "", `assume this much RAM instead of reading it ("64GB", "48GiB")`)
	cmd.Flags().StringVar(&available, "available", "", "assume this much available memory instead of reading it")
	registerKVFlags(cmd.Flags(), &opts)
	return cmd
}

// modelDir is arg itself when it is a checkpoint directory, else the store's snapshot of that name.
func modelDir(arg string) (string, error) {
	if _, err := os.Stat(filepath.Join(arg, "config.json")); err == nil {
		return arg, nil
	}
	name, err := registry.ParseName(arg)
	if err != nil {
		return "", fmt.Errorf("%s is neither a model directory (no config.json there) nor a model name: %w", arg, err)
	}
	store, err := registry.DefaultStore()
	if err != nil {
		return "", err
	}
	m, err := store.Resolve(name)
	if err != nil {
		return "", err
	}
	return m.Dir, nil
}

// readShape reads the cache shape from config.json and the weights' size from the
// safetensors headers, without mapping the weights; a vision tower's activations from its
// config and pixel budget (model.VisionMemoryOf).
func readShape(dir string) (kvstore.ModelShape, error) {
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return kvstore.ModelShape{}, fmt.Errorf("reading the model config: %w", err)
	}
	headers, err := safetensors.ReadDirHeaders(dir)
	if err != nil {
		return kvstore.ModelShape{}, err
	}
	var weights int64
	for _, h := range headers {
		for _, t := range h.Tensors {
			weights += t.End - t.Begin
		}
	}
	shape, err := kvstore.ShapeFromConfig(cfg, weights)
	if err != nil {
		return kvstore.ModelShape{}, fmt.Errorf("%s: %w", dir, err)
	}
	vm, err := model.VisionMemoryOf(dir)
	if err != nil {
		return kvstore.ModelShape{}, err
	}
	shape.Vision = vm.Activations()
	return shape, nil
}

func overrideBytes(dst *uint64, s, flag string) error {
	if s == "" {
		return nil
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 {
		return fmt.Errorf("%s %q: give a size such as 64GB or 48GiB", flag, s)
	}
	*dst = n
	return nil
}

func ibytes(n int64) string {
	if n < 0 {
		return "-" + humanize.IBytes(uint64(-n))
	}
	return humanize.IBytes(uint64(n))
}

var kindLabels = map[kvstore.LayerKind]string{
	kvstore.LayerFull:      "full attention",
	kvstore.LayerSliding:   "sliding window",
	kvstore.LayerRecurrent: "recurrent",
	kvstore.LayerLatent:    "latent attention",
	kvstore.LayerNone:      "without cache",
}

// describeShape is "28 layers: 28 full attention (8 KV heads × 128)".
func describeShape(m kvstore.ModelShape) string {
	counts := map[kvstore.LayerKind]int{}
	var kv *kvstore.LayerShape
	for i, l := range m.Layers {
		counts[l.Kind]++
		if kv == nil && l.Kind.HasKV() {
			kv = &m.Layers[i]
		}
	}
	var parts []string
	for _, k := range []kvstore.LayerKind{kvstore.LayerFull, kvstore.LayerLatent, kvstore.LayerSliding, kvstore.LayerRecurrent, kvstore.LayerNone} {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], kindLabels[k]))
		}
	}
	out := fmt.Sprintf("%d layers: %s", len(m.Layers), strings.Join(parts, ", "))
	if kv != nil {
		out += fmt.Sprintf(" (%d KV heads × %d", kv.KVHeads, kv.KHeadDim)
		if kv.VHeadDim != kv.KHeadDim {
			out += fmt.Sprintf("/%d", kv.VHeadDim)
		}
		out += ")"
	}
	if m.MaxContext > 0 {
		out += fmt.Sprintf(", max context %d", m.MaxContext)
	}
	return out
}

func printFit(w io.Writer, dir string, m kvstore.ModelShape, mem sysmem.Info, ctx int, opts kvstore.Options) error {
	plan, planErr := kvstore.Choose(kvstore.PolicyInput{Model: m, NumCtx: ctx, Memory: mem, Options: opts})

	fmt.Fprintf(w, "Model     %s\n", dir)
	fmt.Fprintf(w, "Shape     %s\n", describeShape(m))
	fmt.Fprintf(w, "Weights   %s\n", ibytes(m.WeightBytes))
	if vm, err := model.VisionMemoryOf(dir); err == nil && vm.Weights > 0 {
		fmt.Fprintf(w, "Vision    tower weights %s (part of the weights); images: %s to encode the largest (%s patches) and %s of kept features, in every peak below\n",
			ibytes(vm.Weights), ibytes(vm.Encode), humanize.Comma(int64(vm.MaxPatches)), ibytes(vm.Features))
		// Where that does not fit, serve lowers the pixel budget (api/server's plan): say to what.
		quiet := slog.New(slog.DiscardHandler)
		loader := &server.EngineLoader{Logger: quiet, KV: &kvstore.Policy{Options: opts, Sensor: sysmem.Fixed(mem), Log: quiet}}
		if p, err := loader.Plan(&registry.LocalModel{Name: dir, Dir: dir, Size: m.WeightBytes}, ctx, 0); err == nil && p.Vision.MaxPixels < vm.MaxPixels {
			fmt.Fprintf(w, "          that does not fit now: serve resizes images within %s pixels instead of %s (%s patches, %s to encode)\n",
				humanize.Comma(int64(p.Vision.MaxPixels)), humanize.Comma(int64(vm.MaxPixels)), humanize.Comma(int64(p.Vision.MaxPatches)), ibytes(p.Vision.Encode))
		}
	}
	fmt.Fprintf(w, "Memory    %s\n\n", mem)

	perToken := func(s kvstore.Spec) (int64, error) {
		l, err := kvstore.NewLayout(m, s, 0, s)
		return l.TokenBytes(m), err
	}
	f16, err := perToken(kvstore.SpecF16)
	if err != nil {
		return err
	}
	steps, err := kvstore.Ladder(m, opts)
	if err != nil && planErr == nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KV per token\tbytes\tof fp16\tTop-1 vs fp16\tMean KL")
	row := func(label string, n int64, q kvstore.Quality) {
		share, top1, kl := "-", "-", "-"
		if f16 > 0 {
			share = fmt.Sprintf("%.0f%%", 100*float64(n)/float64(f16))
		}
		if q.Measured() {
			top1, kl = fmt.Sprintf("%.1f%%", 100*q.Top1), fmt.Sprintf("%.1e", q.MeanKL)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", label, ibytes(n), share, top1, kl)
	}
	row("fp16", f16, kvstore.Quality{})
	for i, st := range steps {
		label := fmt.Sprintf("%s (step %d", st.Layout, i+1)
		if planErr == nil && st.Layout.String() == plan.Layout.String() {
			label += ", chosen"
		}
		row(label+")", st.Layout.TokenBytes(m), st.Quality)
	}
	if q, err := perToken(kvstore.Spec{K: kvstore.FormatQ4_0, V: kvstore.FormatQ4_0}); err == nil {
		row("q4_0", q, kvstore.Quality{})
	} else {
		fmt.Fprintf(tw, "q4_0\tnot possible: %v\t\t\t\n", err)
	}
	tw.Flush()
	if f16 == 0 {
		fmt.Fprintln(w, "(no layer grows with the context: sliding-window and recurrent layers have a fixed size)")
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	ctxHeader := "Auto context"
	if ctx > 0 {
		ctxHeader = "Context"
	}
	fmt.Fprintf(tw, "Pressure\tSpec\tKV per token\tof fp16\tTop-1 vs fp16\tMean KL\t%s\tLargest context\tKV at context\tPeak\tHeadroom\n", ctxHeader)
	var refusals []string
	measured := ""
	for _, p := range []sysmem.Pressure{sysmem.Normal, sysmem.Warn, sysmem.Critical} {
		at := mem
		at.Pressure = p
		pp, err := kvstore.Choose(kvstore.PolicyInput{Model: m, NumCtx: ctx, Memory: at, Options: opts})
		if err != nil {
			fmt.Fprintf(tw, "%s\trefused (below)\t-\t-\t-\t-\t-\t-\t-\t-\t-\n", p)
			refusals = append(refusals, fmt.Sprintf("At %s pressure: %v", p, err))
			continue
		}
		share, top1, kl := "-", "-", "-"
		if f16 > 0 {
			share = fmt.Sprintf("%.2fx", float64(pp.KVTokenBytes)/float64(f16))
		}
		if q := pp.Quality; q.Measured() {
			top1, kl = fmt.Sprintf("%.1f%%", 100*q.Top1), fmt.Sprintf("%.1e", q.MeanKL)
			measured = fmt.Sprintf("Top-1 and mean KL: measured against an fp16 cache on %s, teacher-forced on held-out text, the worst of %s tokens (docs/kv-cache.md).", q.Model, q.Lengths)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", p, pp.Layout, ibytes(pp.KVTokenBytes), share, top1, kl,
			pp.Context, pp.FitContext, ibytes(pp.KVBytes), ibytes(pp.Peak()), ibytes(pp.Headroom()))
	}
	tw.Flush()
	if measured != "" {
		fmt.Fprintln(w, measured)
	} else {
		fmt.Fprintln(w, "Top-1 and mean KL: not measured for layouts your KV settings make (docs/kv-cache.md has the measured ones).")
	}
	fmt.Fprintln(w)
	for _, r := range refusals {
		fmt.Fprintln(w, r)
	}
	streamed, err := printStreaming(w, dir, m, mem, ctx, opts, planErr != nil)
	if err != nil {
		return err
	}
	if planErr != nil && !streamed {
		fmt.Fprintf(w, "Now (%s pressure): %v\n", mem.Pressure, planErr)
		return nil
	}
	if planErr != nil {
		return nil
	}
	fmt.Fprintf(w, "Now (%s pressure): context %d, KV %s, predicted peak %s, headroom %s, prefix cache budget %s\n",
		mem.Pressure, plan.Context, ibytes(plan.KVBytes), ibytes(plan.Peak()), ibytes(plan.Headroom()), ibytes(plan.PrefixBudget))
	fmt.Fprintf(w, "Context: %s\n", plan.ContextReason)
	fmt.Fprintf(w, "Policy: %s\n", plan.Reason)
	return nil
}

// printStreaming prints, for a model with streamed experts or layers, what streaming mode would
// keep in memory: with MLXG_WEIGHT_BUDGET, or, when the weights do not fit (needed), the
// budget of the loader's plan (the server's, api/server's EngineLoader, on this reading); and
// for experts the expert cache's expected hit rate, simulated on synthetic routing traces,
// with the bytes read per token it implies. It reports whether the model would stream.
func printStreaming(w io.Writer, dir string, m kvstore.ModelShape, mem sysmem.Info, ctx int, opts kvstore.Options, needed bool) (bool, error) {
	experts, dense, err := residency.StreamedBytes(dir)
	if err != nil || experts == 0 {
		return false, err
	}
	what := "experts"
	if dense {
		what = "layers"
	}
	forced, policy, err := weightStreaming()
	if err != nil {
		return false, err
	}
	pinned := m.WeightBytes - experts
	why := "MLXG_WEIGHT_BUDGET"
	if forced <= 0 {
		if !needed {
			fmt.Fprintf(w, "Streaming %s are %s of the %s of weights; they fit in memory, so they are mapped (MLXG_WEIGHT_BUDGET forces streaming)\n\n",
				what, ibytes(experts), ibytes(m.WeightBytes))
			return false, nil
		}
		why = "the weights do not fit"
	}
	quiet := slog.New(slog.DiscardHandler)
	loader := &server.EngineLoader{WeightBudget: forced, StreamPolicy: policy, Logger: quiet,
		KV: &kvstore.Policy{Options: opts, Sensor: sysmem.Fixed(mem), Log: quiet}}
	plan, err := loader.Plan(&registry.LocalModel{Name: dir, Dir: dir, Size: m.WeightBytes}, ctx, 0)
	if err != nil {
		fmt.Fprintf(w, "Streaming not possible: %v\n\n", err)
		return false, nil
	}
	budget := plan.WeightBudget
	if budget <= 0 {
		return false, nil
	}
	fmt.Fprintf(w, "Context (streaming): %d, KV %s; %s\n", plan.Context, plan.KVSpec, plan.ContextReason)
	if dense {
		return true, printDenseStreaming(w, dir, why, budget, pinned, m.WeightBytes)
	}
	share := float64(budget-pinned) / float64(experts)
	fmt.Fprintf(w, "Streaming (%s): %s of %s of weights resident (%.0f%%): the %s of non-expert weights and an expert cache of %s, %.0f%% of the %s of experts\n",
		why, ibytes(max(budget, pinned)), ibytes(m.WeightBytes), 100*float64(max(budget, pinned))/float64(m.WeightBytes), ibytes(pinned),
		ibytes(max(budget-pinned, 0)), 100*max(share, 0), ibytes(experts))
	// While decoding, the CPU backend lends the expert cache the room planned for the
	// prompt passes' activations (the decode loan): decode steps, which are what reads
	// per token means, see the larger cache. MLX's activations are its own: no loan.
	decodeShare := share
	if loan := plan.DecodeLoan; loan > 0 {
		decodeShare = float64(budget+loan-pinned) / float64(experts)
		fmt.Fprintf(w, "          while decoding on the CPU backend, an expert cache of %s, %.0f%% of the experts: the prompt passes' activation room (%s) is lent to it\n",
			ibytes(budget+loan-pinned), 100*min(decodeShare, 1), ibytes(loan))
	}
	if layers, n, k, ok := moeShape(dir); ok && decodeShare > 0 {
		rates := func(share float64) (qwen, uniform float64) {
			return residency.ExpectedHitRate(layers, n, k, min(share, 1), residency.QwenLike, policy),
				residency.ExpectedHitRate(layers, n, k, min(share, 1), residency.NearUniform, policy)
		}
		qwen, uniform := rates(decodeShare)
		fmt.Fprintf(w, "          expected expert-cache hit rate (%s policy, simulated): %.0f%% with Qwen3-like routing, %.0f%% with near-uniform routing\n",
			policy, 100*qwen, 100*uniform)
		// A token uses k of the n experts of each layer: k/n of the expert bytes, of which
		// the misses are read.
		perToken := float64(experts) * float64(k) / float64(n)
		reads := func(rate float64) string { return ibytes(int64(perToken * (1 - rate))) }
		fmt.Fprintf(w, "          expected reads per token: %s with Qwen3-like routing, %s with near-uniform routing (of %s of experts a token uses)\n",
			reads(qwen), reads(uniform), ibytes(int64(perToken)))
		if decodeShare != share {
			q, u := 0.0, 0.0
			if share > 0 {
				q, u = rates(share)
			}
			fmt.Fprintf(w, "          without the loan (on MLX): %.0f%% / %.0f%% hits, %s / %s read per token\n",
				100*q, 100*u, reads(q), reads(u))
		}
	}
	fmt.Fprintln(w)
	return true, nil
}

// moeShape reads the layers, experts and experts per token from config.json.
func moeShape(dir string) (layers, experts, topK int, ok bool) {
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return 0, 0, 0, false
	}
	var c struct {
		Layers  int `json:"num_hidden_layers"`
		Experts int `json:"num_experts"`
		TopK    int `json:"num_experts_per_tok"`
	}
	if json.Unmarshal(raw, &c) != nil || c.Layers <= 0 || c.Experts <= 0 || c.TopK <= 0 || c.TopK > c.Experts {
		return 0, 0, 0, false
	}
	return c.Layers, c.Experts, c.TopK, true
}

// printDenseStreaming prints what streaming mode keeps of a dense model under budget: the
// weights outside the decoder layers (pinned), the layers the budget keeps, and the
// bytes of the others, read from the checkpoint once per token.
func printDenseStreaming(w io.Writer, dir, why string, budget, pinned, weights int64) error {
	sizes, err := residency.LayerBytes(dir)
	if err != nil {
		return err
	}
	keep := residency.KeepLayers(sizes, budget-pinned)
	kept, read := 0, int64(0)
	for i, k := range keep {
		if k {
			kept++
		} else {
			read += sizes[i]
		}
	}
	resident := min(weights, max(budget, pinned))
	fmt.Fprintf(w, "Streaming layers (%s): %s of %s of weights resident (%.0f%%): the %s outside the layers and %d of %d layers kept\n",
		why, ibytes(resident), ibytes(weights), 100*float64(resident)/float64(weights), ibytes(pinned), kept, len(sizes))
	if kept < len(sizes) {
		fmt.Fprintf(w, "          %d layers (%s) read from disk per token, while the layers before them compute\n", len(sizes)-kept, ibytes(read))
	}
	fmt.Fprintln(w)
	return nil
}
