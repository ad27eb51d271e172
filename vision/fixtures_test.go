package vision

import (
	"bytes"
	"flag"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// The reference images: PNGs of odd sizes, extreme aspect ratios, RGBA with varying alpha,
// a palette, gray, 16-bit RGB and 16-bit gray, with smooth gradients and noise so that
// every tap of a kernel matters. Deterministic, so the test and scripts/visionref see the
// same pixels.
func referencePNGs() map[string][]byte {
	r := rand.New(rand.NewPCG(7, 11))
	val := func(x, y, w, h, c int) uint8 {
		g := (x*255/max(w-1, 1) + y*97/max(h-1, 1) + c*61) % 256
		return uint8((g + int(r.IntN(64))) % 256)
	}
	out := map[string][]byte{}
	enc := func(name string, m image.Image) {
		var b bytes.Buffer
		if err := png.Encode(&b, m); err != nil {
			panic(err)
		}
		out[name] = b.Bytes()
	}
	for _, s := range [][2]int{{37, 23}, {101, 67}, {640, 480}, {999, 3}, {2, 500}, {1, 1}, {5, 7}} {
		w, h := s[0], s[1]
		m := image.NewNRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				m.SetNRGBA(x, y, color.NRGBA{val(x, y, w, h, 0), val(x, y, w, h, 1), val(x, y, w, h, 2), 255})
			}
		}
		enc(pngName("rgb", w, h), m)
	}
	{
		w, h := 53, 41
		m := image.NewNRGBA(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				m.SetNRGBA(x, y, color.NRGBA{val(x, y, w, h, 0), val(x, y, w, h, 1), val(x, y, w, h, 2), uint8(r.IntN(256))})
			}
		}
		enc(pngName("rgba", w, h), m)
	}
	{
		w, h := 45, 30
		pal := color.Palette{}
		for i := range 200 {
			pal = append(pal, color.NRGBA{uint8(i * 5 % 256), uint8(i * 37 % 256), uint8(255 - i), 255})
		}
		m := image.NewPaletted(image.Rect(0, 0, w, h), pal)
		for y := range h {
			for x := range w {
				m.SetColorIndex(x, y, uint8((x*7+y*3+r.IntN(9))%200))
			}
		}
		enc(pngName("palette", w, h), m)
	}
	{
		w, h := 61, 19
		m := image.NewGray(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				m.SetGray(x, y, color.Gray{val(x, y, w, h, 0)})
			}
		}
		enc(pngName("gray", w, h), m)
	}
	{
		w, h := 33, 47
		m := image.NewRGBA64(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				m.SetRGBA64(x, y, color.RGBA64{uint16(r.IntN(65536)), uint16(r.IntN(65536)), uint16(r.IntN(65536)), 0xffff})
			}
		}
		enc(pngName("rgb16", w, h), m)
	}
	{
		w, h := 29, 31
		m := image.NewGray16(image.Rect(0, 0, w, h))
		for y := range h {
			for x := range w {
				m.SetGray16(x, y, color.Gray16{uint16(r.IntN(65536))})
			}
		}
		enc(pngName("gray16", w, h), m)
	}
	return out
}

// referenceJPEGs are JPEGs carrying each EXIF orientation, to check Decode turns them upright.
func referenceJPEGs() map[string][]byte {
	w, h := 24, 16
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			m.Set(x, y, color.RGBA{uint8(x * 10), uint8(y * 15), uint8((x + y) * 5), 255})
		}
	}
	var plain bytes.Buffer
	if err := jpeg.Encode(&plain, m, &jpeg.Options{Quality: 95}); err != nil {
		panic(err)
	}
	out := map[string][]byte{}
	for o := 1; o <= 8; o++ {
		out["orient"+itoa(o)+".jpg"] = withExifOrientation(plain.Bytes(), o)
	}
	return out
}

// withExifOrientation inserts an APP1 Exif segment holding one IFD entry, the orientation,
// after a JPEG's SOI marker (big-endian TIFF, as cameras write it).
func withExifOrientation(j []byte, o int) []byte {
	tiff := []byte{'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, byte(o), 0, 0, 0, 0, 0, 0}
	body := append([]byte("Exif\x00\x00"), tiff...)
	n := len(body) + 2
	seg := append([]byte{0xFF, 0xE1, byte(n >> 8), byte(n)}, body...)
	return append(append(append([]byte{}, j[:2]...), seg...), j[2:]...)
}

func pngName(kind string, w, h int) string {
	return kind + "-" + itoa(w) + "x" + itoa(h) + ".png"
}

func itoa(v int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}

var writeRefs = flag.String("write-reference-images", "", "write the reference PNGs into this folder (for scripts/visionref)")

func TestWriteReferenceImages(t *testing.T) {
	if *writeRefs == "" {
		t.Skip("only with -write-reference-images DIR")
	}
	all := referencePNGs()
	for name, b := range referenceJPEGs() {
		all[name] = b
	}
	for name, b := range all {
		if err := os.WriteFile(filepath.Join(*writeRefs, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
