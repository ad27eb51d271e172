package gemma3

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// Gemma 3's image input (transformers' Gemma3ForConditionalGeneration): a SigLIP vision
// tower reads an image resized to image_size × image_size (Gemma3ImageProcessor) as
// patches of patch_size² pixels: the patch embedding (a Conv2d whose stride is its
// kernel: a linear map of each flattened patch), plus a learned position embedding per
// patch, then encoder layers (LayerNorm, attention over all the image's patches in both
// directions, LayerNorm, a gelu_pytorch_tanh MLP), and a post LayerNorm. The multimodal
// projector averages the patches over square windows down to mm_tokens_per_image tokens,
// normalises each with Gemma's RMSNorm (scale 1 + w) and projects it to the language
// model's width. Those rows replace the image's <image_soft_token>s, unscaled (text
// embeddings are scaled by sqrt(hidden_size)), and in the language model an image's rows
// attend to each other in both directions (model.Batch.ImageAttention), on sliding-window
// layers too. mlx-vlm's conversions keep the tower under vision_tower.vision_model.* and
// the projector under multi_modal_projector.*.
const (
	towerPrefix     = "vision_tower.vision_model."
	projectorPrefix = "multi_modal_projector."
)

func init() { model.RegisterVision("gemma3", "vision_tower.") }

// VisionConfig is config.json's vision_config (a SigLIP vision model).
type VisionConfig struct {
	Hidden       int     `json:"hidden_size"`
	Intermediate int     `json:"intermediate_size"`
	Layers       int     `json:"num_hidden_layers"`
	Heads        int     `json:"num_attention_heads"`
	Channels     int     `json:"num_channels"`
	ImageSize    int     `json:"image_size"`
	Patch        int     `json:"patch_size"`
	Eps          float64 `json:"layer_norm_eps"`
	Act          string  `json:"hidden_act"`
}

// Tower is the bound vision tower and projector.
type Tower struct {
	Config     VisionConfig
	PatchEmbed compute.Weight // hidden × channels·patch·patch, with the conv's bias
	PosEmbed   []float32      // patches × hidden, on the host: added in the tower's row order
	Layers     []EncoderLayer
	PostNorm   [2]compute.Vector // weight, bias
	SoftNorm   compute.Vector    // mm_soft_emb_norm: Gemma's RMSNorm (1 + w)
	Project    compute.Weight    // text hidden × vision hidden (mm_input_projection_weight transposed)
	Tokens     int               // mm_tokens_per_image
	processor  *vision.Processor
	imageToken int32
	frame      model.ImageFrame
}

// EncoderLayer is one SigLIP encoder layer.
type EncoderLayer struct {
	Norm1, Norm2 [2]compute.Vector
	Q, K, V, Out compute.Weight
	FC1, FC2     compute.Weight
}

// visionTop is what config.json says about images beside vision_config (transformers 4
// and 5 spell the token ids either way).
type visionTop struct {
	Vision     *VisionConfig `json:"vision_config"`
	Tokens     int           `json:"mm_tokens_per_image"`
	ImageIndex *int32        `json:"image_token_index"`
	ImageID    *int32        `json:"image_token_id"`
	BOIIndex   *int32        `json:"boi_token_index"`
	BOIID      *int32        `json:"boi_token_id"`
	EOIIndex   *int32        `json:"eoi_token_index"`
	EOIID      *int32        `json:"eoi_token_id"`
}

func first(a, b *int32) (int32, bool) {
	switch {
	case a != nil:
		return *a, true
	case b != nil:
		return *b, true
	}
	return 0, false
}

