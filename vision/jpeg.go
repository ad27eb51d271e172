package vision

import "image"

// ycbcrToRGB converts a decoded JPEG as libjpeg (which Pillow uses) does by default:
// chroma subsampled 2× is brought to full size with "fancy" upsampling, a triangle filter
// weighting the nearer chroma sample 3/4 (and 9/16 of the nearest in 4:2:0) with libjpeg's
// alternating rounding, then converted with libjpeg's 16-bit fixed-point coefficients.
// Other subsamplings fall back to nearest-neighbour chroma. Go's IDCT still differs from
// libjpeg's by a level here and there.
func ycbcrToRGB(src *image.YCbCr) *RGB {
	b := src.Bounds()
	w, h := b.Dx(), b.Dy()
	cb := make([]int32, w*h)
	cr := make([]int32, w*h)
	switch src.SubsampleRatio {
	case image.YCbCrSubsampleRatio420:
		fancy(cb, src.Cb, src.CStride, w, h, true)
		fancy(cr, src.Cr, src.CStride, w, h, true)
	case image.YCbCrSubsampleRatio422:
		fancy(cb, src.Cb, src.CStride, w, h, false)
		fancy(cr, src.Cr, src.CStride, w, h, false)
	default:
		for y := range h {
			for x := range w {
				o := src.COffset(b.Min.X+x, b.Min.Y+y)
				cb[y*w+x], cr[y*w+x] = int32(src.Cb[o]), int32(src.Cr[o])
			}
		}
	}
	m := NewRGB(w, h)
	for y := range h {
		for x := range w {
			yy := int32(src.Y[src.YOffset(b.Min.X+x, b.Min.Y+y)])
			i := y*w + x
			r, g, bl := jpegRGB(yy, cb[i], cr[i])
			m.Pix[i*3], m.Pix[i*3+1], m.Pix[i*3+2] = r, g, bl
		}
	}
	return m
}

// libjpeg's conversion constants, FIX(x) = x·2^16 rounded.
const (
	fixR  = 91881  // 1.40200
	fixGb = -22554 // -0.34414
	fixGr = -46802 // -0.71414
	fixB  = 116130 // 1.77200
	half  = 1 << 15
)

func jpegRGB(y, cb, cr int32) (uint8, uint8, uint8) {
	cb -= 128
	cr -= 128
	r := y + (fixR*cr+half)>>16
	g := y + (fixGb*cb+fixGr*cr+half)>>16
	b := y + (fixB*cb+half)>>16
	return clamp8(r), clamp8(g), clamp8(b)
}

func clamp8(v int32) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}

// fancy upsamples one chroma plane 2× horizontally (and vertically when both), into
// out (w×h), as libjpeg's h2v1 and h2v2 fancy upsamplers do.
func fancy(out []int32, plane []uint8, stride, w, h int, both bool) {
	cw := (w + 1) / 2
	ch := h
	if both {
		ch = (h + 1) / 2
	}
	sample := func(x, y int) int32 {
		x = min(max(x, 0), cw-1)
		y = min(max(y, 0), ch-1)
		return int32(plane[y*stride+x])
	}
	for y := range h {
		cy := y
		if both {
			cy = y / 2
		}
		// The column sums of the two contributing chroma rows (3× the nearer one).
		col := func(x int) int32 {
			if !both {
				return sample(x, cy)
			}
			near := cy - 1
			if y%2 == 1 {
				near = cy + 1
			}
			return 3*sample(x, cy) + sample(x, near)
		}
		shift, bias0, bias1 := int32(4), int32(8), int32(7)
		if !both {
			shift, bias0, bias1 = 2, 1, 2
		}
		for x := range w {
			cx := x / 2
			this := col(cx)
			var v int32
			switch {
			case cw == 1:
				v = (this*4 + bias0) >> shift
				if x%2 == 1 {
					v = (this*4 + bias1) >> shift
				}
			case x == 0:
				v = (this*4 + bias0) >> shift
			case x%2 == 0:
				v = (this*3 + col(cx-1) + bias0) >> shift
			case cx == cw-1:
				v = (this*4 + bias1) >> shift
			default:
				v = (this*3 + col(cx+1) + bias1) >> shift
			}
			out[y*w+x] = v
		}
	}
}
