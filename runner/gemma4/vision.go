package gemma4

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// Gemma 4's image input (transformers' Gemma4VisionModel and Gemma4MultimodalEmbedder).
// Unlike Gemma 3's SigLIP tower over a fixed 896×896 image, Gemma 4's tower reads an image
// at its own aspect ratio (Gemma4ImageProcessor: a budget of max_soft_tokens tokens, each
// a pooling_kernel_size² window of patch_size² pixels) as rows of patch pixels in (row,
// column, channel) order:
//   - the patch embedding is a linear map without bias of the pixels mapped from [0, 1]
//     to [-1, 1], plus a learned position embedding per axis (position_embedding_table,
//     [2, position_embedding_size, hidden]: row 0 by the patch's column, row 1 by its row);
//   - encoder layers as Gemma 4's text layers: RMSNorms that scale by w before and after
//     attention and MLP; attention in both directions over the image's patches with
//     per-head q/k norms, a value norm without a learned scale, a scale of 1, and 2D RoPE
//     (the first half of each head rotates by the patch's column, the second by its row,
//     each half in the rotate-half layout with head_dim/4 frequencies of theta
//     rope_parameters.rope_theta); a GELU (tanh) gated MLP;
//   - pooling: the mean of each k×k window of patches, times sqrt(hidden_size), row-major
//     over the windows; with standardize, (x − std_bias) · std_scale;
//   - embed_vision: an RMSNorm without a learned scale, then a linear map to the language
//     model's width.
//
// Those rows replace the image's <|image|> tokens unscaled (text embeddings are scaled by
// sqrt(hidden_size)); with use_bidirectional_attention "vision" (the larger models) an
// image's rows attend to each other in both directions in the language model, as Gemma 3's.
// mlx-vlm's conversions keep the tower under vision_tower.* with each linear under
// .linear (Gemma4ClippableLinear) and the projector under embed_vision.*.
const (
	towerPrefix = "vision_tower."
	embedPrefix = "embed_vision."
)

func init() {
	model.RegisterVision("gemma4", towerPrefix)
	model.RegisterVision("gemma4_unified", towerPrefix)
}

// VisionConfig is config.json's vision_config (Gemma4VisionConfig).
type VisionConfig struct {
	Hidden       int                `json:"hidden_size"`
	Intermediate int                `json:"intermediate_size"`
	Layers       int                `json:"num_hidden_layers"`
	Heads        int                `json:"num_attention_heads"`
	KVHeads      int                `json:"num_key_value_heads"`
	HeadDim      int                `json:"head_dim"`
	Patch        int                `json:"patch_size"`
	PosSize      int                `json:"position_embedding_size"`
	Pool         int                `json:"pooling_kernel_size"`
	Eps          float64            `json:"rms_norm_eps"`
	Act          string             `json:"hidden_activation"`
	Standardize  bool               `json:"standardize"`
	Clipped      bool               `json:"use_clipped_linears"`
	Rope         map[string]float64 `json:"-"`
	Theta        float64            `json:"-"`
}

// readVision reads vision_config with Gemma4VisionConfig's defaults for what a config
// saved with only its differences leaves out, and checks that it makes a tower.
func readVision(cfg *model.Config) (VisionConfig, error) {
	vc := VisionConfig{Hidden: 768, Intermediate: 3072, Layers: 16, Heads: 12, HeadDim: 64, Patch: 16, PosSize: 10240,
		Pool: 3, Eps: 1e-6, Act: "gelu_pytorch_tanh", Theta: 100}
	raw, ok := cfg.Raw["vision_config"]
	if !ok {
		return vc, fmt.Errorf("config.json: a checkpoint with a vision tower needs vision_config")
	}
	if err := json.Unmarshal(raw, &vc); err != nil {
		return vc, fmt.Errorf("config.json: vision_config: %w", err)
	}
	var rope struct {
		Params map[string]any `json:"rope_parameters"`
	}
	_ = json.Unmarshal(raw, &rope)
	if t, ok := rope.Params["rope_theta"].(float64); ok {
		vc.Theta = t
	}
	if vc.KVHeads == 0 {
		vc.KVHeads = vc.Heads
	}
	if vc.Hidden <= 0 || vc.Heads <= 0 || vc.KVHeads != vc.Heads || vc.HeadDim <= 0 || vc.HeadDim%4 != 0 || vc.Layers <= 0 ||
		vc.Intermediate <= 0 || vc.Patch <= 0 || vc.Pool <= 0 || vc.PosSize <= 0 || vc.Theta <= 0 {
		return vc, fmt.Errorf("config.json: vision_config %+v is not a usable Gemma 4 tower (as many key/value heads as heads, head_dim a multiple of 4, positive sizes)", vc)
	}
	if vc.Act != "gelu_pytorch_tanh" {
		return vc, fmt.Errorf("config.json: vision_config.hidden_activation %q is not supported (gelu_pytorch_tanh)", vc.Act)
	}
	return vc, nil
}