// newTower binds the tower when the checkpoint has one and the backend runs it (the
// tower's operations and attention among an image's tokens); nil otherwise (the model
// then reads text only).
func newTower(l *model.Loader) (*Tower, error) {
	if !l.Has(towerPrefix+"embeddings.patch_embedding.weight") ||
		compute.Supports[compute.VisionContext](l.Backend, "the vision tower") != nil ||
		compute.Supports[compute.SpanAttentionContext](l.Backend, "attention among an image's tokens") != nil {
		return nil, nil
	}
	var top visionTop
	raw, _ := json.Marshal(l.Config.Raw)
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	image, okImage := first(top.ImageIndex, top.ImageID)
	boi, okBOI := first(top.BOIIndex, top.BOIID)
	eoi, okEOI := first(top.EOIIndex, top.EOIID)
	if top.Vision == nil || !okImage || !okBOI || !okEOI {
		return nil, fmt.Errorf("config.json: a checkpoint with a vision tower needs vision_config, image_token_index, boi_token_index and eoi_token_index")
	}
	vc := *top.Vision
	if vc.Channels == 0 {
		vc.Channels = 3
	}
	if vc.Eps == 0 {
		vc.Eps = 1e-6 // SiglipVisionConfig's default
	}
	if vc.Act == "" {
		vc.Act = "gelu_pytorch_tanh"
	}
	if top.Tokens == 0 {
		top.Tokens = 256 // Gemma3Config's default
	}
	side := int(math.Round(math.Sqrt(float64(top.Tokens))))
	if vc.Hidden <= 0 || vc.Heads <= 0 || vc.Hidden%vc.Heads != 0 || vc.Layers <= 0 || vc.Intermediate <= 0 || vc.Patch <= 0 ||
		vc.ImageSize%vc.Patch != 0 || side*side != top.Tokens || (vc.ImageSize/vc.Patch)%side != 0 {
		return nil, fmt.Errorf("config.json: vision_config %+v with mm_tokens_per_image %d is not a usable Gemma 3 tower (heads dividing hidden_size, patch_size dividing image_size, a square number of tokens whose side divides the patches per side)", vc, top.Tokens)
	}
	if vc.Act != "gelu_pytorch_tanh" && vc.Act != "gelu" {
		return nil, fmt.Errorf("config.json: vision_config.hidden_act %q is not supported (gelu_pytorch_tanh, gelu)", vc.Act)
	}
	proc, err := vision.LoadProcessor(l.Dir)
	if err != nil {
		return nil, fmt.Errorf("the vision tower's image preprocessing: %w", err)
	}
	if proc.Kind != "fixed" || proc.Width != vc.ImageSize || proc.Height != vc.ImageSize {
		return nil, fmt.Errorf("preprocessor_config.json resizes to %d×%d (%s), the tower reads %d×%d", proc.Width, proc.Height, proc.Kind, vc.ImageSize, vc.ImageSize)
	}
	proc.Tokens = top.Tokens
	t := &Tower{Config: vc, Tokens: top.Tokens, processor: proc, imageToken: image,
		frame: model.ImageFrame{Marker: boi, End: eoi, Before: "\n\n", After: "\n\n"}}
	p, h := towerPrefix, vc.Hidden
	in := vc.Channels * vc.Patch * vc.Patch
	patches := (vc.ImageSize / vc.Patch) * (vc.ImageSize / vc.Patch)
	t.PatchEmbed = l.LinearData(p+"embeddings.patch_embedding", patchKernel(l, p+"embeddings.patch_embedding.weight", vc), h, in)
	if t.PosEmbed, err = floats(l, p+"embeddings.position_embedding.weight", patches*h); err != nil {
		return nil, err
	}
	norm := func(name string) [2]compute.Vector {
		return [2]compute.Vector{l.Vector(name+".weight", h), l.Vector(name+".bias", h)}
	}
	for i := range vc.Layers {
		b := fmt.Sprintf("%sencoder.layers.%d.", p, i)
		t.Layers = append(t.Layers, EncoderLayer{
			Norm1: norm(b + "layer_norm1"), Norm2: norm(b + "layer_norm2"),
			Q:   l.Linear(b+"self_attn.q_proj", h, h),
			K:   l.Linear(b+"self_attn.k_proj", h, h),
			V:   l.Linear(b+"self_attn.v_proj", h, h),
			Out: l.Linear(b+"self_attn.out_proj", h, h),
			FC1: l.Linear(b+"mlp.fc1", vc.Intermediate, h),
			FC2: l.Linear(b+"mlp.fc2", h, vc.Intermediate),
		})
	}
	t.PostNorm = norm(p + "post_layernorm")
	t.SoftNorm = l.Vector(projectorPrefix+"mm_soft_emb_norm.weight", h)
	text := l.Config.HiddenSize
	w, err := floats(l, projectorPrefix+"mm_input_projection_weight", h*text)
	if err != nil {
		return nil, err
	}
	wt := make([]float32, len(w)) // [vision hidden, text hidden] as stored; a Linear is out × in
	for i := range h {
		for j := range text {
			wt[j*h+i] = w[i*text+j]
		}
	}
	t.Project = l.LinearData(projectorPrefix+"mm_input_projection", wt, text, h)
	return t, l.Err()
}

