package qwen3next

import (
	"encoding/json"
	"fmt"
	"math"

	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// Qwen3.5/3.6's vision tower (transformers' Qwen3VLVisionModel without DeepStack): the
// patches of an image (channels × temporal_patch_size × patch × patch values each, in the
// processor's 2×2-group order) go through the patch embedding (a Conv3d whose stride is
// its kernel: a linear map of each flattened patch), plus learned position embeddings
// interpolated bilinearly from a square grid to the image's, then ViT blocks (LayerNorm,
// attention over the image's own patches with 2D RoPE, LayerNorm, GELU MLP), and the
// merger: a LayerNorm, then each 2×2 group's four rows side by side through two linears
// to the language model's hidden size. mlx-vlm's conversions keep it under vision_tower.
const towerPrefix = "vision_tower."

func init() {
	model.RegisterVision("qwen3_5", towerPrefix)
	model.RegisterVision("qwen3_5_moe", towerPrefix)
}

// VisionConfig is config.json's vision_config.
type VisionConfig struct {
	Depth        int    `json:"depth"`
	Hidden       int    `json:"hidden_size"`
	Act          string `json:"hidden_act"`
	Intermediate int    `json:"intermediate_size"`
	Heads        int    `json:"num_heads"`
	InChannels   int    `json:"in_channels"`
	Patch        int    `json:"patch_size"`
	Merge        int    `json:"spatial_merge_size"`
	Temporal     int    `json:"temporal_patch_size"`
	Out          int    `json:"out_hidden_size"`
	NumPositions int    `json:"num_position_embeddings"`
}

// Tower is the bound vision tower.
type Tower struct {
	Config     VisionConfig
	PatchEmbed compute.Weight // hidden × channels·temporal·patch·patch
	PosEmbed   []float32      // NumPositions × hidden, on the host: interpolated per image
	Blocks     []VisionBlock
	MergerNorm [2]compute.Vector // weight, bias
	MergerFC1  compute.Weight
	MergerFC2  compute.Weight
	rope       *compute.RoPE // the 2D rotary frequencies: head_dim/4 of them, for rows and for columns
	processor  *vision.Processor
	imageToken int32
}

// VisionBlock is one ViT block.
type VisionBlock struct {
	Norm1, Norm2 [2]compute.Vector
	Q, K, V      compute.Weight // attn.qkv's three parts
	Proj         compute.Weight
	FC1, FC2     compute.Weight
}

// visionConfig reads and checks config.json's vision_config and image_token_id.
func visionConfig(cfg *model.Config) (VisionConfig, int32, error) {
	var top struct {
		Vision     *VisionConfig `json:"vision_config"`
		ImageToken *int32        `json:"image_token_id"`
	}
	raw, _ := json.Marshal(cfg.Raw)
	if err := json.Unmarshal(raw, &top); err != nil {
		return VisionConfig{}, 0, fmt.Errorf("config.json: %w", err)
	}
	if top.Vision == nil || top.ImageToken == nil {
		return VisionConfig{}, 0, fmt.Errorf("config.json: a checkpoint with a vision tower needs vision_config and image_token_id")
	}
	vc := *top.Vision
	if vc.InChannels == 0 {
		vc.InChannels = 3
	}
	grid := int(math.Sqrt(float64(vc.NumPositions)))
	if vc.Depth <= 0 || vc.Hidden <= 0 || vc.Heads <= 0 || vc.Hidden%vc.Heads != 0 || (vc.Hidden/vc.Heads)%4 != 0 ||
		vc.Patch <= 0 || vc.Merge <= 0 || vc.Temporal <= 0 || vc.Out != cfg.HiddenSize || grid*grid != vc.NumPositions || vc.Intermediate <= 0 {
		return VisionConfig{}, 0, fmt.Errorf("config.json: vision_config %+v is not a usable Qwen3.5 tower (out_hidden_size must be the language model's %d, num_position_embeddings a square, heads dividing hidden_size into a multiple of 4)", vc, cfg.HiddenSize)
	}
	return vc, *top.ImageToken, nil
}

// newTower binds the tower when the checkpoint has one and the backend runs it; nil
// otherwise (the model then reads text only).
func newTower(l *model.Loader) (*Tower, error) {
	if !l.Has(towerPrefix+"patch_embed.proj.weight") || compute.Supports[compute.VisionContext](l.Backend, "the vision tower") != nil {
		return nil, nil
	}
	vc, imageToken, err := visionConfig(l.Config)
	if err != nil {
		return nil, err
	}
	proc, err := vision.LoadProcessor(l.Dir)
	if err != nil {
		return nil, fmt.Errorf("the vision tower's image preprocessing: %w", err)
	}
	if proc.Kind != "qwen" || proc.Patch != vc.Patch || proc.Merge != vc.Merge || proc.TemporalPatch != vc.Temporal {
		return nil, fmt.Errorf("preprocessor_config.json (patch %d, merge %d, temporal %d) does not match vision_config (patch %d, merge %d, temporal %d)",
			proc.Patch, proc.Merge, proc.TemporalPatch, vc.Patch, vc.Merge, vc.Temporal)
	}
	hd := vc.Hidden / vc.Heads
	rope, err := compute.NewRoPE(hd/2, 10000, compute.RoPEScaling{}, 1<<20)
	if err != nil {
		return nil, err
	}
	t := &Tower{Config: vc, rope: rope, processor: proc, imageToken: imageToken}
	p := towerPrefix
	in := vc.InChannels * vc.Temporal * vc.Patch * vc.Patch
	t.PatchEmbed = l.LinearData(p+"patch_embed.proj", l.PatchKernel(p+"patch_embed.proj.weight", vc.Hidden, vc.InChannels, vc.Temporal, vc.Patch), vc.Hidden, in)
	if pt, ok := l.Tensor(p + "pos_embed.weight"); ok {
		if t.PosEmbed, err = pt.Float32s(); err != nil || len(t.PosEmbed) != vc.NumPositions*vc.Hidden {
			return nil, fmt.Errorf("%spos_embed.weight: %v values for %d×%d (%v)", p, len(t.PosEmbed), vc.NumPositions, vc.Hidden, err)
		}
	} else {
		return nil, fmt.Errorf("checkpoint has no tensor %q", p+"pos_embed.weight")
	}
	norm := func(name string, n int) [2]compute.Vector {
		return [2]compute.Vector{l.Vector(name+".weight", n), l.Vector(name+".bias", n)}
	}
	h := vc.Hidden
	for i := range vc.Depth {
		b := fmt.Sprintf("%sblocks.%d.", p, i)
		t.Blocks = append(t.Blocks, VisionBlock{
			Norm1: norm(b+"norm1", h), Norm2: norm(b+"norm2", h),
			Q:    l.LinearRows(b+"attn.qkv", "q", 0, h, h),
			K:    l.LinearRows(b+"attn.qkv", "k", h, h, h),
			V:    l.LinearRows(b+"attn.qkv", "v", 2*h, h, h),
			Proj: l.Linear(b+"attn.proj", h, h),
			FC1:  l.Linear(b+"mlp.linear_fc1", vc.Intermediate, h),
			FC2:  l.Linear(b+"mlp.linear_fc2", h, vc.Intermediate),
		})
	}
	m := h * vc.Merge * vc.Merge
	t.MergerNorm = norm(p+"merger.norm", h)
	t.MergerFC1 = l.Linear(p+"merger.linear_fc1", m, m)
	t.MergerFC2 = l.Linear(p+"merger.linear_fc2", vc.Out, m)
	return t, l.Err()
}

// linspace is torch.linspace(0, end, steps) in float32, as its CPU kernel computes it:
// the first half from the start, the second from the end.
func linspace(end float32, steps int) []float32 {
	out := make([]float32, steps)
	if steps == 1 {
		return out
	}
	step := end / float32(steps-1)
	half := steps / 2
	for i := range steps {
		if i < half {
			out[i] = step * float32(i)
		} else {
			out[i] = end - step*float32(steps-i-1)
		}
	}
	return out
}

// posEmbed appends to dst an image's position embeddings (gh × gw patches, in the
// processor's merge-group order): the learned grid interpolated bilinearly to the image's,
// in float32 as fast_pos_embed_interpolate computes it.
func (t *Tower) posEmbed(dst []float32, gh, gw int) []float32 {
	n := int(math.Sqrt(float64(t.Config.NumPositions)))
	h := t.Config.Hidden
	hs, ws := linspace(float32(n-1), gh), linspace(float32(n-1), gw)
	grid := make([]float32, gh*gw*h) // row-major over the image
	for y := range gh {
		y0 := int(hs[y])
		y1 := min(y0+1, n-1)
		dy := hs[y] - float32(y0)
		for x := range gw {
			x0 := int(ws[x])
			x1 := min(x0+1, n-1)
			dx := ws[x] - float32(x0)
			w := [4]float32{(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx}
			idx := [4]int{y0*n + x0, y0*n + x1, y1*n + x0, y1*n + x1}
			o := grid[(y*gw+x)*h : (y*gw+x+1)*h]
			for k := range 4 {
				e := t.PosEmbed[idx[k]*h : (idx[k]+1)*h]
				for j := range h {
					o[j] += e[j] * w[k]
				}
			}
		}
	}
	return mergeOrder(dst, grid, gh, gw, h, t.Config.Merge)
}

// mergeOrder appends to out the rows of a gh × gw grid (row-major) in the processor's
// order: merge × merge groups in row-major order, each group's rows row-major.
func mergeOrder(out, grid []float32, gh, gw, cols, m int) []float32 {
	for by := 0; by < gh/m; by++ {
		for bx := 0; bx < gw/m; bx++ {
			for my := range m {
				for mx := range m {
					r := (by*m+my)*gw + bx*m + mx
					out = append(out, grid[r*cols:(r+1)*cols]...)
				}
			}
		}
	}
	return out
}

// Encode runs the tower over images (each its own attention block) and returns their
// merged features, image after image, and each image's grid in language-model tokens.
func (t *Tower) Encode(c compute.Context, images []*vision.Pixels) (compute.Tensor, [][3]int) {
	vc, ok := compute.Ext[compute.VisionContext](c)
	if !ok {
		return compute.Unsupported(c, "the vision tower"), nil
	}
	cfg := t.Config
	var blocks []int
	var grids [][3]int
	cols := cfg.InChannels * cfg.Temporal * cfg.Patch * cfg.Patch
	rows := 0
	for _, im := range images {
		g := im.Grid
		if im.Cols != cols || g[0] != 1 || g[1]%cfg.Merge != 0 || g[2]%cfg.Merge != 0 || im.Rows != g[1]*g[2] {
			return compute.Fail(c, fmt.Errorf("qwen3next: an image of %d patches of %d values on a %v grid does not fit the tower", im.Rows, im.Cols, g)), nil
		}
		rows += im.Rows
	}
	// The host arrays at their final sizes (the memory plan counts each once: vision_mem.go).
	half := t.rope.Dims
	px, pos := make([]float32, 0, rows*cols), make([]float32, 0, rows*cfg.Hidden)
	cos, sin := make([]float32, 0, rows*half), make([]float32, 0, rows*half)
	for _, im := range images {
		g := im.Grid
		px = append(px, im.Values...)
		pos = t.posEmbed(pos, g[1], g[2])
		cos, sin = compute.MergedAngles(cos, sin, t.rope.InvFreq[:t.rope.Dims/2], g[1], g[2], cfg.Merge)
		blocks = append(blocks, im.Rows)
		grids = append(grids, [3]int{1, g[1] / cfg.Merge, g[2] / cfg.Merge})
	}
	hd := cfg.Hidden / cfg.Heads
	// Each image's products are computed as they would be with it alone (a backend whose
	// arithmetic depends on a product's row count), so that batched images encode as each
	// does by itself.
	bc, segmented := compute.Ext[compute.BatchContext](c)
	if segmented {
		bc.Segments(blocks)
	}
	h := c.Add(c.Linear(vc.Input(px, rows, cols), t.PatchEmbed), vc.Input(pos, rows, cfg.Hidden))
	ct, st := vc.Input(cos, rows, half), vc.Input(sin, rows, half)
	// An image's activations are its patches' rows, up to 65,536 of them: only what the next
	// step reads is kept (compute.Free, the CPU backend), so that the largest set live at
	// once is one step's (vision_mem.go counts them).
	compute.Free(c, h, ct, st)
	tanh := cfg.Act != "gelu"
	scale := float32(1 / math.Sqrt(float64(hd)))
	for _, b := range t.Blocks {
		x := vc.LayerNorm(h, b.Norm1[0], b.Norm1[1], 1e-6)
		q := vc.RoPERows(c.Linear(x, b.Q), ct, st, hd)
		k := vc.RoPERows(c.Linear(x, b.K), ct, st, hd)
		a := vc.BlockAttention(q, k, c.Linear(x, b.V), cfg.Heads, scale, blocks)
		compute.Free(c, h, ct, st, a)
		h = c.Add(h, c.Linear(a, b.Proj))
		compute.Free(c, h, ct, st)
		x = vc.LayerNorm(h, b.Norm2[0], b.Norm2[1], 1e-6)
		g := vc.GELU(c.Linear(x, b.FC1), tanh)
		compute.Free(c, h, ct, st, g)
		h = c.Add(h, c.Linear(g, b.FC2))
		compute.Free(c, h, ct, st)
	}
	m := cfg.Merge * cfg.Merge
	if segmented {
		merged := make([]int, len(blocks))
		for i, n := range blocks {
			merged[i] = n / m
		}
		bc.Segments(merged)
	}
	x := c.Reshape(vc.LayerNorm(h, t.MergerNorm[0], t.MergerNorm[1], 1e-6), rows/m, cfg.Hidden*m)
	return c.Linear(vc.GELU(c.Linear(x, t.MergerFC1), false), t.MergerFC2), grids
}