// Tower is the bound vision tower and projector.
type Tower struct {
	Config     VisionConfig
	InputProj  compute.Weight // patch_embedder.input_proj: hidden × 3·patch²
	PosTable   compute.Weight // position_embedding_table as 2·position_embedding_size rows of hidden
	Layers     []EncoderLayer
	StdBias    []float32 // standardize: std_bias and std_scale; nil without
	StdScale   []float32
	OnesHead   compute.Vector // the value norm's scale (none learned)
	Ones       compute.Vector // embed_vision's norm's scale (none learned)
	Project    compute.Weight // embed_vision.embedding_projection: text hidden × hidden
	processor  *vision.Processor
	imageToken int32
	frame      model.ImageFrame
}

// EncoderLayer is one encoder layer of the tower.
type EncoderLayer struct {
	InputNorm, PostAttnNorm, PreFFNorm, PostFFNorm compute.Vector
	Q, K, V, O                                     ClipLinear
	QNorm, KNorm                                   compute.Vector
	Gate, Up, Down                                 ClipLinear
}

// ClipLinear is Gemma4ClippableLinear: a linear map without bias whose input and output are
// clamped to bounds the checkpoint stores (input_min, input_max, output_min, output_max;
// with use_clipped_linears). An infinite bound clamps nothing and is skipped.
type ClipLinear struct {
	W       compute.Weight
	In, Out [2]float32 // lo, hi
	// ClipIn, ClipOut: some bound of the input or the output is finite.
	ClipIn, ClipOut bool
}

// Forward computes the clamped map of x.
func (l ClipLinear) Forward(c compute.Context, cl compute.ClampContext, x compute.Tensor) compute.Tensor {
	if l.ClipIn {
		x = cl.Clamp(x, l.In[0], l.In[1])
	}
	y := c.Linear(x, l.W)
	if l.ClipOut {
		y = cl.Clamp(y, l.Out[0], l.Out[1])
	}
	return y
}

// Clipped reports whether some bound is finite.
func (l ClipLinear) Clipped() bool { return l.ClipIn || l.ClipOut }

// visionTop is what config.json says about images beside vision_config.
type visionTop struct {
	Image *int32 `json:"image_token_id"`
	BOI   *int32 `json:"boi_token_id"`
	EOI   *int32 `json:"eoi_token_id"`
}

// Gemma4Config's image token ids, for a config that leaves them out.
const (
	defaultImage = 258880
	defaultBOI   = 255999
	defaultEOI   = 258882
)

