package vision

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
)

// Processor is a checkpoint's image preprocessing, read from its preprocessor_config.json
// (or the image_processor of processor_config.json): how an image is resized, rescaled,
// normalised and cut into the patches its vision tower reads.
type Processor struct {
	Kind      string // "qwen" (smart_resize, temporal patches, 2×2 merge order), "fixed" (Gemma 3's SigLIP) or "gemma4"
	Filter    Filter
	Rescale   float64 // rescale_factor (1/255)
	Mean, Std [3]float64

	// Qwen: the pixel budget (size.shortest_edge and size.longest_edge, or min_pixels and max_pixels),
	// patch_size, temporal_patch_size and merge_size.
	MinPixels, MaxPixels        int
	Patch, TemporalPatch, Merge int

	// Fixed: the size every image is resized to, and the language-model tokens an image
	// becomes (the model sets it: Gemma 3's mm_tokens_per_image).
	// Gemma 4: Tokens is max_soft_tokens, the most tokens an image may become; Patch is
	// patch_size and Merge pooling_kernel_size (the side of the windows the tower averages).
	Width, Height int
	Tokens        int
}

// gemma4SoftTokens are the token budgets Gemma4ImageProcessor accepts for max_soft_tokens.
var gemma4SoftTokens = []int{70, 140, 280, 560, 1120}

type rawConfig struct {
	ImageProcessorType string          `json:"image_processor_type"`
	ImageProcessor     json.RawMessage `json:"image_processor"`
	Resample           *int            `json:"resample"`
	RescaleFactor      *float64        `json:"rescale_factor"`
	DoRescale          *bool           `json:"do_rescale"`
	DoNormalize        *bool           `json:"do_normalize"`
	ImageMean          []float64       `json:"image_mean"`
	ImageStd           []float64       `json:"image_std"`
	Size               map[string]int  `json:"size"`
	MinPixels          int             `json:"min_pixels"`
	MaxPixels          int             `json:"max_pixels"`
	PatchSize          int             `json:"patch_size"`
	TemporalPatchSize  int             `json:"temporal_patch_size"`
	MergeSize          int             `json:"merge_size"`
	PanAndScan         *bool           `json:"do_pan_and_scan"`
	MaxSoftTokens      int             `json:"max_soft_tokens"`
	PoolingKernelSize  int             `json:"pooling_kernel_size"`
}

// LoadProcessor reads a checkpoint folder's image preprocessing.
func LoadProcessor(dir string) (*Processor, error) {
	for _, name := range []string{"preprocessor_config.json", "processor_config.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		p, err := ParseProcessor(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return p, nil
	}
	return nil, fmt.Errorf("no preprocessor_config.json or processor_config.json in %s", dir)
}