// floats reads tensor name (n values) to the host as float32.
func floats(l *model.Loader, name string, n int) ([]float32, error) {
	t, ok := l.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint has no tensor %q", name)
	}
	v, err := t.Float32s()
	if err != nil || len(v) != n {
		return nil, fmt.Errorf("%s: %d values for %d (%v)", name, len(v), n, err)
	}
	return v, nil
}

// patchKernel reads the Conv2d kernel as an hidden × (channels·patch·patch) matrix in
// the order [channel, row, column]: from Hugging Face's [out, channels, patch, patch] as
// it is, from MLX's channels-last [out, patch, patch, channels] rearranged.
func patchKernel(l *model.Loader, name string, vc VisionConfig) []float32 {
	t, ok := l.Tensor(name)
	if !ok {
		l.Fail(fmt.Errorf("checkpoint has no tensor %q", name))
		return nil
	}
	v, err := t.Float32s()
	if err != nil {
		l.Fail(fmt.Errorf("%s: %w", name, err))
		return nil
	}
	C, P, O := vc.Channels, vc.Patch, vc.Hidden
	sh := t.Shape
	switch {
	case len(sh) == 4 && sh[0] == O && sh[1] == C && sh[2] == P && sh[3] == P:
		return v
	case len(sh) == 4 && sh[0] == O && sh[1] == P && sh[2] == P && sh[3] == C:
		out := make([]float32, len(v))
		in := C * P * P
		for o := range O {
			for c := range C {
				for y := range P {
					for x := range P {
						out[o*in+(c*P+y)*P+x] = v[o*in+(y*P+x)*C+c]
					}
				}
			}
		}
		return out
	}
	l.Fail(fmt.Errorf("%s has shape %v: want [%d, %d, %d, %d] or MLX's [%d, %d, %d, %d]", name, sh, O, C, P, P, O, P, P, C))
	return nil
}

// pool is the side of the projector's square pooling windows, in patches.
func (t *Tower) pool() int {
	return (t.Config.ImageSize / t.Config.Patch) / int(math.Round(math.Sqrt(float64(t.Tokens))))
}

// patchRows cuts a channel-first image into the tower's rows, in the order that makes the
// projector's pooling a sum of row blocks: row m·tokens + t is the patch at offset m
// (row-major within a pooling window) of the window of token t (row-major over the
// windows). Each row is the patch's pixels as [channel, row, column]. It also returns the
// position embedding of each row (the patch's index row-major over the image's grid).
func (t *Tower) patchRows(img []float32) (rows, pos []float32) {
	vc := t.Config
	S, P, C, k := vc.ImageSize, vc.Patch, vc.Channels, t.pool()
	side := S / P / k // tokens per side
	in, h := C*P*P, vc.Hidden
	n := (S / P) * (S / P)
	rows, pos = make([]float32, 0, n*in), make([]float32, 0, n*h)
	for dy := range k {
		for dx := range k {
			for ty := range side {
				for tx := range side {
					py, px := ty*k+dy, tx*k+dx
					for c := range C {
						for y := range P {
							off := c*S*S + (py*P+y)*S + px*P
							rows = append(rows, img[off:off+P]...)
						}
					}
					g := py*(S/P) + px
					pos = append(pos, t.PosEmbed[g*h:(g+1)*h]...)
				}
			}
		}
	}
	return rows, pos
}

