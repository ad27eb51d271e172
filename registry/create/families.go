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
//     (model.visual.*) moves to vision_tower.* as mlx-vlm keeps it (the patch embedding's
//     Conv3d kernel channels-last, every tower weight in float), and fused experts (experts.gate_up_proj
//     [experts, 2·inter, hidden], experts.down_proj) become switch_mlp's gate_proj
//     (the first half), up_proj and down_proj.
//
//   - qwen2_5_vl (Qwen2.5-VL, mlx_vlm/models/qwen2_5_vl): the language model moves from
//     model.* or model.language_model.* to language_model.model.* (lm_head to
//     language_model.lm_head), the vision tower (visual.* or model.visual.*) to
//     vision_tower.*, its patch embedding channels-last and every tower weight in float.
//
//   - gpt_oss (mlx_lm/models/gpt_oss.py): the fused experts of Hugging Face's layout
//     (experts.gate_up_proj [experts, hidden, 2·inter], gate and up interleaved along
//     the last axis; experts.down_proj [experts, inter, hidden]; their _bias tensors)
//     become experts.{gate,up,down}_proj.{weight,bias} [experts, out, in] and
//     [experts, out]; OpenAI's own mxfp4 tensors (_blocks [experts, out, in/32, 16] and
//     _scales, whose bytes are MLX's mxfp4 codes and scales) are split the same way and
//     kept as they are, with "mode": "mxfp4" for those modules; the router (mlp.router)
//     is quantized at 8 bits in groups of 64.
//
//   - gemma4, gemma4_unified, gemma4_text (mlx_lm/models/gemma4.py, gemma4_text.py):
//     the multimodal types' language model moves from model.language_model.* to
//     language_model.model.* (lm_head to language_model.lm_head), the vision tower and its
//     projector move from model.vision_tower.* and model.embed_vision.* to vision_tower.*
//     and embed_vision.* as mlx-vlm keeps them (in float), the audio tower and its
//     embedder are dropped; fused experts (experts.gate_up_proj
//     [experts, 2·inter, hidden], the gate first; experts.down_proj) become
//     experts.switch_glu.{gate,up,down}_proj; with experts the router (router.proj) and
//     the dense MLP beside them are quantized at 8 bits in groups of 64.
//
//   - glm4_moe, glm4_moe_lite (mlx_lm/models/glm4_moe.py, glm4_moe_lite.py): experts
//     stacked as qwen3_moe's; the router (mlp.gate, not a linear layer in mlx-lm) kept in
//     float and its e_score_correction_bias in float32; the multi-token prediction layers
//     after the last (model.layers.N for N >= num_hidden_layers) dropped; for
//     glm4_moe_lite, kv_b_proj ([heads·(nope+v), kv_lora_rank]) split per head into
//     self_attn.embed_q ([heads, kv_lora_rank, nope]: the key half, transposed) and
//     self_attn.unembed_out ([heads, v, kv_lora_rank]: the value half), each quantized
//     along its last axis, which is what multi-head latent attention reads.
//
//   - mistral3 (Mistral Small 3.1/3.2, Magistral, Devstral Small 2, Ministral 3;
//     mlx_lm/models/mistral3.py): the language model stays under language_model.*
//     (transformers 5's model.language_model.* and lm_head move there), the vision
//     tower and the multimodal projector are dropped.
//
//   - gemma3 (Gemma 3 4B/12B/27B, mlx_vlm/models/gemma3): transformers 5's names
//     (model.language_model.*, lm_head, model.vision_tower.*, model.multi_modal_projector.*)
//     move to mlx-vlm's (language_model.model.*, language_model.lm_head, vision_tower.*,
//     multi_modal_projector.*), older checkpoints' already are; the SigLIP tower's patch
//     embedding goes channels-last as MLX's Conv2d keeps it, and the tower and projector
//     stay in float.
//
// Other model types (gemma3_text, mistral, ministral3 and phi3 among them, Phi-3's
// fused qkv_proj and gate_up_proj kept fused as mlx-lm keeps them) convert as they are.
type family struct {
	modelType string
	experts   bool // a Gemma 4 with experts (enable_moe_block)
	layers    int  // num_hidden_layers
	// glm4_moe_lite's attention: heads, qk_nope_head_dim, v_head_dim.
	heads, nope, vdim int
}

