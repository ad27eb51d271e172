package qwen25vl

import (
	"encoding/json"
	"fmt"

	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/llama"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// Qwen2.5-VL's language model is Qwen2's decoder (biases on q, k and v) whose rotary
// positions are M-RoPE: mrope_section splits the frequencies into contiguous runs for
// time, height and width, which for text are all the token's position and for an
// image's tokens its row and column in the merged grid (runner/model's Media, which also
// keeps the rope delta for the tokens after). mlx-vlm's conversions keep the language
// model under language_model. and the tower under vision_tower.; the tower is read from
// that layout only (a Hugging Face checkpoint's visual.* is left out: it reads text).
const towerPrefix = "vision_tower."

func init() {
	model.Register("qwen2_5_vl", New)
	model.RegisterVision("qwen2_5_vl", towerPrefix)
}

// Network is the language model with its tower (nil when the checkpoint has none).
type Network struct {
	*llama.Decoder
	Tower      *Tower
	processor  *vision.Processor
	imageToken int32
}

// Attention is Qwen2's attention with M-RoPE.
type Attention struct {
	*llama.Attention
	MRoPE *compute.MRoPE
}

// Forward implements llama.Mixer.
func (a *Attention) Forward(c compute.Context, x compute.Tensor, b *model.Batch, layer int) compute.Tensor {
	q, k, v := a.QKV(c, x)
	q = b.MRoPE(c, q, a.RoPE, a.MRoPE, a.HeadDim)
	k = b.MRoPE(c, k, a.RoPE, a.MRoPE, a.HeadDim)
	return c.Linear(b.Attention(c, q, k, v, layer, a.Heads, llama.Scale(a.HeadDim)), a.O)
}

// New binds a Qwen2.5-VL checkpoint.
func New(l *model.Loader) (model.Network, error) {
	cfg := l.Config
	if sw := string(cfg.Raw["use_sliding_window"]); sw == "true" {
		return nil, fmt.Errorf("qwen2_5_vl with use_sliding_window is not supported")
	}
	rope, err := cfg.RoPE()
	if err != nil {
		return nil, err
	}
	mr, err := readMRoPE(cfg, rope)
	if err != nil {
		return nil, err
	}
	base, head := "model.", "lm_head"
	switch {
	case l.Has("language_model.model.embed_tokens.weight"):
		base, head = "language_model.model.", "language_model.lm_head"
	case l.Has("model.language_model.embed_tokens.weight"):
		base = "model.language_model."
	}
	d := llama.NewDecoderAt(l, base, head, func(p string) llama.Mixer {
		for _, proj := range []string{"q_proj", "k_proj", "v_proj"} {
			if !l.Has(p + proj + ".bias") {
				l.Fail(fmt.Errorf("qwen2_5_vl layer %s has no %s.bias", p, proj))
			}
		}
		return &Attention{Attention: llama.NewAttention(l, p, rope), MRoPE: mr}
	})
	if err := l.Err(); err != nil {
		return nil, err
	}
	n := &Network{Decoder: d, imageToken: -1}
	if err := n.bindTower(l); err != nil {
		return nil, err
	}
	return n, nil
}

// readMRoPE reads mrope_section (rope_scaling or rope_parameters): three contiguous runs
// covering the rotary frequencies.
func readMRoPE(cfg *model.Config, rope *compute.RoPE) (*compute.MRoPE, error) {
	for _, key := range []string{"rope_parameters", "rope_scaling"} {
		var p struct {
			Section []int `json:"mrope_section"`
		}
		if raw, ok := cfg.Raw[key]; ok && json.Unmarshal(raw, &p) == nil && len(p.Section) > 0 {
			if len(p.Section) != 3 || p.Section[0]+p.Section[1]+p.Section[2] != rope.Dims/2 {
				return nil, fmt.Errorf("config.json: %s.mrope_section %v: want three sections covering the %d rotary frequencies", key, p.Section, rope.Dims/2)
			}
			return &compute.MRoPE{Section: [3]int(p.Section)}, nil
		}
	}
	return nil, fmt.Errorf("config.json: qwen2_5_vl needs rope_scaling.mrope_section")
}

// bindTower binds the tower when the checkpoint has one and the backend runs it.
func (n *Network) bindTower(l *model.Loader) error {
	if !l.Has(towerPrefix+"patch_embed.proj.weight") || compute.Supports[compute.VisionContext](l.Backend, "the vision tower") != nil ||
		compute.Supports[compute.BatchContext](l.Backend, "the vision tower") != nil {
		return nil
	}
	var top struct {
		Vision     *VisionConfig `json:"vision_config"`
		ImageToken *int32        `json:"image_token_id"`
	}
	raw, _ := json.Marshal(l.Config.Raw)
	if err := json.Unmarshal(raw, &top); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	if top.Vision == nil || top.ImageToken == nil {
		return fmt.Errorf("config.json: a checkpoint with a vision tower needs vision_config and image_token_id")
	}
	vc := *top.Vision
	if vc.InChannels == 0 {
		vc.InChannels = 3
	}
	if vc.Act == "" {
		vc.Act = "silu"
	}
	if err := vc.check(l.Config.HiddenSize); err != nil {
		return err
	}
	proc, err := vision.LoadProcessor(l.Dir)
	if err != nil {
		return fmt.Errorf("the vision tower's image preprocessing: %w", err)
	}
	if proc.Kind != "qwen" || proc.Patch != vc.Patch || proc.Merge != vc.Merge || proc.TemporalPatch != vc.Temporal {
		return fmt.Errorf("preprocessor_config.json (patch %d, merge %d, temporal %d) does not match vision_config (patch %d, merge %d, temporal %d)",
			proc.Patch, proc.Merge, proc.TemporalPatch, vc.Patch, vc.Merge, vc.Temporal)
	}
	t := &Tower{Config: vc}
	p, h := towerPrefix, vc.Hidden
	in := vc.InChannels * vc.Temporal * vc.Patch * vc.Patch
	t.PatchEmbed = l.LinearData(p+"patch_embed.proj", l.PatchKernel(p+"patch_embed.proj.weight", h, vc.InChannels, vc.Temporal, vc.Patch), h, in)
	for i := range vc.Depth {
		b := fmt.Sprintf("%sblocks.%d.", p, i)
		t.Blocks = append(t.Blocks, VisionBlock{
			Norm1: l.Vector(b+"norm1.weight", h), Norm2: l.Vector(b+"norm2.weight", h),
			Q:    l.LinearRows(b+"attn.qkv", "q", 0, h, h),
			K:    l.LinearRows(b+"attn.qkv", "k", h, h, h),
			V:    l.LinearRows(b+"attn.qkv", "v", 2*h, h, h),
			Proj: l.Linear(b+"attn.proj", h, h),
			Gate: l.Linear(b+"mlp.gate_proj", vc.Intermediate, h),
			Up:   l.Linear(b+"mlp.up_proj", vc.Intermediate, h),
			Down: l.Linear(b+"mlp.down_proj", h, vc.Intermediate),
		})
	}
	m := h * vc.Merge * vc.Merge
	t.MergerNorm = l.Vector(p+"merger.ln_q.weight", h)
	t.MergerFC1 = l.Linear(p+"merger.mlp.0", m, m)
	t.MergerFC2 = l.Linear(p+"merger.mlp.2", vc.Out, m)
	if err := l.Err(); err != nil {
		return err
	}
	t.init()
	n.Tower, n.processor, n.imageToken = t, proc, *top.ImageToken
	return nil
}

// Processor implements model.VisionNetwork: nil without a tower.
func (n *Network) Processor() *vision.Processor { return n.processor }

// EncodeImages implements model.VisionNetwork.
func (n *Network) EncodeImages(c compute.Context, images []*vision.Pixels) (compute.Tensor, [][3]int) {
	if n.Tower == nil {
		return compute.Unsupported(c, "images (the checkpoint has no vision tower)"), nil
	}
	return n.Tower.Encode(c, images)
}

// ImageTokenID implements model.VisionNetwork.
func (n *Network) ImageTokenID() int32 { return n.imageToken }
