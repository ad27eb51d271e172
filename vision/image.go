// Package vision turns the images a request carries into what a vision tower reads:
// decoded (PNG, JPEG, GIF, WebP), turned upright by their EXIF orientation, made RGB as
// PIL's convert("RGB") does, resized with Pillow's own resampling arithmetic, rescaled,
// normalised and cut into patches in the order each model's processor uses. The
// parameters come from the checkpoint's preprocessor_config.json.
package vision

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	_ "image/gif"  // registers GIF
	_ "image/jpeg" // registers JPEG
	_ "image/png"  // registers PNG

	_ "golang.org/x/image/webp" // registers WebP
)

// RGB is an 8-bit RGB image, rows top to bottom, 3 bytes a pixel.
type RGB struct {
	W, H int
	Pix  []uint8
}

// NewRGB makes a black w×h image.
func NewRGB(w, h int) *RGB { return &RGB{W: w, H: h, Pix: make([]uint8, w*h*3)} }

// Clone copies the image.
func (m *RGB) Clone() *RGB {
	return &RGB{W: m.W, H: m.H, Pix: append([]uint8(nil), m.Pix...)}
}

// Limits bound what Decode accepts, before any pixel is decoded.
type Limits struct {
	MaxPixels int // width × height of the file's image
}

// DefaultLimits refuses images over 64 megapixels (a 50,000×50,000 image would need 7.5 GB).
var DefaultLimits = Limits{MaxPixels: 64 << 20}

// ErrImage is wrapped by every error about an image's bytes, so that a server can answer 400.
var ErrImage = errors.New("invalid image")

// Decode reads a PNG, JPEG, GIF (its first frame) or WebP image, turns it upright by its
// EXIF orientation and returns its RGB pixels: alpha dropped, palettes and gray expanded,
// 16-bit color samples cut to their high byte and 16-bit gray clipped to 255, as PIL's convert("RGB") after
// ImageOps.exif_transpose gives them (JPEG's decoder is Go's, whose rounding may differ
// from libjpeg's by a level).
func Decode(data []byte, lim Limits) (*RGB, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: no data", ErrImage)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: unknown or corrupt format: %v", ErrImage, err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, fmt.Errorf("%w: %s image of %d×%d pixels", ErrImage, format, cfg.Width, cfg.Height)
	}
	if lim.MaxPixels > 0 && int64(cfg.Width)*int64(cfg.Height) > int64(lim.MaxPixels) {
		return nil, fmt.Errorf("%w: %s image of %d×%d pixels is over the %d-pixel limit", ErrImage, format, cfg.Width, cfg.Height, lim.MaxPixels)
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: corrupt or truncated %s: %v", ErrImage, format, err)
	}
	m := toRGB(img)
	return Orient(m, exifOrientation(format, data)), nil
}

// toRGB converts any decoded image to 8-bit RGB without compositing alpha (PIL's
// convert("RGB") keeps the color channels of RGBA and drops A).
func toRGB(img image.Image) *RGB {
	b := img.Bounds()
	m := NewRGB(b.Dx(), b.Dy())
	i := 0
	put := func(r, g, bl uint8) {
		m.Pix[i], m.Pix[i+1], m.Pix[i+2] = r, g, bl
		i += 3
	}
	switch src := img.(type) {
	case *image.NRGBA:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := src.Pix[(y-b.Min.Y)*src.Stride:]
			for x := range b.Dx() {
				put(row[x*4], row[x*4+1], row[x*4+2])
			}
		}
	case *image.NRGBA64:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			row := src.Pix[(y-b.Min.Y)*src.Stride:]
			for x := range b.Dx() {
				put(row[x*8], row[x*8+2], row[x*8+4])
			}
		}
	case *image.Gray:
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				v := src.GrayAt(x, y).Y
				put(v, v, v)
			}
		}
	case *image.Gray16:
		// PIL opens 16-bit gray as 32-bit integers ("I") and convert("RGB") clips them to
		// 0..255 rather than scaling: most such images come out white, as transformers sees them.
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				v := uint8(min(src.Gray16At(x, y).Y, 255))
				put(v, v, v)
			}
		}
	case *image.Paletted:
		pal := make([][3]uint8, len(src.Palette))
		for j, c := range src.Palette {
			n := color.NRGBAModel.Convert(c).(color.NRGBA)
			if nc, ok := c.(color.NRGBA); ok {
				n = nc
			}
			pal[j] = [3]uint8{n.R, n.G, n.B}
		}
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				p := pal[src.ColorIndexAt(x, y)]
				put(p[0], p[1], p[2])
			}
		}
	case *image.YCbCr:
		return ycbcrToRGB(src)
	default:
		// RGBA (opaque PNGs), CMYK and the rest: colors through Go's models.
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
				put(c.R, c.G, c.B)
			}
		}
	}
	return m
}

// Image is a decoded image and a hash of its pixels, which keys every cache that holds what the
// image became (its tokens' KV blocks, its encoded features).
type Image struct {
	*RGB
	Hash [32]byte
}

// NewImage hashes m's size and pixels.
func NewImage(m *RGB) Image {
	h := sha256.New()
	var dims [16]byte
	binary.LittleEndian.PutUint64(dims[:8], uint64(m.W))
	binary.LittleEndian.PutUint64(dims[8:], uint64(m.H))
	h.Write(dims[:])
	h.Write(m.Pix)
	var im Image
	im.RGB = m
	h.Sum(im.Hash[:0])
	return im
}
