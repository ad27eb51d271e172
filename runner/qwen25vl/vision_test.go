package qwen25vl

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model/modeltest"
	"github.com/mlxg/mlxg/vision"
)

// memSource holds random float32 tensors by name.
type memSource map[string]*safetensors.Tensor

func (m memSource) Tensor(name string) (*safetensors.Tensor, bool) { t, ok := m[name]; return t, ok }

func (m memSource) put(name string, v []float64, shape ...int) {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(x)))
	}
	m[name] = &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.F32, Shape: shape}, Data: b}
}

// refLinear is a float64 linear layer.
type refLinear struct {
	w, b    []float64 // out × in, out
	out, in int
}

func (l refLinear) apply(x []float64) []float64 {
	y := make([]float64, l.out)
	for o := range l.out {
		s := l.b[o]
		for i := range l.in {
			s += l.w[o*l.in+i] * x[i]
		}
		y[o] = s
	}
	return y
}

type refBlock struct {
	norm1, norm2   []float64
	q, k, v, proj  refLinear
	gate, up, down refLinear
}

// refTower is the tower's plain float64 reference: every patch row in the processor's
// order, windowed attention as a mask (same image, same window), no reordering.
type refTower struct {
	cfg      VisionConfig
	patch    refLinear
	blocks   []refBlock
	mnorm    []float64
	fc1, fc2 refLinear
}

func rmsNorm(x, w []float64) []float64 {
	var ss float64
	for _, v := range x {
		ss += v * v
	}
	r := 1 / math.Sqrt(ss/float64(len(x))+1e-6)
	y := make([]float64, len(x))
	for i := range x {
		y[i] = x[i] * r * w[i]
	}
	return y
}

func (r *refTower) encode(images []*vision.Pixels) []float64 {
	cfg := r.cfg
	m, hd := cfg.Merge, cfg.Hidden/cfg.Heads
	side := cfg.Window / cfg.Patch / cfg.Merge
	type patch struct{ img, y, x int }
	var ps []patch
	var h [][]float64
	for n, im := range images {
		g := im.Grid
		for by := 0; by < g[1]/m; by++ {
			for bx := 0; bx < g[2]/m; bx++ {
				for my := range m {
					for mx := range m {
						ps = append(ps, patch{n, by*m + my, bx*m + mx})
					}
				}
			}
		}
		for i := range im.Rows {
			row := make([]float64, im.Cols)
			for j := range row {
				row[j] = float64(im.Values[i*im.Cols+j])
			}
			h = append(h, r.patch.apply(row))
		}
	}
	dim := hd / 2
	inv := make([]float64, dim/2)
	for i := range inv {
		inv[i] = 1 / math.Pow(10000, float64(2*i)/float64(dim))
	}
	rope := func(x []float64, p patch) {
		for head := range cfg.Heads {
			v := x[head*hd : (head+1)*hd]
			for j := range hd / 2 {
				pos := p.y
				f := inv[j%len(inv)]
				if j >= len(inv) {
					pos = p.x
				}
				c, s := math.Cos(float64(pos)*f), math.Sin(float64(pos)*f)
				a, b := v[j], v[j+hd/2]
				v[j], v[j+hd/2] = a*c-b*s, b*c+a*s
			}
		}
	}
	for bi, b := range r.blocks {
		full := false
		for _, f := range cfg.FullAttn {
			full = full || f == bi
		}
		var q, k, v [][]float64
		for i, row := range h {
			x := rmsNorm(row, b.norm1)
			qi, ki := b.q.apply(x), b.k.apply(x)
			rope(qi, ps[i])
			rope(ki, ps[i])
			q, k, v = append(q, qi), append(k, ki), append(v, b.v.apply(x))
		}
		sees := func(i, j int) bool {
			a, c := ps[i], ps[j]
			if a.img != c.img {
				return false
			}
			return full || (a.y/m/side == c.y/m/side && a.x/m/side == c.x/m/side)
		}
		next := make([][]float64, len(h))
		for i := range h {
			att := make([]float64, cfg.Hidden)
			for head := range cfg.Heads {
				o := head * hd
				var ws []float64
				var js []int
				mx := math.Inf(-1)
				for j := range h {
					if !sees(i, j) {
						continue
					}
					var s float64
					for d := range hd {
						s += q[i][o+d] * k[j][o+d]
					}
					s /= math.Sqrt(float64(hd))
					ws, js = append(ws, s), append(js, j)
					mx = math.Max(mx, s)
				}
				var z float64
				for n := range ws {
					ws[n] = math.Exp(ws[n] - mx)
					z += ws[n]
				}
				for n, j := range js {
					for d := range hd {
						att[o+d] += ws[n] / z * v[j][o+d]
					}
				}
			}
			y := b.proj.apply(att)
			x := make([]float64, cfg.Hidden)
			for d := range x {
				x[d] = h[i][d] + y[d]
			}
			n2 := rmsNorm(x, b.norm2)
			gt, up := b.gate.apply(n2), b.up.apply(n2)
			for d := range gt {
				gt[d] = gt[d] / (1 + math.Exp(-gt[d])) * up[d]
			}
			dn := b.down.apply(gt)
			for d := range x {
				x[d] += dn[d]
			}
			next[i] = x
		}
		h = next
	}
	var out []float64
	unit := m * m
	for g := 0; g < len(h)/unit; g++ {
		var cat []float64
		for u := range unit {
			cat = append(cat, rmsNorm(h[g*unit+u], r.mnorm)...)
		}
		y := r.fc1.apply(cat)
		for d := range y {
			y[d] = 0.5 * y[d] * (1 + math.Erf(y[d]/math.Sqrt2))
		}
		out = append(out, r.fc2.apply(y)...)
	}
	return out
}

