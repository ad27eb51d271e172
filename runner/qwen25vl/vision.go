// Package qwen25vl runs Qwen2.5-VL (transformers' qwen2_5_vl).
package qwen25vl

import (
	"fmt"
	"math"

	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/vision"
)

// Qwen2.5-VL's vision tower differs from Qwen3.5's (runner/qwen3next/vision.go) in its
// blocks and its attention pattern, and shares the patch order and the 2D RoPE
// (compute.MergedAngles): the patch embedding has no learned position embedding; a
// block is RMSNorm, attention (qkv and proj with biases), RMSNorm, a SwiGLU MLP with
// biases; most blocks attend only within windows of window_size pixels square
// (window_size / patch / merge merged groups a side), the blocks at
// fullatt_block_indexes over the whole image; the merger is RMSNorm then two linears
// with a GELU between. Windowed attention is done as transformers does it: the merged
// groups are put in window order (windows row-major over the image, each window's
// groups row-major), every block runs on that order with each window a block of rows,
// and the merged rows go back to the image's order at the end.

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
	Window       int    `json:"window_size"`
	FullAttn     []int  `json:"fullatt_block_indexes"`
}

// check reports whether vc is a tower this package runs for a language model of width
// hidden.
func (vc VisionConfig) check(hidden int) error {
	if vc.Depth <= 0 || vc.Hidden <= 0 || vc.Heads <= 0 || vc.Hidden%vc.Heads != 0 || (vc.Hidden/vc.Heads)%4 != 0 ||
		vc.Patch <= 0 || vc.Merge <= 0 || vc.Temporal <= 0 || vc.Intermediate <= 0 || vc.InChannels <= 0 ||
		vc.Out != hidden || vc.Window < vc.Patch*vc.Merge || vc.Window%(vc.Patch*vc.Merge) != 0 {
		return fmt.Errorf("config.json: vision_config %+v is not a usable Qwen2.5-VL tower (out_hidden_size must be the language model's %d, heads dividing hidden_size into a multiple of 4, window_size a multiple of patch_size × spatial_merge_size)", vc, hidden)
	}
	for _, i := range vc.FullAttn {
		if i < 0 || i >= vc.Depth {
			return fmt.Errorf("config.json: vision_config.fullatt_block_indexes names block %d of %d", i, vc.Depth)
		}
	}
	if vc.Act != "silu" {
		return fmt.Errorf("config.json: vision_config.hidden_act %q: the Qwen2.5-VL tower runs silu", vc.Act)
	}
	return nil
}

// Tower is the bound vision tower.
type Tower struct {
	Config     VisionConfig
	PatchEmbed compute.Weight // hidden × channels·temporal·patch·patch
	Blocks     []VisionBlock
	MergerNorm compute.Vector
	MergerFC1  compute.Weight // merger.mlp.0
	MergerFC2  compute.Weight // merger.mlp.2
	invFreq    []float32      // head_dim/4 rotary frequencies per axis
	full       []bool         // per block: attends over the whole image
	noWindows  bool           // tests: skip the window order, to show it matters
}

// VisionBlock is one ViT block.
type VisionBlock struct {
	Norm1, Norm2   compute.Vector
	Q, K, V        compute.Weight // attn.qkv's three parts, with their biases
	Proj           compute.Weight
	Gate, Up, Down compute.Weight
}

// init sets the fields derived from the config.
func (t *Tower) init() {
	vc := t.Config
	hd := vc.Hidden / vc.Heads
	// The rotary embedding over head_dim/2 columns at theta 10000: head_dim/4 frequencies.
	dim := hd / 2
	t.invFreq = make([]float32, dim/2)
	for i := range t.invFreq {
		t.invFreq[i] = float32(1 / math.Pow(10000, float64(2*i)/float64(dim)))
	}
	t.full = make([]bool, vc.Depth)
	for _, i := range vc.FullAttn {
		t.full[i] = true
	}
}

// windowOrder is an image's merged groups (llmH × llmW, row-major) in window order, and
// the sizes of its windows in merged groups: windows of side groups row-major over the
// image, each window's groups row-major, windows cut at the image's edges.
func windowOrder(llmH, llmW, side int) (order, sizes []int) {
	for wy := 0; wy < llmH; wy += side {
		for wx := 0; wx < llmW; wx += side {
			n := 0
			for y := wy; y < min(wy+side, llmH); y++ {
				for x := wx; x < min(wx+side, llmW); x++ {
					order = append(order, y*llmW+x)
					n++
				}
			}
			sizes = append(sizes, n)
		}
	}
	return order, sizes
}

