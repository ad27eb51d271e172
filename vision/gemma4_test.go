package vision

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

const gemma4Config = `{"image_processor_type": "Gemma4ImageProcessor", "do_normalize": false, "do_rescale": true,
 "rescale_factor": 0.00392156862745098, "image_mean": [0, 0, 0], "image_std": [1, 1, 1], "resample": 3,
 "patch_size": 16, "pooling_kernel_size": 3, "max_soft_tokens": 280}`

// gemma4SizeReference restates Gemma4ImageProcessor's resize rule plainly: scale the image
// to the patch budget's area, take each side down to a whole number of windows by
// counting, and treat a side that has no whole window as one window with the other side
// the whole aspect ratio's multiple of it, no longer than the budget allows.
func gemma4SizeReference(h, w, patch, maxPatches, pool int) (int, int, bool) {
	side := pool * patch
	f := math.Sqrt(float64(maxPatches*patch*patch) / float64(h*w))
	down := func(ideal float64) int {
		m := 0
		for float64((m+1)*side) <= ideal {
			m++
		}
		return m * side
	}
	th, tw := down(f*float64(h)), down(f*float64(w))
	long := maxPatches / (pool * pool) * side
	if th == 0 && tw == 0 {
		return 0, 0, false
	}
	if th == 0 {
		th = side
		tw = min(long, side*int(math.Floor(float64(w)/float64(h))))
	} else if tw == 0 {
		tw = side
		th = min(long, side*int(math.Floor(float64(h)/float64(w))))
	}
	return th, tw, th*tw <= maxPatches*patch*patch
}

func TestGemma4SizeMatchesRule(t *testing.T) {
	// 1024×768 with the defaults is 57×42 patches, 266 tokens (19×14 windows).
	h, w, err := Gemma4Size(768, 1024, 16, 280*9, 3)
	if err != nil || h != 672 || w != 912 {
		t.Fatalf("1024×768: %d×%d %v, want 912×672", w, h, err)
	}
	r := rand.New(rand.NewPCG(4, 4))
	sizes := [][2]int{{1, 1}, {20, 10000}, {10000, 20}, {48, 48}, {1, 50000}, {3000, 1}, {224, 224}, {768, 1024}}
	for range 400 {
		sizes = append(sizes, [2]int{1 + r.IntN(4000), 1 + r.IntN(4000)})
	}
	for _, budget := range gemma4SoftTokens {
		for _, s := range sizes {
			h, w, err := Gemma4Size(s[0], s[1], 16, budget*9, 3)
			rh, rw, ok := gemma4SizeReference(s[0], s[1], 16, budget*9, 3)
			if ok != (err == nil) || (ok && (h != rh || w != rw)) {
				t.Fatalf("%d×%d budget %d: got %d×%d %v, reference %d×%d ok %v", s[1], s[0], budget, w, h, err, rw, rh, ok)
			}
			if err != nil && !errors.Is(err, ErrImage) {
				t.Fatalf("%v is not an ErrImage", err)
			}
		}
	}
}

func TestGemma4Processor(t *testing.T) {
	p, err := ParseProcessor([]byte(gemma4Config))
	if err != nil {
		t.Fatal(err)
	}
	if p.Kind != "gemma4" || p.Patch != 16 || p.Merge != 3 || p.Tokens != 280 || p.Mean != [3]float64{} || p.Std != [3]float64{1, 1, 1} || p.Filter.Name != "bicubic" {
		t.Fatalf("parsed %+v", p)
	}
	if n := p.ImageTokens(1024, 768); n != 266 {
		t.Fatalf("1024×768 costs %d tokens, want 266", n)
	}
	if p.MaxPatches() != 2520 {
		t.Fatalf("MaxPatches %d", p.MaxPatches())
	}
	// A nested processor_config.json with a smaller budget.
	q, err := ParseProcessor([]byte(`{"image_processor": {"image_processor_type": "Gemma4ImageProcessor", "max_soft_tokens": 70, "patch_size": 4, "pooling_kernel_size": 2}}`))
	if err != nil || q.Tokens != 70 || q.Patch != 4 || q.Merge != 2 {
		t.Fatalf("nested: %+v %v", q, err)
	}
	if _, err := ParseProcessor([]byte(`{"image_processor_type": "Gemma4ImageProcessor", "max_soft_tokens": 100}`)); err == nil {
		t.Fatal("max_soft_tokens 100 accepted")
	}

	// Patch order against a plain restatement: row (py, px), column (y, x, c) is pixel
	// (py·patch + y, px·patch + x)'s channel c of the resized image, rescaled to [0, 1].
	r := rand.New(rand.NewPCG(5, 5))
	m := NewRGB(53, 37)
	for i := range m.Pix {
		m.Pix[i] = uint8(r.IntN(256))
	}
	px, err := q.Process(m)
	if err != nil {
		t.Fatal(err)
	}
	rh, rw, _ := Gemma4Size(37, 53, 4, 70*4, 2)
	rs := Resize(m, rw, rh, q.Filter)
	gh, gw := rh/4, rw/4
	if px.Rows != gh*gw || px.Cols != 48 || px.Grid != [3]int{1, gh, gw} || len(px.Values) != px.Rows*px.Cols {
		t.Fatalf("rows %d cols %d grid %v for %d×%d", px.Rows, px.Cols, px.Grid, rw, rh)
	}
	for py := range gh {
		for pxi := range gw {
			for y := range 4 {
				for x := range 4 {
					for c := range 3 {
						want := float32(float64(rs.Pix[((py*4+y)*rw+pxi*4+x)*3+c]) / 255)
						got := px.Values[(py*gw+pxi)*48+(y*4+x)*3+c]
						if got != want {
							t.Fatalf("patch (%d,%d) pixel (%d,%d) channel %d: %v, want %v", py, pxi, y, x, c, got, want)
						}
					}
				}
			}
		}
	}
	if n := q.ImageTokens(53, 37); n*4 != px.Rows {
		t.Fatalf("ImageTokens %d for %d patches", n, px.Rows)
	}
	// An image already of its size is not resampled.
	m2 := NewRGB(8, 16)
	for i := range m2.Pix {
		m2.Pix[i] = uint8(r.IntN(256))
	}
	q2, _ := ParseProcessor([]byte(`{"image_processor_type": "Gemma4ImageProcessor", "max_soft_tokens": 70, "patch_size": 4, "pooling_kernel_size": 2}`))
	if h, w, _ := Gemma4Size(16, 8, 4, 280, 2); h == 16 && w == 8 {
		px2, _ := q2.Process(m2)
		if px2.Values[3] != float32(float64(m2.Pix[3])/255) {
			t.Fatal("an image of the target size was resampled")
		}
	}
	if _, err := q.Process(NewRGB(0, 0)); !errors.Is(err, ErrImage) {
		t.Fatalf("a 0×0 image: %v", err)
	}
}
