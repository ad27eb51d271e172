package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/api"
)

func newShowCmd() *cobra.Command {
	var license, modelfile, parameters, template, system, verbose bool
	cmd := &cobra.Command{
		Use:   "show MODEL",
		Short: "Show information for a model",
		Long: `Show a model's architecture, parameter count, quantization (bits, group size, mode, mixed
per-module recipes), context length, which layers keep a KV cache, chat template, capabilities
and license, read from its config.json, safetensors headers and tokenizer files.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 0
			for _, f := range []bool{license, modelfile, parameters, template, system} {
				if f {
					n++
				}
			}
			if n > 1 {
				return errors.New("only one of '--license', '--modelfile', '--parameters', '--system', or '--template' can be specified")
			}
			return withModels(cmd.Context(), func(m modelService) error {
				resp, err := m.Show(cmd.Context(), &api.ShowRequest{Model: args[0], Verbose: verbose})
				if err != nil {
					return err
				}
				out := cmd.OutOrStdout()
				switch {
				case license:
					fmt.Fprintln(out, resp.License)
				case modelfile:
					fmt.Fprint(out, resp.Modelfile)
				case parameters:
					fmt.Fprintln(out, resp.Parameters)
				case template:
					fmt.Fprintln(out, resp.Template)
				case system:
					fmt.Fprintln(out, resp.System)
				default:
					return printShow(out, resp, verbose)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&license, "license", false, "Show license of a model")
	cmd.Flags().BoolVar(&modelfile, "modelfile", false, "Show Modelfile of a model")
	cmd.Flags().BoolVar(&parameters, "parameters", false, "Show parameters of a model")
	cmd.Flags().BoolVar(&template, "template", false, "Show template of a model")
	cmd.Flags().BoolVar(&system, "system", false, "Show system message of a model")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "Show detailed model information")
	return cmd
}

// printShow renders show's sections as Ollama does: indented key/value tables.
func printShow(w io.Writer, resp *api.ShowResponse, verbose bool) error {
	// The same JSON types whether the answer came from a server or in-process.
	b, err := json.Marshal(resp.ModelInfo)
	if err != nil {
		return err
	}
	var mi map[string]any
	if err := json.Unmarshal(b, &mi); err != nil {
		return err
	}
	arch, _ := mi["general.architecture"].(string)
	num := func(key string) string {
		if f, ok := mi[key].(float64); ok {
			return fmt.Sprint(int64(f))
		}
		return ""
	}
	tw := tabwriter.NewWriter(w, 0, 8, 4, ' ', 0)
	section := func(title string, rows [][2]string) {
		var kept [][2]string
		for _, r := range rows {
			if r[1] != "" {
				kept = append(kept, r)
			}
		}
		if len(kept) == 0 {
			return
		}
		fmt.Fprintf(tw, "  %s\n", title)
		for _, r := range kept {
			if r[0] == "" {
				fmt.Fprintf(tw, "    %s\n", r[1])
			} else {
				fmt.Fprintf(tw, "    %s\t%s\n", r[0], r[1])
			}
		}
		fmt.Fprintln(tw)
	}
	architecture := arch
	if a, ok := mi["general.architectures"].([]any); ok && len(a) > 0 {
		architecture = fmt.Sprintf("%s (%v)", arch, a[0])
	}
	template := "none"
	if resp.Template != "" {
		template = "yes"
	}
	section("Model", [][2]string{
		{"architecture", architecture},
		{"parameters", resp.Details.ParameterSize},
		{"context length", num(arch + ".context_length")},
		{"embedding length", num(arch + ".embedding_length")},
		{"layers", num(arch + ".block_count")},
		{"quantization", resp.Details.QuantizationLevel},
		{"KV cache layers", kvLayers(mi)},
		{"chat template", template},
	})
	section("Quantization", quantRows(mi))
	var caps [][2]string
	for _, c := range resp.Capabilities {
		caps = append(caps, [2]string{"", c})
	}
	section("Capabilities", caps)
	var params [][2]string
	for _, line := range strings.Split(resp.Parameters, "\n") {
		if k, v, ok := strings.Cut(line, " "); ok {
			params = append(params, [2]string{k, strings.TrimSpace(v)})
		}
	}
	section("Parameters", params)
	if resp.System != "" { // a created model's SYSTEM (first lines)
		lines := strings.Split(strings.TrimSpace(resp.System), "\n")
		var rows [][2]string
		for _, l := range lines[:min(2, len(lines))] {
			rows = append(rows, [2]string{"", strings.TrimSpace(l)})
		}
		section("System", rows)
	}
	if resp.License != "" {
		lines := strings.Split(resp.License, "\n")
		var rows [][2]string
		for _, l := range lines[:min(2, len(lines))] {
			rows = append(rows, [2]string{"", strings.TrimSpace(l)})
		}
		section("License", rows)
	}
	if verbose {
		var meta [][2]string
		keys := make([]string, 0, len(mi))
		for k := range mi {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			v, _ := json.Marshal(mi[k])
			meta = append(meta, [2]string{k, string(v)})
		}
		section("Metadata", meta)
		var tensors [][2]string
		for _, t := range resp.Tensors {
			tensors = append(tensors, [2]string{t.Name, fmt.Sprintf("%s\t%v", t.Type, t.Shape)})
		}
		section("Tensors", tensors)
	}
	return tw.Flush()
}

// kvLayers says which layers keep a KV cache: "all 28", or "12 of 48: 3, 7, ... (others linear_attention)".
func kvLayers(mi map[string]any) string {
	kinds, _ := mi["mlx.layer_types"].([]any)
	kv, _ := mi["mlx.kv_cache_layers"].([]any)
	if len(kinds) == 0 {
		return ""
	}
	if len(kv) == len(kinds) {
		return fmt.Sprintf("all %d", len(kinds))
	}
	idx := make([]string, len(kv))
	for i, v := range kv {
		idx[i] = fmt.Sprint(v)
	}
	others := map[string]int{}
	for i, k := range kinds {
		if !slices.ContainsFunc(kv, func(v any) bool { f, _ := v.(float64); return int(f) == i }) {
			others[fmt.Sprint(k)]++
		}
	}
	var rest []string
	for k, n := range others {
		rest = append(rest, fmt.Sprintf("%d %s", n, k))
	}
	slices.Sort(rest)
	return fmt.Sprintf("%d of %d: %s (no KV cache: %s)", len(kv), len(kinds), strings.Join(idx, ", "), strings.Join(rest, ", "))
}

// quantRows details the quantization: defaults, then the mixed recipe's overrides grouped by setting.
func quantRows(mi map[string]any) [][2]string {
	bits, ok := mi["mlx.quantization.bits"].(float64)
	if !ok {
		return nil
	}
	group, _ := mi["mlx.quantization.group_size"].(float64)
	mode, _ := mi["mlx.quantization.mode"].(string)
	rows := [][2]string{{"bits", fmt.Sprint(bits)}, {"group size", fmt.Sprint(group)}, {"mode", mode}}
	mods, _ := mi["mlx.quantization.modules"].(map[string]any)
	groups := map[string][]string{}
	for name, v := range mods {
		key := "unquantized"
		if o, ok := v.(map[string]any); ok {
			key = fmt.Sprintf("%vbit g%v %v", o["bits"], o["group_size"], o["mode"])
		}
		groups[key] = append(groups[key], name)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		names := groups[k]
		slices.Sort(names)
		shown := names[:min(3, len(names))]
		more := ""
		if len(names) > len(shown) {
			more = fmt.Sprintf(", ... (%d modules)", len(names))
		}
		rows = append(rows, [2]string{"mixed: " + k, strings.Join(shown, ", ") + more})
	}
	return rows
}