// ParseProcessor reads a preprocessor_config.json.
func ParseProcessor(b []byte) (*Processor, error) {
	var c rawConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, err
	}
	if len(c.ImageProcessor) > 0 { // processor_config.json nests it
		if err := json.Unmarshal(c.ImageProcessor, &c); err != nil {
			return nil, err
		}
	}
	p := &Processor{Rescale: 1.0 / 255, Mean: [3]float64{0.5, 0.5, 0.5}, Std: [3]float64{0.5, 0.5, 0.5}}
	if c.RescaleFactor != nil {
		p.Rescale = *c.RescaleFactor
	}
	if c.DoRescale != nil && !*c.DoRescale {
		p.Rescale = 1
	}
	if len(c.ImageMean) == 3 && len(c.ImageStd) == 3 {
		copy(p.Mean[:], c.ImageMean)
		copy(p.Std[:], c.ImageStd)
	}
	if c.DoNormalize != nil && !*c.DoNormalize {
		p.Mean, p.Std = [3]float64{}, [3]float64{1, 1, 1}
	}
	resample := 3
	switch c.ImageProcessorType {
	case "Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast", "Qwen3VLImageProcessor", "Qwen3VLImageProcessorFast":
		p.Kind = "qwen"
		p.Patch, p.TemporalPatch, p.Merge = c.PatchSize, c.TemporalPatchSize, c.MergeSize
		p.MinPixels, p.MaxPixels = c.MinPixels, c.MaxPixels
		if v, ok := c.Size["shortest_edge"]; ok {
			p.MinPixels = v
		}
		if v, ok := c.Size["longest_edge"]; ok {
			p.MaxPixels = v
		}
		if p.Patch <= 0 || p.TemporalPatch <= 0 || p.Merge <= 0 || p.MinPixels <= 0 || p.MaxPixels < p.MinPixels {
			return nil, fmt.Errorf("%s: patch_size %d, temporal_patch_size %d, merge_size %d, pixels %d..%d are not a usable set",
				c.ImageProcessorType, p.Patch, p.TemporalPatch, p.Merge, p.MinPixels, p.MaxPixels)
		}
	case "Gemma3ImageProcessor", "Gemma3ImageProcessorFast", "Gemma3ImageProcessorPil", "SiglipImageProcessor", "SiglipImageProcessorFast", "SiglipImageProcessorPil":
		p.Kind = "fixed"
		resample = 2
		p.Width, p.Height = c.Size["width"], c.Size["height"]
		if p.Width <= 0 || p.Height <= 0 {
			return nil, fmt.Errorf("%s: size %v has no width and height", c.ImageProcessorType, c.Size)
		}
		if c.PanAndScan != nil && *c.PanAndScan {
			return nil, fmt.Errorf("%s: do_pan_and_scan (crops of wide images as extra images) is not supported", c.ImageProcessorType)
		}
	case "Gemma4ImageProcessor", "Gemma4ImageProcessorFast", "Gemma4ImageProcessorPil":
		// Gemma4ImageProcessor's defaults: pixels rescaled to [0, 1] and not normalised
		// (the tower maps them to [-1, 1] itself), bicubic, 16-pixel patches pooled 3×3,
		// at most 280 tokens an image.
		p.Kind = "gemma4"
		p.Patch, p.Merge, p.Tokens = 16, 3, 280
		if c.DoNormalize == nil || !*c.DoNormalize {
			p.Mean, p.Std = [3]float64{}, [3]float64{1, 1, 1}
		}
		if c.PatchSize != 0 {
			p.Patch = c.PatchSize
		}
		if c.PoolingKernelSize != 0 {
			p.Merge = c.PoolingKernelSize
		}
		if c.MaxSoftTokens != 0 {
			p.Tokens = c.MaxSoftTokens
		}
		if !slices.Contains(gemma4SoftTokens, p.Tokens) || p.Patch <= 0 || p.Merge <= 0 {
			return nil, fmt.Errorf("%s: max_soft_tokens %d (one of %v), patch_size %d, pooling_kernel_size %d are not a usable set",
				c.ImageProcessorType, p.Tokens, gemma4SoftTokens, p.Patch, p.Merge)
		}
	default:
		return nil, fmt.Errorf("image processor %q is not supported", c.ImageProcessorType)
	}
	if c.Resample != nil {
		resample = *c.Resample
	}
	f, ok := FilterByPIL(resample)
	if !ok {
		return nil, fmt.Errorf("resample %d is not supported (bilinear 2, bicubic 3, box 4, Lanczos 1 are)", resample)
	}
	p.Filter = f
	return p, nil
}