// tinyTower binds a random tower of config vc on the CPU backend and its float64 twin.
func tinyTower(t *testing.T, vc VisionConfig, seed uint64) (*Tower, *refTower, compute.Backend) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	src := memSource{}
	rnd := func(n int, s float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = (rng.Float64()*2 - 1) * s
		}
		return v
	}
	be := cpu.New(2)
	bind := func(name string, out, in int, bias bool) (compute.Weight, refLinear) {
		l := refLinear{w: rnd(out*in, 1/math.Sqrt(float64(in))), b: make([]float64, out), out: out, in: in}
		src.put(name+".weight", l.w, out, in)
		if bias {
			l.b = rnd(out, 0.1)
			src.put(name+".bias", l.b, out)
		}
		w, err := be.Weight(src, name, compute.Quant{})
		if err != nil {
			t.Fatal(err)
		}
		return w, l
	}
	vec := func(name string, n int) (compute.Vector, []float64) {
		v := rnd(n, 0.3)
		for i := range v {
			v[i] += 1
		}
		src.put(name, v, n)
		w, err := be.Vector(src, name)
		if err != nil {
			t.Fatal(err)
		}
		return w, v
	}
	tw := &Tower{Config: vc}
	ref := &refTower{cfg: vc}
	h, in := vc.Hidden, vc.InChannels*vc.Temporal*vc.Patch*vc.Patch
	tw.PatchEmbed, ref.patch = bind("patch", h, in, false)
	for i := range vc.Depth {
		var b VisionBlock
		var r refBlock
		p := func(s string) string { return "blocks." + string(rune('0'+i)) + "." + s }
		b.Norm1, r.norm1 = vec(p("norm1"), h)
		b.Norm2, r.norm2 = vec(p("norm2"), h)
		b.Q, r.q = bind(p("q"), h, h, true)
		b.K, r.k = bind(p("k"), h, h, true)
		b.V, r.v = bind(p("v"), h, h, true)
		b.Proj, r.proj = bind(p("proj"), h, h, true)
		b.Gate, r.gate = bind(p("gate"), vc.Intermediate, h, true)
		b.Up, r.up = bind(p("up"), vc.Intermediate, h, true)
		b.Down, r.down = bind(p("down"), h, vc.Intermediate, true)
		tw.Blocks, ref.blocks = append(tw.Blocks, b), append(ref.blocks, r)
	}
	mm := h * vc.Merge * vc.Merge
	tw.MergerNorm, ref.mnorm = vec("mnorm", h)
	tw.MergerFC1, ref.fc1 = bind("fc1", mm, mm, true)
	tw.MergerFC2, ref.fc2 = bind("fc2", vc.Out, mm, true)
	if err := vc.check(vc.Out); err != nil {
		t.Fatal(err)
	}
	tw.init()
	return tw, ref, be
}