// newTower binds the tower when the checkpoint has one and the backend runs it; nil
// otherwise (the model then reads text only), also when its linears clip to finite bounds
// (use_clipped_linears) and the backend has no clamp.
func newTower(l *model.Loader) (*Tower, error) {
	if !l.Has(towerPrefix+"patch_embedder.input_proj.weight") ||
		compute.Supports[compute.VisionContext](l.Backend, "the vision tower") != nil ||
		compute.Supports[compute.LinearAttentionContext](l.Backend, "the vision tower's 2D RoPE (column slices)") != nil ||
		compute.Supports[compute.SpanAttentionContext](l.Backend, "attention among an image's tokens") != nil {
		return nil, nil
	}
	vc, err := readVision(l.Config)
	if err != nil {
		return nil, err
	}
	var top visionTop
	raw, _ := json.Marshal(l.Config.Raw)
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	id := func(p *int32, def int32) int32 {
		if p != nil {
			return *p
		}
		return def
	}
	proc, err := vision.LoadProcessor(l.Dir)
	if err != nil {
		return nil, fmt.Errorf("the vision tower's image preprocessing: %w", err)
	}
	if proc.Kind != "gemma4" || proc.Patch != vc.Patch || proc.Merge != vc.Pool {
		return nil, fmt.Errorf("the image processor (%s, patch %d, pooling %d) does not fit the tower (patch_size %d, pooling_kernel_size %d)",
			proc.Kind, proc.Patch, proc.Merge, vc.Patch, vc.Pool)
	}
	t := &Tower{Config: vc, processor: proc,
		imageToken: id(top.Image, defaultImage),
		frame:      model.ImageFrame{Marker: id(top.Image, defaultImage), Open: id(top.BOI, defaultBOI), End: id(top.EOI, defaultEOI)}}
	h, hd, p := vc.Hidden, vc.HeadDim, towerPrefix
	t.InputProj = l.Linear(p+"patch_embedder.input_proj", h, 3*vc.Patch*vc.Patch)
	name := p + "patch_embedder.position_embedding_table"
	tab, ok := l.Tensor(name)
	if !ok {
		return nil, fmt.Errorf("checkpoint has no tensor %q", name)
	}
	pos, err := tab.Float32s()
	if err != nil || len(pos) != 2*vc.PosSize*h {
		return nil, fmt.Errorf("%s: %d values for [2, %d, %d] (%v)", name, len(pos), vc.PosSize, h, err)
	}
	t.PosTable = l.LinearData(name, pos, 2*vc.PosSize, h)
	t.Ones, t.OnesHead = l.Ones(h), l.Ones(hd)
	clipped := false
	lin := func(name string, out, in int) ClipLinear {
		cl := ClipLinear{In: [2]float32{float32(math.Inf(-1)), float32(math.Inf(1))}}
		cl.Out = cl.In
		if l.Has(name + ".linear.weight") {
			cl.W = l.Linear(name+".linear", out, in)
		} else {
			cl.W = l.Linear(name, out, in)
		}
		if !vc.Clipped {
			return cl
		}
		for i, b := range []struct {
			name string
			at   *float32
		}{{"input_min", &cl.In[0]}, {"input_max", &cl.In[1]}, {"output_min", &cl.Out[0]}, {"output_max", &cl.Out[1]}} {
			t, ok := l.Tensor(name + "." + b.name)
			if !ok {
				continue
			}
			v, err := t.Float32s()
			if err != nil || len(v) != 1 {
				l.Fail(fmt.Errorf("%s.%s: not one value (%v)", name, b.name, err))
				return cl
			}
			if !math.IsInf(float64(v[0]), 0) {
				*b.at = v[0]
				if i < 2 {
					cl.ClipIn = true
				} else {
					cl.ClipOut = true
				}
			}
		}
		clipped = clipped || cl.Clipped()
		return cl
	}
	for i := range vc.Layers {
		b := fmt.Sprintf("%sencoder.layers.%d.", p, i)
		t.Layers = append(t.Layers, EncoderLayer{
			InputNorm:    l.Vector(b+"input_layernorm.weight", h),
			PostAttnNorm: l.Vector(b+"post_attention_layernorm.weight", h),
			PreFFNorm:    l.Vector(b+"pre_feedforward_layernorm.weight", h),
			PostFFNorm:   l.Vector(b+"post_feedforward_layernorm.weight", h),
			Q:            lin(b+"self_attn.q_proj", vc.Heads*hd, h),
			K:            lin(b+"self_attn.k_proj", vc.KVHeads*hd, h),
			V:            lin(b+"self_attn.v_proj", vc.KVHeads*hd, h),
			O:            lin(b+"self_attn.o_proj", h, vc.Heads*hd),
			QNorm:        l.Vector(b+"self_attn.q_norm.weight", hd),
			KNorm:        l.Vector(b+"self_attn.k_norm.weight", hd),
			Gate:         lin(b+"mlp.gate_proj", vc.Intermediate, h),
			Up:           lin(b+"mlp.up_proj", vc.Intermediate, h),
			Down:         lin(b+"mlp.down_proj", h, vc.Intermediate),
		})
	}
	if vc.Standardize {
		t.StdBias = l.Floats(p+"std_bias", h)
		t.StdScale = l.Floats(p+"std_scale", h)
	}
	t.Project = l.Linear(embedPrefix+"embedding_projection", l.Config.HiddenSize, h)
	if clipped && compute.Supports[compute.ClampContext](l.Backend, "the vision tower's clipped linears") != nil {
		return nil, l.Err()
	}
	return t, l.Err()
}

// Tokens is how many language-model tokens an image of g (the processor's grid: 1,
// patch rows, patch columns) becomes.
func (t *Tower) tokens(g [3]int) (int, int) { return g[1] / t.Config.Pool, g[2] / t.Config.Pool }

