package create

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// family holds what mlx-lm's sanitize and quant_predicate do for the mixture-of-experts
// and hybrid architectures (mlx_lm/models/qwen3_moe.py, qwen3_next.py):
//
//   - qwen3_moe, qwen3_next: the per-expert tensors
//     model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight are stacked, in expert
//     order, into model.layers.N.mlp.switch_mlp.{gate,up,down}_proj.weight
//     [experts, out, in], quantized like any linear layer; the router (mlp.gate) and,
//     for qwen3_next, shared_expert_gate are quantized at 8 bits in groups of 64, recorded
//     as per-module overrides in the quantization block;
//
//   - qwen3_next: conv1d weights go from [C, 1, K] to [C, K, 1]; the zero-centred norms
//     (input_layernorm, post_attention_layernorm, model.norm, q_norm, k_norm) get their
//     1 added, so MLX runs them as plain RMSNorm; multi-token-prediction weights (mtp.)
//     are dropped.
//
//   - qwen3_5, qwen3_5_moe (Qwen3.5/3.6, mlx_lm/models/qwen3_5.py, qwen3_5_moe.py): as
//     qwen3_next, and the language model moves from model.language_model.* to
//     language_model.model.* (lm_head to language_model.lm_head), the vision tower
//     (model.visual.*) is dropped, and fused experts (experts.gate_up_proj
//     [experts, 2·inter, hidden], experts.down_proj) become switch_mlp's gate_proj
//     (the first half), up_proj and down_proj.
//
// Other model types (gemma3_text among them) convert as they are.
type family struct {
	modelType string
}

func newFamily(cfg map[string]any) family {
	t, _ := cfg["model_type"].(string)
	return family{modelType: t}
}

func (f family) qwen35() bool { return f.modelType == "qwen3_5" || f.modelType == "qwen3_5_moe" }

// hybrid: Gated DeltaNet models, whose conv1d and norms mlx-lm rewrites.
func (f family) hybrid() bool { return f.modelType == "qwen3_next" || f.qwen35() }

func (f family) moe() bool {
	return f.modelType == "qwen3_moe" || f.modelType == "qwen3_next" || f.qwen35()
}

// drop reports a tensor the MLX layout leaves out.
func (f family) drop(name string) bool {
	if f.qwen35() && (strings.HasPrefix(name, "model.visual.") || strings.HasPrefix(name, "vision_tower.")) {
		return true
	}
	return f.hybrid() && (strings.HasPrefix(name, "mtp.") || strings.Contains(name, ".mtp."))
}

// rename is a tensor's MLX name.
func (f family) rename(name string) string {
	if !f.qwen35() {
		return name
	}
	if rest, ok := strings.CutPrefix(name, "model.language_model."); ok {
		return "language_model.model." + rest
	}
	if strings.HasPrefix(name, "language_model.") {
		return name
	}
	return "language_model." + name
}

// job is one tensor to write: its MLX name and shape, and its rows (rounded to the
// model dtype) in order.
type job struct {
	out     string
	shape   []int
	stacked bool // a stack of expert matrices, quantized per row
	rows    func(rows, cols int, fn func(r0 int, vals []float32))
}

