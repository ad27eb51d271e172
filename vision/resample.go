package vision

import "math"

// Filter is a resampling filter as Pillow defines them: a kernel and the half-width it is
// non-zero over, at scale 1.
type Filter struct {
	Name    string
	Support float64
	Kernel  func(x float64) float64
}

// The filters transformers' image processors ask for, by PIL's resample numbers
// (0 nearest, 1 Lanczos, 2 bilinear, 3 bicubic, 4 box, 5 Hamming).
var (
	Bilinear = Filter{"bilinear", 1, func(x float64) float64 {
		x = math.Abs(x)
		if x < 1 {
			return 1 - x
		}
		return 0
	}}
	// Bicubic is Keys' cubic convolution with a = -0.5, the value Pillow uses.
	Bicubic = Filter{"bicubic", 2, func(x float64) float64 {
		const a = -0.5
		x = math.Abs(x)
		if x < 1 {
			return ((a+2)*x-(a+3))*x*x + 1
		}
		if x < 2 {
			return (((x-5)*x+8)*x - 4) * a
		}
		return 0
	}}
	Box = Filter{"box", 0.5, func(x float64) float64 {
		if x > -0.5 && x <= 0.5 {
			return 1
		}
		return 0
	}}
	Lanczos = Filter{"lanczos", 3, func(x float64) float64 {
		if x > -3 && x < 3 {
			return sinc(x) * sinc(x/3)
		}
		return 0
	}}
)

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	x *= math.Pi
	return math.Sin(x) / x
}

// FilterByPIL returns the filter for a PIL resample number, as a preprocessor_config.json's
// "resample" gives it.
func FilterByPIL(n int) (Filter, bool) {
	switch n {
	case 1:
		return Lanczos, true
	case 2:
		return Bilinear, true
	case 3:
		return Bicubic, true
	case 4:
		return Box, true
	}
	return Filter{}, false
}

// precision is the number of fraction bits of the fixed-point weights of an 8-bit resize:
// 32 bits, less 8 for the sample and 2 for the sum of a kernel's overshoot, as Pillow
// does it, so that the rounding is Pillow's to the last bit.
const precision = 32 - 8 - 2

// weights are the per-output-pixel kernels of one axis: output i reads first[i] and the
// next len(kernel i) input pixels.
type weights struct {
	first []int
	ks    [][]int32
}

// axisWeights computes the kernels mapping in samples onto out samples along one axis:
// each output pixel's center back in input coordinates, the filter widened by the
// downscale factor (antialiasing), the taps normalised to sum to 1, then rounded to
// fixed point. Pillow computes the same in double precision in the same order.
func axisWeights(in, out int, f Filter) weights {
	scale := float64(in) / float64(out)
	filterScale := math.Max(scale, 1)
	support := f.Support * filterScale
	w := weights{first: make([]int, out), ks: make([][]int32, out)}
	taps := make([]float64, int(math.Ceil(support))*2+1)
	inv := 1 / filterScale // Pillow multiplies by the reciprocal; dividing differs in the last bit
	for i := range out {
		center := (float64(i) + 0.5) * scale
		lo := int(center - support + 0.5) // truncation toward zero, as C's (int) cast
		if lo < 0 {
			lo = 0
		}
		hi := int(center + support + 0.5)
		if hi > in {
			hi = in
		}
		n := hi - lo
		sum := 0.0
		for x := range n {
			t := f.Kernel((float64(x+lo) - center + 0.5) * inv)
			taps[x] = t
			sum += t
		}
		k := make([]int32, n)
		for x := range n {
			v := taps[x]
			if sum != 0 {
				v /= sum
			}
			if v < 0 {
				k[x] = int32(-0.5 + v*(1<<precision))
			} else {
				k[x] = int32(0.5 + v*(1<<precision))
			}
		}
		w.first[i], w.ks[i] = lo, k
	}
	return w
}

func clip8(acc int32) uint8 {
	v := acc >> precision
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// Resize scales an 8-bit RGB image to w×h as Pillow's Image.resize does with this filter:
// a horizontal pass over only the rows the vertical pass will read, then the vertical
// pass, each in fixed point with Pillow's rounding, so the bytes are Pillow's.
func Resize(src *RGB, w, h int, f Filter) *RGB {
	if w == src.W && h == src.H {
		return src.Clone()
	}
	cur := src
	if w != src.W {
		hw := axisWeights(src.W, w, f)
		first, last := 0, src.H
		if h != src.H {
			vw := axisWeights(src.H, h, f)
			first = vw.first[0]
			last = vw.first[h-1] + len(vw.ks[h-1])
		}
		tmp := NewRGB(w, last-first)
		for y := range tmp.H {
			in := cur.Pix[(y+first)*cur.W*3:]
			out := tmp.Pix[y*w*3:]
			for x := range w {
				lo, k := hw.first[x], hw.ks[x]
				r, g, b := int32(1<<(precision-1)), int32(1<<(precision-1)), int32(1<<(precision-1))
				for j, kv := range k {
					p := in[(lo+j)*3:]
					r += int32(p[0]) * kv
					g += int32(p[1]) * kv
					b += int32(p[2]) * kv
				}
				out[x*3], out[x*3+1], out[x*3+2] = clip8(r), clip8(g), clip8(b)
			}
		}
		if h == src.H {
			return tmp
		}
		cur = tmp
		vw := axisWeights(src.H, h, f)
		return vertical(cur, vw, first, h)
	}
	if h == src.H {
		return src.Clone()
	}
	return vertical(cur, axisWeights(src.H, h, f), 0, h)
}

// vertical is the second pass: rows of cur start at source row offset.
func vertical(cur *RGB, vw weights, offset, h int) *RGB {
	out := NewRGB(cur.W, h)
	stride := cur.W * 3
	for y := range h {
		lo, k := vw.first[y]-offset, vw.ks[y]
		row := out.Pix[y*stride:]
		for x := range stride {
			acc := int32(1 << (precision - 1))
			for j, kv := range k {
				acc += int32(cur.Pix[(lo+j)*stride+x]) * kv
			}
			row[x] = clip8(acc)
		}
	}
	return out
}