// SmartResize is the size Qwen's processors resize an h×w image to: each side a multiple
// of factor, the area within [minPixels, maxPixels], the aspect ratio kept as nearly as
// those allow. Rounding is Python's (halves to even), as the processors compute it.
func SmartResize(h, w, factor, minPixels, maxPixels int) (int, int, error) {
	if h <= 0 || w <= 0 {
		return 0, 0, fmt.Errorf("%w: %d×%d pixels", ErrImage, w, h)
	}
	if float64(max(h, w))/float64(min(h, w)) > 200 {
		return 0, 0, fmt.Errorf("%w: aspect ratio of %d×%d is over 200", ErrImage, w, h)
	}
	f := float64(factor)
	hb := int(math.RoundToEven(float64(h)/f)) * factor
	wb := int(math.RoundToEven(float64(w)/f)) * factor
	switch {
	case hb*wb > maxPixels:
		beta := math.Sqrt(float64(h*w) / float64(maxPixels))
		hb = max(factor, int(math.Floor(float64(h)/beta/f))*factor)
		wb = max(factor, int(math.Floor(float64(w)/beta/f))*factor)
	case hb*wb < minPixels:
		beta := math.Sqrt(float64(minPixels) / float64(h*w))
		hb = int(math.Ceil(float64(h)*beta/f)) * factor
		wb = int(math.Ceil(float64(w)*beta/f)) * factor
	}
	return hb, wb, nil
}

// Gemma4Size is the size Gemma4ImageProcessor resizes an h×w image to: the largest with
// the aspect ratio kept whose sides are multiples of pool·patch and whose patches number at
// most maxPatches. A side that would round to nothing becomes one window (pool·patch) and the
// other the whole ratio's multiple of it, capped at the longest side the budget allows.
func Gemma4Size(h, w, patch, maxPatches, pool int) (int, int, error) {
	if h <= 0 || w <= 0 {
		return 0, 0, fmt.Errorf("%w: %d×%d pixels", ErrImage, w, h)
	}
	target := maxPatches * patch * patch
	f := math.Sqrt(float64(target) / float64(h*w))
	side := pool * patch
	th := int(math.Floor(f*float64(h)/float64(side))) * side
	tw := int(math.Floor(f*float64(w)/float64(side))) * side
	longest := (maxPatches / (pool * pool)) * side
	switch {
	case th == 0 && tw == 0:
		return 0, 0, fmt.Errorf("%w: %d×%d pixels resize to nothing", ErrImage, w, h)
	case th == 0:
		th, tw = side, min((w/h)*side, longest)
	case tw == 0:
		th, tw = min((h/w)*side, longest), side
	}
	if th*tw > target {
		return 0, 0, fmt.Errorf("%w: %d×%d pixels resize to %d×%d, over the %d-patch budget", ErrImage, w, h, tw, th, maxPatches)
	}
	return th, tw, nil
}

// Pixels is a preprocessed image: the rows of patches the tower reads, each Channels ×
// TemporalPatch × Patch × Patch values (Qwen), Patch × Patch × Channels values (Gemma 4,
// row-major over the image's patches), or the whole image channel-first (fixed).
type Pixels struct {
	Values []float32
	Rows   int // number of patches (Qwen) or 1 (fixed)
	Cols   int
	Grid   [3]int // temporal, height, width in patches (Qwen)
}

// ImageTokens is how many language-model tokens an image of w×h pixels becomes (after merging),
// or for a fixed-size processor the count its model set (Tokens), 0 when unset.
func (p *Processor) ImageTokens(w, h int) int {
	if p.Kind == "gemma4" {
		rh, rw, err := Gemma4Size(h, w, p.Patch, p.Tokens*p.Merge*p.Merge, p.Merge)
		if err != nil {
			return 0
		}
		return (rh / p.Patch) * (rw / p.Patch) / (p.Merge * p.Merge)
	}
	if p.Kind != "qwen" {
		return p.Tokens
	}
	rh, rw, err := SmartResize(h, w, p.Patch*p.Merge, p.MinPixels, p.MaxPixels)
	if err != nil {
		return 0
	}
	return (rh / (p.Patch * p.Merge)) * (rw / (p.Patch * p.Merge))
}

// MaxPatches is the most patches (Pixels.Rows) an image becomes: smart_resize keeps the area
// within MaxPixels, so at most MaxPixels/patch² for Qwen; one row for a fixed-size processor.
func (p *Processor) MaxPatches() int {
	if p.Kind == "gemma4" {
		return p.Tokens * p.Merge * p.Merge
	}
	if p.Kind != "qwen" {
		return 1
	}
	return p.MaxPixels / (p.Patch * p.Patch)
}