// jobs lists what source tensor n (t) becomes: itself, renamed and reshaped; the stack
// of experts it begins (nothing for the other experts of a stack); or the two halves of
// a fused gate_up_proj.
func (f family) jobs(ck *safetensors.Checkpoint, n string, t *safetensors.Tensor, dt safetensors.DType, stacks map[string][]string) []job {
	all := func(rows, cols int, fn func(r0 int, vals []float32)) { forRows(t, rows, cols, dt, fn) }
	if stacked, e, ok := f.expert(n); ok {
		if e != 0 {
			return nil // written with expert 0
		}
		group := stacks[stacked]
		return []job{{out: f.rename(stacked), shape: []int{len(group), t.Shape[0], t.Shape[1]}, stacked: true,
			rows: func(_, cols int, fn func(r0 int, vals []float32)) {
				for e, name := range group {
					et, _ := ck.Tensor(name)
					forRows(et, et.Shape[0], cols, dt, func(r0 int, vals []float32) { fn(e*et.Shape[0]+r0, vals) })
				}
			}}}
	}
	if f.moe() && len(t.Shape) == 3 {
		if base, ok := strings.CutSuffix(n, ".mlp.experts.down_proj"); ok {
			return []job{{out: f.rename(base + ".mlp.switch_mlp.down_proj.weight"), shape: slices.Clone(t.Shape), stacked: true, rows: all}}
		}
		if base, ok := strings.CutSuffix(n, ".mlp.experts.gate_up_proj"); ok && t.Shape[1]%2 == 0 {
			E, two, in := t.Shape[0], t.Shape[1], t.Shape[2]
			mid := two / 2
			half := func(second bool) func(rows, cols int, fn func(r0 int, vals []float32)) {
				return func(_, cols int, fn func(r0 int, vals []float32)) {
					forRows(t, E*two, in, dt, func(r0 int, vals []float32) {
						for i := range len(vals) / cols {
							r := r0 + i
							e, local := r/two, r%two
							if (local >= mid) == second {
								fn(e*mid+local%mid, vals[i*cols:(i+1)*cols])
							}
						}
					})
				}
			}
			return []job{
				{out: f.rename(base + ".mlp.switch_mlp.gate_proj.weight"), shape: []int{E, mid, in}, stacked: true, rows: half(false)},
				{out: f.rename(base + ".mlp.switch_mlp.up_proj.weight"), shape: []int{E, mid, in}, stacked: true, rows: half(true)},
			}
		}
	}
	return []job{{out: f.rename(n), shape: f.shape(n, t.Shape), rows: all}}
}

// expert splits model.layers.N.mlp.experts.E.P.weight into the stacked name
// (model.layers.N.mlp.switch_mlp.P.weight) and E.
func (f family) expert(name string) (stacked string, e int, ok bool) {
	if !f.moe() {
		return "", 0, false
	}
	i := strings.Index(name, ".mlp.experts.")
	if i < 0 || !strings.HasSuffix(name, ".weight") {
		return "", 0, false
	}
	rest := name[i+len(".mlp.experts."):]
	num, proj, found := strings.Cut(rest, ".")
	e, err := strconv.Atoi(num)
	if !found || err != nil || e < 0 {
		return "", 0, false
	}
	return name[:i] + ".mlp.switch_mlp." + proj, e, true
}

// stacks groups the checkpoint's expert tensors by the stacked tensor they form, in
// expert order, and checks that every group is complete and of one shape.
func (f family) stacks(ck *safetensors.Checkpoint, names []string) (map[string][]string, error) {
	groups := map[string][]string{}
	for _, n := range names {
		s, e, ok := f.expert(n)
		if !ok {
			continue
		}
		g := groups[s]
		for len(g) <= e {
			g = append(g, "")
		}
		g[e] = n
		groups[s] = g
	}
	for s, g := range groups {
		first, _ := ck.Tensor(g[0])
		for e, n := range g {
			if n == "" {
				return nil, fmt.Errorf("create: expert %d of %s is missing: the checkpoint is incomplete", e, s)
			}
			t, _ := ck.Tensor(n)
			if first == nil || !slices.Equal(t.Shape, first.Shape) || len(t.Shape) != 2 || t.DType != first.DType {
				return nil, fmt.Errorf("create: expert tensors of %s differ in shape or dtype (%s)", s, n)
			}
		}
	}
	return groups, nil
}

// shape is the MLX shape of a tensor kept as it is.
func (f family) shape(name string, shape []int) []int {
	if f.hybrid() && strings.HasSuffix(name, "conv1d.weight") && len(shape) == 3 && shape[1] == 1 {
		return []int{shape[0], shape[2], 1} // [C, 1, K] -> [C, K, 1]: the same bytes
	}
	return slices.Clone(shape)
}

// plusOne reports a zero-centred norm weight that the MLX layout stores with 1 added.
func (f family) plusOne(name string, shape []int) bool {
	if !f.hybrid() || len(shape) != 1 {
		return false
	}
	for _, sfx := range []string{".input_layernorm.weight", ".post_attention_layernorm.weight", ".q_norm.weight", ".k_norm.weight"} {
		if strings.HasSuffix(name, sfx) {
			return true
		}
	}
	return name == "model.norm.weight" || name == "language_model.model.norm.weight"
}

// override returns the bits and group of a module quantized apart from the rest.
func (f family) override(module string) (bits, group int, ok bool) {
	if f.moe() && (strings.HasSuffix(module, "mlp.gate") || (f.hybrid() && strings.HasSuffix(module, "shared_expert_gate"))) {
		return 8, 64, true
	}
	return 0, 0, false
}