func tinyConfig() VisionConfig {
	return VisionConfig{Depth: 3, Hidden: 32, Act: "silu", Intermediate: 48, Heads: 2, InChannels: 3, Patch: 4,
		Merge: 2, Temporal: 2, Out: 24, Window: 16, FullAttn: []int{1}}
}

// randomPixels is an image's processor output of a gh × gw patch grid.
func randomPixels(vc VisionConfig, gh, gw int, seed uint64) *vision.Pixels {
	rng := rand.New(rand.NewPCG(seed, 2))
	cols := vc.InChannels * vc.Temporal * vc.Patch * vc.Patch
	v := make([]float32, gh*gw*cols)
	for i := range v {
		v[i] = float32(rng.Float64()*4 - 2)
	}
	return &vision.Pixels{Values: v, Rows: gh * gw, Cols: cols, Grid: [3]int{1, gh, gw}}
}

func encode(t *testing.T, tw *Tower, be compute.Backend, px []*vision.Pixels) ([]float32, [][3]int) {
	t.Helper()
	c := be.NewContext()
	defer c.Close()
	x, grids := tw.Encode(c, px)
	out, err := c.Float32s(x)
	if err != nil {
		t.Fatal(err)
	}
	return out, grids
}

// TestTowerMatchesReference: the tower on the CPU backend, with its window reordering,
// matches the float64 reference that masks attention to windows instead, on two images
// whose grids leave partial windows at the edges; dropping the window order (the same
// window sizes over the groups in the image's order) does not.
func TestTowerMatchesReference(t *testing.T) {
	vc := tinyConfig()
	tw, ref, be := tinyTower(t, vc, 3)
	px := []*vision.Pixels{randomPixels(vc, 12, 10, 1), randomPixels(vc, 4, 6, 2)}
	want64 := ref.encode(px)
	want := make([]float32, len(want64))
	for i, v := range want64 {
		want[i] = float32(v)
	}
	got, grids := encode(t, tw, be, px)
	if len(grids) != 2 || grids[0] != [3]int{1, 6, 5} || grids[1] != [3]int{1, 2, 3} {
		t.Fatalf("grids %v, want [1 6 5] [1 2 3]", grids)
	}
	if len(got) != len(want) || len(got) != (30+6)*vc.Out {
		t.Fatalf("%d values, reference %d", len(got), len(want))
	}
	if r := modeltest.MaxRel(got, want); r > 1e-4 {
		t.Errorf("tower differs from the float64 reference: max rel %.3g", r)
	}
	tw.noWindows = true
	bad, _ := encode(t, tw, be, px)
	t.Logf("max rel to the reference: %.3g, %.3g without the window order", modeltest.MaxRel(got, want), modeltest.MaxRel(bad, want))
	if r := modeltest.MaxRel(bad, want); r < 1e-2 {
		t.Errorf("without the window order the tower still matches (max rel %.3g): the test cannot see it", r)
	}
}

// TestWindowOrder: windows row-major, each window's groups row-major, cut at the edges.
func TestWindowOrder(t *testing.T) {
	order, sizes := windowOrder(3, 5, 2)
	wantOrder := []int{0, 1, 5, 6, 2, 3, 7, 8, 4, 9, 10, 11, 12, 13, 14}
	wantSizes := []int{4, 4, 2, 2, 2, 1}
	if len(order) != len(wantOrder) || len(sizes) != len(wantSizes) {
		t.Fatalf("order %v sizes %v", order, sizes)
	}
	for i := range order {
		if order[i] != wantOrder[i] {
			t.Fatalf("order %v, want %v", order, wantOrder)
		}
	}
	for i := range sizes {
		if sizes[i] != wantSizes[i] {
			t.Fatalf("sizes %v, want %v", sizes, wantSizes)
		}
	}
}