func newFamily(cfg map[string]any) family {
	t, _ := cfg["model_type"].(string)
	text := cfg
	if tc, ok := cfg["text_config"].(map[string]any); ok {
		text = tc
	}
	moe, _ := text["enable_moe_block"].(bool)
	num := func(k string) int { v, _ := cfg[k].(float64); return int(v) }
	return family{modelType: t, experts: moe, layers: num("num_hidden_layers"), heads: num("num_attention_heads"),
		nope: num("qk_nope_head_dim"), vdim: num("v_head_dim")}
}

func (f family) glm() bool { return f.modelType == "glm4_moe" || f.modelType == "glm4_moe_lite" }

func (f family) gptoss() bool { return f.modelType == "gpt_oss" }

func (f family) gemma4() bool {
	return f.modelType == "gemma4" || f.modelType == "gemma4_unified" || f.modelType == "gemma4_text"
}

// gemma4Wrapped: a Gemma 4 type whose language model is one part of a multimodal model.
func (f family) gemma4Wrapped() bool { return f.gemma4() && f.modelType != "gemma4_text" }
func (f family) mistral3() bool      { return f.modelType == "mistral3" }

func (f family) gemma3() bool { return f.modelType == "gemma3" }

func (f family) qwen35() bool { return f.modelType == "qwen3_5" || f.modelType == "qwen3_5_moe" }

func (f family) qwen25vl() bool { return f.modelType == "qwen2_5_vl" }

// hybrid: Gated DeltaNet models, whose conv1d and norms mlx-lm rewrites.
func (f family) hybrid() bool { return f.modelType == "qwen3_next" || f.qwen35() }

func (f family) moe() bool {
	return f.modelType == "qwen3_moe" || f.modelType == "qwen3_next" || f.qwen35() || f.glm()
}