// rows appends an image's patch rows to px in the order that makes pooling a sum of row
// blocks (row m·tokens + w is the patch at offset m, row-major within its window, of
// window w, row-major over the windows), each mapped from [0, 1] to [-1, 1]; and the
// patch's column and row to xs and ys.
func (t *Tower) rows(im *vision.Pixels, px []float32, xs, ys []int32) ([]float32, []int32, []int32) {
	k, gw := t.Config.Pool, im.Grid[2]
	th, tw := t.tokens(im.Grid)
	cols := im.Cols
	for dy := range k {
		for dx := range k {
			for ty := range th {
				for tx := range tw {
					py, pxx := ty*k+dy, tx*k+dx
					src := im.Values[(py*gw+pxx)*cols : (py*gw+pxx+1)*cols]
					for _, v := range src {
						px = append(px, 2*(v-0.5))
					}
					xs, ys = append(xs, int32(pxx)), append(ys, int32(py))
				}
			}
		}
	}
	return px, xs, ys
}

// angles is the rotary table of positions pos: per row, head_dim/4 angles pos·θ^(−4j/head_dim).
func (t *Tower) angles(pos []int32) (cos, sin []float32) {
	q := t.Config.HeadDim / 4
	cos, sin = make([]float32, 0, len(pos)*q), make([]float32, 0, len(pos)*q)
	inv := make([]float32, q)
	for j := range inv {
		inv[j] = float32(1 / math.Pow(t.Config.Theta, float64(2*j)/float64(t.Config.HeadDim/2)))
	}
	for _, p := range pos {
		for j := range q {
			a := float32(p) * inv[j]
			cos, sin = append(cos, float32(math.Cos(float64(a)))), append(sin, float32(math.Sin(float64(a))))
		}
	}
	return cos, sin
}