// Encode runs the tower over images (each its own attention block in the full-attention
// blocks, its windows in the others) and returns their merged features, image after
// image in the processor's order, and each image's grid in language-model tokens.
func (t *Tower) Encode(c compute.Context, images []*vision.Pixels) (compute.Tensor, [][3]int) {
	vc, ok := compute.Ext[compute.VisionContext](c)
	bc, ok2 := compute.Ext[compute.BatchContext](c)
	if !ok || !ok2 {
		return compute.Unsupported(c, "the vision tower"), nil
	}
	cfg := t.Config
	m, unit := cfg.Merge, cfg.Merge*cfg.Merge
	side := cfg.Window / cfg.Patch / cfg.Merge
	cols := cfg.InChannels * cfg.Temporal * cfg.Patch * cfg.Patch
	rows := 0
	for _, im := range images {
		g := im.Grid
		if im.Cols != cols || g[0] != 1 || g[1]%m != 0 || g[2]%m != 0 || im.Rows != g[1]*g[2] {
			return compute.Fail(c, fmt.Errorf("qwen25vl: an image of %d patches of %d values on a %v grid does not fit the tower", im.Rows, im.Cols, g)), nil
		}
		rows += im.Rows
	}
	half := len(t.invFreq) * 2
	px := make([]float32, 0, rows*cols)
	cos, sin := make([]float32, 0, rows*half), make([]float32, 0, rows*half)
	var fullBlocks, windows []int
	var grids [][3]int
	var back []int // back[i]: where merged row i of the processor's order sits in window order
	var ic, is []float32
	for _, im := range images {
		g := im.Grid
		lh, lw := g[1]/m, g[2]/m
		ic, is = compute.MergedAngles(ic[:0], is[:0], t.invFreq, g[1], g[2], m)
		order, sizes := windowOrder(lh, lw, side)
		if t.noWindows { // the same window sizes over the groups in the image's order
			for u := range order {
				order[u] = u
			}
		}
		base := len(back)
		back = append(back, make([]int, lh*lw)...)
		for i, u := range order {
			back[base+u] = base + i
			px = append(px, im.Values[u*unit*cols:(u+1)*unit*cols]...)
			cos = append(cos, ic[u*unit*half:(u+1)*unit*half]...)
			sin = append(sin, is[u*unit*half:(u+1)*unit*half]...)
		}
		for _, n := range sizes {
			windows = append(windows, n*unit)
		}
		fullBlocks = append(fullBlocks, im.Rows)
		grids = append(grids, [3]int{1, lh, lw})
	}
	hd := cfg.Hidden / cfg.Heads
	bc.Segments(fullBlocks)
	h := c.Linear(vc.Input(px, rows, cols), t.PatchEmbed)
	ct, st := vc.Input(cos, rows, half), vc.Input(sin, rows, half)
	compute.Free(c, h, ct, st)
	scale := float32(1 / math.Sqrt(float64(hd)))
	for i, b := range t.Blocks {
		blocks := windows
		if t.full[i] {
			blocks = fullBlocks
		}
		x := c.RMSNorm(h, b.Norm1, 1e-6)
		q := vc.RoPERows(c.Linear(x, b.Q), ct, st, hd)
		k := vc.RoPERows(c.Linear(x, b.K), ct, st, hd)
		a := vc.BlockAttention(q, k, c.Linear(x, b.V), cfg.Heads, scale, blocks)
		compute.Free(c, h, ct, st, a)
		h = c.Add(h, c.Linear(a, b.Proj))
		compute.Free(c, h, ct, st)
		x = c.RMSNorm(h, b.Norm2, 1e-6)
		g := c.SwiGLU(c.Linear(x, b.Gate), c.Linear(x, b.Up))
		compute.Free(c, h, ct, st, g)
		h = c.Add(h, c.Linear(g, b.Down))
		compute.Free(c, h, ct, st)
	}
	merged := make([]int, len(fullBlocks))
	for i, n := range fullBlocks {
		merged[i] = n / unit
	}
	bc.Segments(merged)
	x := c.Reshape(c.RMSNorm(h, t.MergerNorm, 1e-6), rows/unit, cfg.Hidden*unit)
	x = c.Linear(vc.GELU(c.Linear(x, t.MergerFC1), false), t.MergerFC2)
	// Back to the processor's order: runs of consecutive rows (a window's row of groups)
	// gathered in turn.
	var parts []compute.Tensor
	for i := 0; i < len(back); {
		j := i + 1
		for j < len(back) && back[j] == back[j-1]+1 {
			j++
		}
		parts = append(parts, c.Rows(x, back[i], j-i))
		i = j
	}
	if len(parts) == 1 {
		return parts[0], grids
	}
	return bc.ConcatRows(parts...), grids
}