// drop reports a tensor the MLX layout leaves out.
func (f family) drop(name string) bool {
	if f.gemma4Wrapped() {
		for _, tower := range []string{"audio_tower.", "embed_audio.", "multi_modal_projector."} {
			if strings.HasPrefix(name, "model."+tower) || strings.HasPrefix(name, tower) {
				return true
			}
		}
	}
	if f.glm() && f.layers > 0 {
		if rest, ok := strings.CutPrefix(name, "model.layers."); ok {
			num, _, _ := strings.Cut(rest, ".")
			if i, err := strconv.Atoi(num); err == nil && i >= f.layers {
				return true // a multi-token prediction layer
			}
		}
	}
	if f.mistral3() {
		for _, p := range []string{"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."} {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
	}
	return f.hybrid() && (strings.HasPrefix(name, "mtp.") || strings.Contains(name, ".mtp."))
}

// rename is a tensor's MLX name.
func (f family) rename(name string) string {
	if f.gemma3() {
		for _, p := range []string{"vision_tower.", "multi_modal_projector."} {
			if rest, ok := strings.CutPrefix(name, "model."+p); ok {
				return p + rest
			}
			if strings.HasPrefix(name, p) {
				return name
			}
		}
	}
	if !f.qwen35() && !f.qwen25vl() && !f.gemma4Wrapped() && !f.mistral3() && !f.gemma3() {
		return name
	}
	if f.qwen25vl() {
		for _, p := range []string{"model.visual.", "visual."} {
			if rest, ok := strings.CutPrefix(name, p); ok {
				return "vision_tower." + rest
			}
		}
		if strings.HasPrefix(name, "vision_tower.") {
			return name
		}
	}
	if f.gemma4Wrapped() {
		for _, p := range []string{"vision_tower.", "embed_vision."} {
			if rest, ok := strings.CutPrefix(name, "model."+p); ok {
				return p + rest
			}
			if strings.HasPrefix(name, p) {
				return name
			}
		}
	}
	if f.qwen35() {
		if rest, ok := strings.CutPrefix(name, "model.visual."); ok {
			return "vision_tower." + rest
		}
		if strings.HasPrefix(name, "vision_tower.") {
			return name
		}
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
	// f32 keeps an unquantized tensor in float32 whatever the model dtype.
	f32 bool
	// mxfp4, when set, gives the tensor already in mxfp4 (OpenAI's checkpoints): the
	// packed codes ([.., out, in/8] words) and the scales ([.., out, in/32] bytes).
	mxfp4 func() (packed, scales []byte)
}

// jobs lists what source tensor n (t) becomes: itself, renamed and reshaped; the stack
// of experts it begins (nothing for the other experts of a stack); or the two halves of
// a fused gate_up_proj.
func (f family) jobs(ck *safetensors.Checkpoint, n string, t *safetensors.Tensor, dt safetensors.DType, stacks map[string][]string) []job {
	all := func(rows, cols int, fn func(r0 int, vals []float32)) { forRows(t, rows, cols, dt, fn) }
	if f.gptoss() {
		if js, ok := f.gptossJobs(ck, n, t, dt); ok {
			return js
		}
	}
	if f.glm() {
		if strings.HasSuffix(n, ".mlp.gate.e_score_correction_bias") {
			exact := func(rows, cols int, fn func(r0 int, vals []float32)) { forRows(t, rows, cols, safetensors.F32, fn) }
			return []job{{out: n, shape: slices.Clone(t.Shape), rows: exact, f32: true}}
		}
		if base, ok := strings.CutSuffix(n, ".self_attn.kv_b_proj.weight"); ok && f.modelType == "glm4_moe_lite" {
			if js, ok := f.splitKVB(base, t, dt); ok {
				return js
			}
		}
	}
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
	if (f.qwen35() || f.qwen25vl()) && n == "model.visual.patch_embed.proj.weight" && len(t.Shape) == 5 ||
		f.qwen25vl() && n == "visual.patch_embed.proj.weight" && len(t.Shape) == 5 {
		return []job{patchEmbedMLX(t, dt)}
	}
	if f.gemma3() && strings.HasSuffix(n, "vision_model.embeddings.patch_embedding.weight") && len(t.Shape) == 4 && t.Shape[1] < t.Shape[3] {
		return []job{conv2dMLX(t, dt, f.rename(n))}
	}
	fused, stacked := ".mlp.experts.", ".mlp.switch_mlp." // qwen3.5's
	if f.gemma4() {
		fused, stacked = ".experts.", ".experts.switch_glu."
	}
	if (f.moe() || f.gemma4()) && len(t.Shape) == 3 {
		if base, ok := strings.CutSuffix(n, fused+"down_proj"); ok {
			return []job{{out: f.rename(base + stacked + "down_proj.weight"), shape: slices.Clone(t.Shape), stacked: true, rows: all}}
		}
		if base, ok := strings.CutSuffix(n, fused+"gate_up_proj"); ok && t.Shape[1]%2 == 0 {
			return splitFused(t, dt, f.rename(base+stacked+"gate_proj.weight"), f.rename(base+stacked+"up_proj.weight"))
		}
	}
	return []job{{out: f.rename(n), shape: f.shape(n, t.Shape), rows: all}}
}

// patchEmbedMLX is Qwen3.5's Conv3d kernel, Hugging Face's [out, channels, temporal,
// patch, patch], in MLX's channels-last [out, temporal, patch, patch, channels].
func patchEmbedMLX(t *safetensors.Tensor, dt safetensors.DType) job {
	O, C, T, H, W := t.Shape[0], t.Shape[1], t.Shape[2], t.Shape[3], t.Shape[4]
	in := C * T * H * W
	return job{out: "vision_tower.patch_embed.proj.weight", shape: []int{O, T, H, W, C},
		rows: func(_, _ int, fn func(r0 int, vals []float32)) {
			src := make([]float32, O*in)
			forRows(t, O, in, dt, func(r0 int, vals []float32) { copy(src[r0*in:], vals) })
			row := make([]float32, C)
			for o := range O {
				for tt := range T {
					for y := range H {
						for x := range W {
							for c := range C {
								row[c] = src[o*in+((c*T+tt)*H+y)*W+x]
							}
							fn(((o*T+tt)*H+y)*W+x, row)
						}
					}
				}
			}
		}}
}

// conv2dMLX is a Conv2d kernel, Hugging Face's [out, channels, kh, kw], in MLX's
// channels-last [out, kh, kw, channels] (a kernel already channels-last has more
// channels than rows, which Gemma 3's 3 channels of 14×14 patches never do).
func conv2dMLX(t *safetensors.Tensor, dt safetensors.DType, out string) job {
	O, C, H, W := t.Shape[0], t.Shape[1], t.Shape[2], t.Shape[3]
	in := C * H * W
	return job{out: out, shape: []int{O, H, W, C},
		rows: func(_, _ int, fn func(r0 int, vals []float32)) {
			src := make([]float32, O*in)
			forRows(t, O, in, dt, func(r0 int, vals []float32) { copy(src[r0*in:], vals) })
			row := make([]float32, C)
			for o := range O {
				for y := range H {
					for x := range W {
						for c := range C {
							row[c] = src[o*in+(c*H+y)*W+x]
						}
						fn((o*H+y)*W+x, row)
					}
				}
			}
		}}
}

// splitFused writes a fused [experts, 2·inter, in] gate_up_proj, the gate first, as the
// stacked gate and up matrices.
func splitFused(t *safetensors.Tensor, dt safetensors.DType, gate, up string) []job {
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
		{out: gate, shape: []int{E, mid, in}, stacked: true, rows: half(false)},
		{out: up, shape: []int{E, mid, in}, stacked: true, rows: half(true)},
	}
}

// splitKVB is glm4_moe_lite's kv_b_proj (t) split per head into embed_q and
// unembed_out (see family); ok is false when its shape does not fit the config.
func (f family) splitKVB(base string, t *safetensors.Tensor, dt safetensors.DType) ([]job, bool) {
	H, nope, v := f.heads, f.nope, f.vdim
	if H <= 0 || nope <= 0 || v <= 0 || len(t.Shape) != 2 || t.Shape[0] != H*(nope+v) {
		return nil, false
	}
	rank := t.Shape[1]
	load := func() []float32 {
		w := make([]float32, t.Shape[0]*rank)
		forRows(t, t.Shape[0], rank, dt, func(r0 int, vals []float32) { copy(w[r0*rank:], vals) })
		return w
	}
	embedQ := func(_, _ int, fn func(r0 int, vals []float32)) {
		w := load()
		row := make([]float32, nope)
		for h := 0; h < H; h++ {
			for x := 0; x < rank; x++ { // row x of head h: column x of its key half
				for d := 0; d < nope; d++ {
					row[d] = w[(h*(nope+v)+d)*rank+x]
				}
				fn(h*rank+x, row)
			}
		}
	}
	unembed := func(_, _ int, fn func(r0 int, vals []float32)) {
		w := load()
		for h := 0; h < H; h++ {
			for d := 0; d < v; d++ {
				fn(h*v+d, w[(h*(nope+v)+nope+d)*rank:][:rank])
			}
		}
	}
	return []job{
		{out: base + ".self_attn.embed_q.weight", shape: []int{H, rank, nope}, stacked: true, rows: embedQ},
		{out: base + ".self_attn.unembed_out.weight", shape: []int{H, v, rank}, stacked: true, rows: unembed},
	}, true
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
	if f.gemma4() && f.experts {
		for _, sfx := range []string{".router.proj", ".mlp.gate_proj", ".mlp.up_proj", ".mlp.down_proj"} {
			if strings.HasSuffix(module, sfx) {
				return 8, 64, true
			}
		}
	}
	if (f.qwen35() || f.qwen25vl()) && strings.HasPrefix(module, "vision_tower.") {
		return 0, 0, true // the vision tower stays in float, as mlx-vlm keeps it
	}
	if f.gemma3() && (strings.HasPrefix(module, "vision_tower.") || strings.HasPrefix(module, "multi_modal_projector.")) {
		return 0, 0, true
	}
	if f.gemma4Wrapped() && (strings.HasPrefix(module, "vision_tower.") || strings.HasPrefix(module, "embed_vision.")) {
		return 0, 0, true // the vision tower and its projector stay in float
	}
	if f.gptoss() && strings.HasSuffix(module, "mlp.router") {
		return 8, 64, true
	}
	if f.glm() && strings.HasSuffix(module, "mlp.gate") {
		return 0, 0, true // mlx-lm's MoEGate is no linear layer: kept in float
	}
	if f.moe() && (strings.HasSuffix(module, "mlp.gate") || (f.hybrid() && strings.HasSuffix(module, "shared_expert_gate"))) {
		return 8, 64, true
	}
	return 0, 0, false
}

// gptossJobs is what gpt-oss's fused expert tensor n becomes (ok false for the others):
// see family. An _scales tensor is written with its _blocks.
func (f family) gptossJobs(ck *safetensors.Checkpoint, n string, t *safetensors.Tensor, dt safetensors.DType) ([]job, bool) {
	i := strings.Index(n, ".mlp.experts.")
	if i < 0 {
		return nil, false
	}
	base, part := n[:i]+".mlp.experts.", n[i+len(".mlp.experts."):]
	all := func(rows, cols int, fn func(r0 int, vals []float32)) { forRows(t, rows, cols, dt, fn) }
	// split gives the gate (even) or up (odd) rows of a [.., 2·inter, ..] layout.
	switch part {
	case "gate_up_proj", "down_proj":
		if len(t.Shape) != 3 {
			return nil, false
		}
		E, in, out := t.Shape[0], t.Shape[1], t.Shape[2] // [experts, in, out]: x·W, transposed
		transposed := func(every, first int) func(rows, cols int, fn func(r0 int, vals []float32)) {
			return func(_, _ int, fn func(r0 int, vals []float32)) {
				for e := 0; e < E; e++ {
					m := make([]float32, in*out) // expert e's [in, out]
					forRowsOf(t, e*in, in, out, dt, func(r0 int, vals []float32) { copy(m[r0*out:], vals) })
					rows := out / every
					buf := make([]float32, rows*in)
					for r := 0; r < rows; r++ {
						for c := 0; c < in; c++ {
							buf[r*in+c] = m[c*out+r*every+first]
						}
					}
					fn(e*rows, buf)
				}
			}
		}
		if part == "down_proj" {
			return []job{{out: base + "down_proj.weight", shape: []int{E, out, in}, stacked: true, rows: transposed(1, 0)}}, true
		}
		return []job{
			{out: base + "gate_proj.weight", shape: []int{E, out / 2, in}, stacked: true, rows: transposed(2, 0)},
			{out: base + "up_proj.weight", shape: []int{E, out / 2, in}, stacked: true, rows: transposed(2, 1)},
		}, true
	case "gate_up_proj_bias":
		E, two := t.Shape[0], t.Shape[len(t.Shape)-1]
		half := func(first int) func(rows, cols int, fn func(r0 int, vals []float32)) {
			return func(_, _ int, fn func(r0 int, vals []float32)) {
				all(E, two, func(r0 int, vals []float32) {
					for r := range len(vals) / two {
						row := make([]float32, two/2)
						for j := range row {
							row[j] = vals[r*two+2*j+first]
						}
						fn(r0+r, row)
					}
				})
			}
		}
		return []job{
			{out: base + "gate_proj.bias", shape: []int{E, two / 2}, rows: half(0)},
			{out: base + "up_proj.bias", shape: []int{E, two / 2}, rows: half(1)},
		}, true
	case "down_proj_bias":
		return []job{{out: base + "down_proj.bias", shape: slices.Clone(t.Shape), rows: all}}, true
	case "gate_up_proj_scales", "down_proj_scales":
		return nil, true // with the blocks
	case "gate_up_proj_blocks", "down_proj_blocks":
		proj := strings.TrimSuffix(part, "_blocks")
		st, ok := ck.Tensor(base + proj + "_scales")
		if !ok || len(t.Shape) != 4 || t.Shape[3] != 16 || t.DType != safetensors.U8 || st.DType != safetensors.U8 {
			return nil, false // Convert reports the unexpected tensor
		}
		E, out, groups := t.Shape[0], t.Shape[1], t.Shape[2]
		// rows picks every-th row from first of each expert's out rows, codes and scales.
		rows := func(every, first int) func() ([]byte, []byte) {
			return func() ([]byte, []byte) {
				n := out / every
				rb, rs := groups*16, groups
				packed, scales := make([]byte, E*n*rb), make([]byte, E*n*rs)
				for e := 0; e < E; e++ {
					for r := 0; r < n; r++ {
						src := e*out + r*every + first
						copy(packed[(e*n+r)*rb:], t.Data[src*rb:(src+1)*rb])
						copy(scales[(e*n+r)*rs:], st.Data[src*rs:(src+1)*rs])
					}
				}
				return packed, scales
			}
		}
		in := groups * 32
		if proj == "down_proj" {
			return []job{{out: base + "down_proj.weight", shape: []int{E, out, in}, stacked: true, mxfp4: rows(1, 0)}}, true
		}
		return []job{
			{out: base + "gate_proj.weight", shape: []int{E, out / 2, in}, stacked: true, mxfp4: rows(2, 0)},
			{out: base + "up_proj.weight", shape: []int{E, out / 2, in}, stacked: true, mxfp4: rows(2, 1)},
		}, true
	}
	return nil, false
}