// rope2D rotates each head's first half by the column angles and its second half by the
// row angles (transformers' apply_multidimensional_rope over two axes).
func rope2D(c compute.Context, vc compute.VisionContext, lc compute.LinearAttentionContext, x compute.Tensor, heads, hd int, cx, sx, cy, sy compute.Tensor) compute.Tensor {
	half := hd / 2
	xs, ys := make([]compute.Tensor, heads), make([]compute.Tensor, heads)
	for h := range heads {
		xs[h], ys[h] = lc.Cols(x, h*hd, half), lc.Cols(x, h*hd+half, half)
	}
	rx := vc.RoPERows(lc.ConcatCols(xs...), cx, sx, half)
	ry := vc.RoPERows(lc.ConcatCols(ys...), cy, sy, half)
	parts := make([]compute.Tensor, 0, 2*heads)
	for h := range heads {
		parts = append(parts, lc.Cols(rx, h*half, half), lc.Cols(ry, h*half, half))
	}
	return lc.ConcatCols(parts...)
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
	lc, ok := compute.Ext[compute.LinearAttentionContext](c)
	if !ok {
		return compute.Unsupported(c, "the vision tower's 2D RoPE (column slices)"), nil
	}
	cl, _ := compute.Ext[compute.ClampContext](c) // newTower checked it when a linear clips
	cfg := t.Config
	in := 3 * cfg.Patch * cfg.Patch
	var px []float32
	var xs, ys []int32
	var blocks, toks []int
	var grids [][3]int
	for _, im := range images {
		th, tw := t.tokens(im.Grid)
		if im.Cols != in || im.Grid[0] != 1 || im.Rows != im.Grid[1]*im.Grid[2] || th*cfg.Pool != im.Grid[1] || tw*cfg.Pool != im.Grid[2] ||
			im.Grid[1] > cfg.PosSize || im.Grid[2] > cfg.PosSize || len(im.Values) != im.Rows*im.Cols {
			return compute.Fail(c, fmt.Errorf("gemma4: an image of %d×%d patches of %d values does not fit the tower (%d values a patch, sides a multiple of %d, at most %d)",
				im.Grid[2], im.Grid[1], im.Cols, in, cfg.Pool, cfg.PosSize)), nil
		}
		px, xs, ys = t.rows(im, px, xs, ys)
		blocks, toks = append(blocks, im.Rows), append(toks, th*tw)
		grids = append(grids, [3]int{1, th, tw})
	}
	rows := len(xs)
	bc, segmented := compute.Ext[compute.BatchContext](c)
	if segmented {
		bc.Segments(blocks)
	}
	ids := make([]int32, 2*rows)
	for i := range rows {
		ids[i], ids[rows+i] = xs[i], int32(cfg.PosSize)+ys[i]
	}
	pe := c.Embed(t.PosTable, ids)
	h := c.Add(c.Linear(vc.Input(px, rows, in), t.InputProj), c.Add(c.Rows(pe, 0, rows), c.Rows(pe, rows, rows)))
	cxs, sxs := t.angles(xs)
	cys, sys := t.angles(ys)
	q4 := cfg.HeadDim / 4
	cx, sx, cy, sy := vc.Input(cxs, rows, q4), vc.Input(sxs, rows, q4), vc.Input(cys, rows, q4), vc.Input(sys, rows, q4)
	keep := func(ts ...compute.Tensor) { compute.Free(c, append(ts, cx, sx, cy, sy)...) }
	keep(h)
	eps := float32(cfg.Eps)
	hd, heads := cfg.HeadDim, cfg.Heads
	ones := t.OnesHead
	perHead := func(x compute.Tensor, w compute.Vector) compute.Tensor {
		return c.Reshape(c.RMSNorm(c.Reshape(x, rows*heads, hd), w, eps), rows, heads*hd)
	}
	for _, l := range t.Layers {
		// The 2D RoPE's column slices are freed as each of q and k is done.
		x := c.RMSNorm(h, l.InputNorm, eps)
		q := rope2D(c, vc, lc, perHead(l.Q.Forward(c, cl, x), l.QNorm), heads, hd, cx, sx, cy, sy)
		keep(h, x, q)
		k := rope2D(c, vc, lc, perHead(l.K.Forward(c, cl, x), l.KNorm), heads, hd, cx, sx, cy, sy)
		keep(h, x, q, k)
		v := perHead(l.V.Forward(c, cl, x), ones)
		keep(h, q, k, v)
		a := vc.BlockAttention(q, k, v, heads, 1, blocks)
		keep(h, a)
		h = c.Add(h, c.RMSNorm(l.O.Forward(c, cl, a), l.PostAttnNorm, eps))
		keep(h)
		x = c.RMSNorm(h, l.PreFFNorm, eps)
		g := ac.GeGLU(l.Gate.Forward(c, cl, x), l.Up.Forward(c, cl, x))
		keep(h, g)
		h = c.Add(h, c.RMSNorm(l.Down.Forward(c, cl, g), l.PostFFNorm, eps))
		keep(h)
	}
	// Pooling: a window's mean is the sum of its k² row blocks (rows), over k², then scaled
	// by sqrt(hidden_size).
	k2 := cfg.Pool * cfg.Pool
	scale := float32(math.Sqrt(float64(cfg.Hidden))) / float32(k2)
	var parts []compute.Tensor
	off := 0
	for i, n := range toks {
		sum := c.Rows(h, off, n)
		for m := 1; m < k2; m++ {
			sum = c.Add(sum, c.Rows(h, off+m*n, n))
		}
		parts = append(parts, ac.Scale(sum, scale))
		off += blocks[i]
	}
	pooled := parts[0]
	if len(parts) > 1 {
		if !segmented {
			return compute.Unsupported(c, "several images in one pass"), nil
		}
		pooled = bc.ConcatRows(parts...)
	}
	if segmented {
		bc.Segments(toks)
	}
	total := 0
	for _, n := range toks {
		total += n
	}
	if t.StdBias != nil { // (x − bias) · scale as x · scale + (−bias · scale), row by row
		mul, add := make([]float32, total*cfg.Hidden), make([]float32, total*cfg.Hidden)
		for r := range total {
			for j := range cfg.Hidden {
				mul[r*cfg.Hidden+j] = t.StdScale[j]
				add[r*cfg.Hidden+j] = -t.StdBias[j] * t.StdScale[j]
			}
		}
		pooled = c.Add(c.Mul(pooled, vc.Input(mul, total, cfg.Hidden)), vc.Input(add, total, cfg.Hidden))
	}
	compute.Free(c, pooled)
	return c.Linear(c.RMSNorm(pooled, t.Ones, eps), t.Project), grids
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

// ImageTokenID implements model.VisionNetwork: <|image|>.
func (n *Network) ImageTokenID() int32 {
	if n.Tower == nil {
		return -1
	}
	return n.Tower.imageToken
}

// ImageFrame implements model.ImageFramer: Gemma4Processor writes each image the chat
// template rendered as <|image> (boi), the image's tokens, <image|> (eoi), nothing around them.
func (n *Network) ImageFrame() model.ImageFrame {
	if n.Tower == nil {
		return model.ImageFrame{Marker: -1, End: -1}
	}
	return n.Tower.frame
}