// Process resizes, rescales, normalises and arranges one image.
func (p *Processor) Process(m *RGB) (*Pixels, error) {
	switch p.Kind {
	case "qwen":
		factor := p.Patch * p.Merge
		h, w, err := SmartResize(m.H, m.W, factor, p.MinPixels, p.MaxPixels)
		if err != nil {
			return nil, err
		}
		return p.qwenPatches(p.normalise(Resize(m, w, h, p.Filter)), h, w), nil
	case "gemma4":
		h, w, err := Gemma4Size(m.H, m.W, p.Patch, p.Tokens*p.Merge*p.Merge, p.Merge)
		if err != nil {
			return nil, err
		}
		if h != m.H || w != m.W { // an image already of its size is not resampled
			m = Resize(m, w, h, p.Filter)
		}
		return p.gemma4Patches(p.normalise(m), h, w), nil
	case "fixed":
		r := Resize(m, p.Width, p.Height, p.Filter)
		v := p.normalise(r)
		return &Pixels{Values: v, Rows: 1, Cols: len(v)}, nil
	}
	return nil, fmt.Errorf("image processor kind %q", p.Kind)
}

// normalise returns the image channel-first as float32: (v × rescale − mean) / std per
// channel, each step rounded to float32 as the processors' numpy arrays are.
func (p *Processor) normalise(m *RGB) []float32 {
	n := m.W * m.H
	out := make([]float32, 3*n)
	for c := range 3 {
		mean, std := float32(p.Mean[c]), float32(p.Std[c])
		for i := range n {
			v := float32(float64(m.Pix[i*3+c]) * p.Rescale)
			out[c*n+i] = (v - mean) / std
		}
	}
	return out
}

// qwenPatches cuts a channel-first image into Qwen's patch rows: the image repeated to
// fill the temporal patch, then patches in the order of 2×2 (merge×merge) groups, each row
// channel, time, patch row, patch column.
func (p *Processor) qwenPatches(img []float32, h, w int) *Pixels {
	ps, tp, mg := p.Patch, p.TemporalPatch, p.Merge
	n := h * w
	gh, gw := h/ps, w/ps
	cols := 3 * tp * ps * ps
	out := &Pixels{Values: make([]float32, gh*gw*cols), Rows: gh * gw, Cols: cols, Grid: [3]int{1, gh, gw}}
	row := 0
	for bh := 0; bh < gh/mg; bh++ {
		for bw := 0; bw < gw/mg; bw++ {
			for mh := range mg {
				for mw := range mg {
					py, px := (bh*mg+mh)*ps, (bw*mg+mw)*ps
					dst := out.Values[row*cols:]
					i := 0
					for c := range 3 {
						for range tp {
							for y := range ps {
								for x := range ps {
									dst[i] = img[c*n+(py+y)*w+px+x]
									i++
								}
							}
						}
					}
					row++
				}
			}
		}
	}
	return out
}

// gemma4Patches cuts a channel-first image into Gemma 4's patch rows: patches row-major over
// the image, each row its pixels row-major with the channels of a pixel together.
func (p *Processor) gemma4Patches(img []float32, h, w int) *Pixels {
	ps := p.Patch
	n := h * w
	gh, gw := h/ps, w/ps
	cols := 3 * ps * ps
	out := &Pixels{Values: make([]float32, gh*gw*cols), Rows: gh * gw, Cols: cols, Grid: [3]int{1, gh, gw}}
	i := 0
	for py := range gh {
		for px := range gw {
			for y := range ps {
				for x := range ps {
					for c := range 3 {
						out.Values[i] = img[c*n+(py*ps+y)*w+px*ps+x]
						i++
					}
				}
			}
		}
	}
	return out
}
