package vision

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/crc32"
	"math"
	"os"
	"strings"
	"testing"
)

// reference is what scripts/visionref/reference.py computed with Pillow and transformers.
type reference struct {
	Pillow       string
	Transformers string
	Convert      map[string]struct {
		Mode   string
		Sha256 string
	}
	Resize []struct {
		Image, Filter string
		W, H          int
		Sha256        string
	}
	Orient map[string]struct {
		W, H int
		RGB  []int
	}
	Processors []struct {
		Processor   string
		Config      json.RawMessage
		Image       string
		Shape       []int
		Sum         float64
		Grid        []int
		SampleEvery int `json:"sample_every"`
		Sample      []float64
		Error       string
	}
}

func loadReference(t *testing.T) *reference {
	t.Helper()
	b, err := os.ReadFile("testdata/reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var r reference
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

func digest(m *RGB) string {
	s := sha256.Sum256(m.Pix)
	return hex.EncodeToString(s[:])
}

func decodeReference(t *testing.T, name string) *RGB {
	t.Helper()
	var data []byte
	if b, ok := referencePNGs()[name]; ok {
		data = b
	} else if b, err := os.ReadFile("testdata/" + name); err == nil {
		data = b
	} else {
		t.Fatalf("no reference image %s", name)
	}
	m, err := Decode(data, DefaultLimits)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

// TestConvertMatchesPillow: decoded pixels equal PIL's convert("RGB") byte for byte, for
// RGB, RGBA, palette, gray, 16-bit PNGs, a lossless WebP and a GIF Pillow wrote.
func TestConvertMatchesPillow(t *testing.T) {
	ref := loadReference(t)
	if len(ref.Convert) < 14 {
		t.Fatalf("the reference has %d converted images", len(ref.Convert))
	}
	for name, want := range ref.Convert {
		got := decodeReference(t, name)
		if d := digest(got); d != want.Sha256 {
			t.Errorf("%s (PIL mode %s): RGB pixels differ from Pillow's", name, want.Mode)
		}
	}
}

// TestResizeMatchesPillow: every resize of every reference image, with bilinear, bicubic,
// Lanczos and box filters, down and up, one axis or both, is Pillow's byte for byte.
func TestResizeMatchesPillow(t *testing.T) {
	ref := loadReference(t)
	if len(ref.Resize) < 200 {
		t.Fatalf("the reference has %d resizes", len(ref.Resize))
	}
	filters := map[string]Filter{"bilinear": Bilinear, "bicubic": Bicubic, "lanczos": Lanczos, "box": Box}
	decoded := map[string]*RGB{}
	bad := 0
	for _, c := range ref.Resize {
		src, ok := decoded[c.Image]
		if !ok {
			src = decodeReference(t, c.Image)
			decoded[c.Image] = src
		}
		got := Resize(src, c.W, c.H, filters[c.Filter])
		if got.W != c.W || got.H != c.H || digest(got) != c.Sha256 {
			bad++
			if bad <= 10 {
				t.Errorf("%s %dx%d → %dx%d %s: differs from Pillow", c.Image, src.W, src.H, c.W, c.H, c.Filter)
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d of %d resizes differ from Pillow", bad, len(ref.Resize))
	}
}

// TestOrientationMatchesPillow: JPEGs with each EXIF orientation come out as
// ImageOps.exif_transpose turns them: the same size, and pixels within the level or two
// by which Go's IDCT and libjpeg's may differ (chroma is upsampled as libjpeg does).
func TestOrientationMatchesPillow(t *testing.T) {
	ref := loadReference(t)
	if len(ref.Orient) != 8 {
		t.Fatalf("the reference has %d orientations", len(ref.Orient))
	}
	jpegs := referenceJPEGs()
	for name, want := range ref.Orient {
		got, err := Decode(jpegs[name], DefaultLimits)
		if err != nil {
			t.Fatal(err)
		}
		if got.W != want.W || got.H != want.H {
			t.Errorf("%s: %dx%d, Pillow %dx%d", name, got.W, got.H, want.W, want.H)
			continue
		}
		worst := 0
		for i, v := range want.RGB {
			worst = max(worst, int(math.Abs(float64(int(got.Pix[i])-v))))
		}
		t.Logf("%s: %dx%d, pixels within %d levels of Pillow's", name, got.W, got.H, worst)
		if worst > 2 {
			t.Errorf("%s: pixels differ from Pillow's by up to %d levels", name, worst)
		}
	}
}

// TestProcessorsMatchTransformers: pixel_values and the image grid as transformers' PIL
// image processors compute them, for Qwen2-VL's and a Qwen3-VL-like configuration and
// Gemma 3's, on images needing upscaling, downscaling and an extreme aspect ratio.
func TestProcessorsMatchTransformers(t *testing.T) {
	ref := loadReference(t)
	if ref.Transformers == "" {
		t.Skip("testdata/reference.json was made without transformers (scripts/visionref on the GPU device adds it)")
	}
	n := 0
	for _, c := range ref.Processors {
		if c.Error != "" {
			t.Logf("%s on %s: transformers refused: %s", c.Processor, c.Image, c.Error)
			continue
		}
		p, err := ParseProcessor(c.Config)
		if err != nil {
			t.Fatalf("%s: %v", c.Processor, err)
		}
		got, err := p.Process(decodeReference(t, c.Image))
		if err != nil {
			t.Fatalf("%s on %s: %v", c.Processor, c.Image, err)
		}
		size := 1
		for _, d := range c.Shape {
			size *= d
		}
		if len(got.Values) != size {
			t.Errorf("%s on %s: %d values (%d×%d), transformers %v", c.Processor, c.Image, len(got.Values), got.Rows, got.Cols, c.Shape)
			continue
		}
		if len(c.Grid) == 3 && (got.Grid[0] != c.Grid[0] || got.Grid[1] != c.Grid[1] || got.Grid[2] != c.Grid[2]) {
			t.Errorf("%s on %s: grid %v, transformers %v", c.Processor, c.Image, got.Grid, c.Grid)
		}
		worst := 0.0
		for i, want := range c.Sample {
			worst = math.Max(worst, math.Abs(float64(got.Values[i*c.SampleEvery])-want))
		}
		sum := 0.0
		for _, v := range got.Values {
			sum += float64(v)
		}
		if worst > 1e-6 || math.Abs(sum-c.Sum) > 1e-6*float64(size) {
			t.Errorf("%s on %s: sampled values differ by up to %g, sums %g vs %g", c.Processor, c.Image, worst, sum, c.Sum)
		}
		n++
	}
	if n < 10 {
		t.Errorf("only %d processor cases compared", n)
	}
}

// TestBadImages: what a request may carry that is not a usable image is an ErrImage that
// names the problem, and nothing panics.
func TestBadImages(t *testing.T) {
	good := referencePNGs()["rgb-37x23.png"]
	cases := map[string][]byte{
		"empty":     nil,
		"text":      []byte("this is not an image"),
		"truncated": good[:len(good)/2],
		"corrupt":   append(append([]byte{}, good[:40]...), make([]byte, 200)...),
		"huge":      pngHeader(50000, 50000),
		"zero":      pngHeader(0, 0),
	}
	for name, data := range cases {
		_, err := Decode(data, DefaultLimits)
		if !errors.Is(err, ErrImage) {
			t.Errorf("%s: %v, want an ErrImage", name, err)
		}
	}
	if _, err := Decode(cases["huge"], DefaultLimits); err == nil || !strings.Contains(err.Error(), "50000×50000") {
		t.Errorf("huge: %v, want the size named", err)
	}
	if _, _, err := SmartResize(1, 300, 28, 56*56, 1<<20); err == nil {
		t.Error("an aspect ratio of 300 was accepted")
	}
}

// pngHeader is a PNG signature and IHDR chunk claiming a size, with no image data.
func pngHeader(w, h int) []byte {
	b := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR")
	b = append(b, byte(w>>24), byte(w>>16), byte(w>>8), byte(w), byte(h>>24), byte(h>>16), byte(h>>8), byte(h), 8, 2, 0, 0, 0)
	c := crc32.ChecksumIEEE(b[12:])
	return append(b, byte(c>>24), byte(c>>16), byte(c>>8), byte(c))
}

// TestSmartResize against values worked out by hand from the rule: multiples of the factor,
// Python's half-to-even rounding, the area clamped into the budget.
func TestSmartResize(t *testing.T) {
	for _, c := range []struct{ h, w, f, lo, hi, wh, ww int }{
		{480, 640, 28, 56 * 56, 28 * 28 * 1280, 476, 644},
		{67, 101, 28, 56 * 56, 28 * 28 * 64, 56, 112},
		{42, 42, 28, 56 * 56, 1 << 20, 56, 56}, // 42/28 = 1.5 rounds to 2
		{70, 70, 28, 28 * 28, 1 << 20, 56, 56}, // 70/28 = 2.5 rounds to 2 (half to even)
		{3000, 4000, 32, 1024, 32 * 32 * 48, 192, 256},
	} {
		h, w, err := SmartResize(c.h, c.w, c.f, c.lo, c.hi)
		if err != nil || h != c.wh || w != c.ww {
			t.Errorf("SmartResize(%d, %d, %d) = %d, %d, %v; want %d, %d", c.h, c.w, c.f, h, w, err, c.wh, c.ww)
		}
	}
}