// Encode runs the tower and projector over images (each its own attention block) and
// returns their tokens, image after image, and each image's grid of tokens.
func (t *Tower) Encode(c compute.Context, images []*vision.Pixels) (compute.Tensor, [][3]int) {
	vc, ok := compute.Ext[compute.VisionContext](c)
	if !ok {
		return compute.Unsupported(c, "the vision tower"), nil
	}
	ac, ok := compute.Ext[compute.ActivationContext](c)
	if !ok {
		return compute.Unsupported(c, "Gemma's norms"), nil
	}
	cfg := t.Config
	S, P := cfg.ImageSize, cfg.Patch
	n, in := (S/P)*(S/P), cfg.Channels*P*P
	var px, pos []float32
	var blocks []int
	var grids [][3]int
	side := S / P / t.pool()
	for _, im := range images {
		if im.Rows != 1 || im.Cols != cfg.Channels*S*S {
			return compute.Fail(c, fmt.Errorf("gemma3: an image of %d values does not fit the tower's %d×%d×%d", len(im.Values), cfg.Channels, S, S)), nil
		}
		r, p := t.patchRows(im.Values)
		px, pos = append(px, r...), append(pos, p...)
		blocks = append(blocks, n)
		grids = append(grids, [3]int{1, side, side})
	}
	rows := len(blocks) * n
	// Each image's products are computed as they would be with it alone (a backend whose
	// arithmetic depends on a product's row count), so that batched images encode as each
	// does by itself.
	bc, segmented := compute.Ext[compute.BatchContext](c)
	if segmented {
		bc.Segments(blocks)
	}
	h := c.Add(c.Linear(vc.Input(px, rows, in), t.PatchEmbed), vc.Input(pos, rows, cfg.Hidden))
	tanh := cfg.Act != "gelu"
	eps := float32(cfg.Eps)
	scale := float32(1 / math.Sqrt(float64(cfg.Hidden/cfg.Heads)))
	for _, l := range t.Layers {
		x := vc.LayerNorm(h, l.Norm1[0], l.Norm1[1], eps)
		a := vc.BlockAttention(c.Linear(x, l.Q), c.Linear(x, l.K), c.Linear(x, l.V), cfg.Heads, scale, blocks)
		h = c.Add(h, c.Linear(a, l.Out))
		x = vc.LayerNorm(h, l.Norm2[0], l.Norm2[1], eps)
		h = c.Add(h, c.Linear(vc.GELU(c.Linear(x, l.FC1), tanh), l.FC2))
		compute.Free(c, h)
	}
	h = vc.LayerNorm(h, t.PostNorm[0], t.PostNorm[1], eps)
	// Average pooling: the rows of one window offset are a block of tokens rows (patchRows),
	// so a window's mean is the sum of the blocks, in the window's row-major order, over k².
	k2 := t.pool() * t.pool()
	var parts []compute.Tensor
	for i := range images {
		sum := c.Rows(h, i*n, t.Tokens)
		for m := 1; m < k2; m++ {
			sum = c.Add(sum, c.Rows(h, i*n+m*t.Tokens, t.Tokens))
		}
		parts = append(parts, ac.Scale(sum, 1/float32(k2)))
	}
	pooled := parts[0]
	if len(parts) > 1 {
		if !segmented {
			return compute.Unsupported(c, "several images in one pass"), nil
		}
		pooled = bc.ConcatRows(parts...)
	}
	if segmented {
		tok := make([]int, len(images))
		for i := range tok {
			tok[i] = t.Tokens
		}
		bc.Segments(tok)
	}
	return c.Linear(ac.RMSNormOffset(pooled, t.SoftNorm, 1, eps), t.Project), grids
}

// Processor implements model.VisionNetwork: nil without a tower.
func (n *Network) Processor() *vision.Processor {
	if n.Tower == nil {
		return nil
	}
	return n.Tower.processor
}

// EncodeImages implements model.VisionNetwork.
func (n *Network) EncodeImages(c compute.Context, images []*vision.Pixels) (compute.Tensor, [][3]int) {
	if n.Tower == nil {
		return compute.Unsupported(c, "images (the checkpoint has no vision tower)"), nil
	}
	return n.Tower.Encode(c, images)
}

// ImageTokenID implements model.VisionNetwork: <image_soft_token>.
func (n *Network) ImageTokenID() int32 {
	if n.Tower == nil {
		return -1
	}
	return n.Tower.imageToken
}

// ImageFrame implements model.ImageFramer: Gemma3Processor writes each <start_of_image>
// the chat template rendered as "\n\n<start_of_image>", the image's tokens,
// "<end_of_image>\n\n".
func (n *Network) ImageFrame() model.ImageFrame {
	if n.Tower == nil {
		return model.ImageFrame{Marker: -1, End: -1}
	}
	return n.Tower.frame
}
