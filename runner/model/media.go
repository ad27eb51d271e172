package model

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"sync"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/vision"
)

// MediaBase is the first id of media tokens: the rows of a prompt that an image's features
// fill carry ids from MediaBase on, derived from a hash of the image's pixels, so that
// everything keyed by token ids (the prefix cache in RAM and on SSD, prompt coalescing) tells
// one image from another without knowing about images. No vocabulary comes near it.
const MediaBase = 1 << 30

// MediaIDs are the ids of an image's n rows: 30 bits of sha256(hash, row) each.
func MediaIDs(hash [32]byte, n int) []int32 {
	out := make([]int32, n)
	var buf [40]byte
	copy(buf[:], hash[:])
	for k := range n {
		binary.LittleEndian.PutUint64(buf[32:], uint64(k))
		sum := sha256.Sum256(buf[:])
		out[k] = MediaBase | int32(binary.LittleEndian.Uint32(sum[:])&(MediaBase-1))
	}
	return out
}

// Span is one image's rows in a sequence: the features its tower computed, fed to the
// language model in place of token embeddings, and the grid its M-RoPE positions follow.
type Span struct {
	Start int       // the sequence position of its first row
	Grid  [3]int    // temporal, height and width in the language model's tokens (after merging)
	Rows  []float32 // Grid's product × the hidden size
}

// N is the number of rows.
func (s Span) N() int { return s.Grid[0] * s.Grid[1] * s.Grid[2] }

// Media is what a sequence holds besides tokens: its images' spans, in order and apart.
type Media struct {
	Spans  []Span
	Hidden int
	// Elsewhere marks media whose spans carry their places and grids but no features: a
	// pipeline worker's, whose passes never embed (rank 0 does, runner/pipeline). Its
	// image rows' embeddings are left to the process that has them.
	Elsewhere bool
}

// Position is the M-RoPE position (temporal, height, width) of sequence position i, as
// Qwen's get_rope_index lays them out: text positions run on from the last position
// before them; an image's rows start at the position after the text before it and
// spread over its grid; the text after an image starts after the image's largest
// position. A sequence with no images has (i, i, i).
func (m *Media) Position(i int) [3]int {
	shift := 0
	for _, s := range m.Spans {
		if i < s.Start {
			break
		}
		if i < s.Start+s.N() {
			k := i - s.Start
			p := s.Start + shift
			hw := s.Grid[1] * s.Grid[2]
			return [3]int{p + k/hw, p + (k%hw)/s.Grid[2], p + k%s.Grid[2]}
		}
		shift += max(s.Grid[0], s.Grid[1], s.Grid[2]) - s.N()
	}
	return [3]int{i + shift, i + shift, i + shift}
}

// At returns the span holding sequence position i and the row within it.
func (m *Media) At(i int) (*Span, int, bool) {
	for k := range m.Spans {
		s := &m.Spans[k]
		if i >= s.Start && i < s.Start+s.N() {
			return s, i - s.Start, true
		}
	}
	return nil, 0, false
}

var (
	mediaMu sync.Mutex
	media   = map[*kvstore.Layer]*Media{}
)

// SetMedia attaches m to the sequence whose caches these are (nil detaches it), for the
// passes over them to read: the engine sets it for a request with images and clears it
// when the request ends.
func SetMedia(caches []kvstore.Layer, m *Media) {
	if len(caches) == 0 {
		return
	}
	mediaMu.Lock()
	defer mediaMu.Unlock()
	if m == nil {
		delete(media, &caches[0])
		return
	}
	media[&caches[0]] = m
}

// MediaOf is the media attached to caches, nil when none is.
func MediaOf(caches []kvstore.Layer) *Media {
	if len(caches) == 0 {
		return nil
	}
	mediaMu.Lock()
	defer mediaMu.Unlock()
	return media[&caches[0]]
}

// checkIDs checks that tokens are ids of the vocabulary, or media ids of a sequence with
// media.
func checkIDs(tokens []int32, caches []kvstore.Layer, vocab int) error {
	var md *Media
	for i, id := range tokens {
		if id >= 0 && int(id) < vocab {
			continue
		}
		if id >= MediaBase {
			if md == nil {
				md = MediaOf(caches)
			}
			if md != nil {
				continue
			}
		}
		return fmt.Errorf("model: token %d (at %d) is outside the vocabulary of %d", id, i, vocab)
	}
	return nil
}

// VisionNetwork is a Network that reads images: a vision tower and the processor that
// prepares its input.
type VisionNetwork interface {
	Network
	// Processor is the checkpoint's image preprocessing.
	Processor() *vision.Processor
	// EncodeImages runs the tower over preprocessed images and returns their features in
	// order: per image, its Grid (after merging) and as many rows of the language model's
	// hidden size.
	EncodeImages(c compute.Context, images []*vision.Pixels) (compute.Tensor, [][3]int)
	// TokenID is the placeholder token a chat template renders for one image.
	ImageTokenID() int32
}

// ImageFrame is how a processor writes an image into the rendered text before it is
// tokenized: each Marker the chat template rendered becomes Before, Marker, the image's
// placeholder token (which its rows then replace), End, After. Gemma 3's: "\n\n",
// <start_of_image>, <image_soft_token>, <end_of_image>, "\n\n". With Open set, the marker
// is the placeholder itself and Open is written in its place before it: Gemma 4's template
// renders <|image|>, which its processor writes as <|image>, <|image|>, <image|>.
type ImageFrame struct {
	Marker, End   int32
	Open          int32 // 0: the marker opens the frame
	Before, After string
}

// ImageFramer is a VisionNetwork whose images are framed in the text (ImageFrame); the
// chat template of one without renders the placeholder token itself.
type ImageFramer interface {
	ImageFrame() ImageFrame
}

// Vision is the network's vision side, nil when the model reads text only (its
// architecture has no tower mlxg runs, or the checkpoint has none, or the backend lacks
// the tower's operations).
func (m *Model) Vision() VisionNetwork {
	if v, ok := m.net.(VisionNetwork); ok && v.Processor() != nil {
		return v
	}
	return nil
}

// EncodeImages preprocesses and encodes images with the model's tower: one span per
// image, Start left 0 for the caller to place.
func (m *Model) EncodeImages(ctx context.Context, images []vision.Image) ([]Span, error) {
	v := m.Vision()
	if v == nil {
		return nil, fmt.Errorf("model: %s reads text only", m.Config.ModelType)
	}
	// Passes of at most one largest image's patches, so that the peak is what the memory plan
	// counts (VisionMemory.Encode) however many images a request holds: images are preprocessed
	// as their pass comes, and a pass of several small images encodes each as it would alone.
	budget := v.Processor().MaxPatches()
	out := make([]Span, 0, len(images))
	var pass []*vision.Pixels
	rows := 0
	flush := func() error {
		spans, err := m.encodePass(ctx, v, pass)
		out = append(out, spans...)
		pass, rows = nil, 0
		return err
	}
	for _, im := range images {
		p, err := v.Processor().Process(im.RGB)
		if err != nil {
			return nil, err
		}
		if len(pass) > 0 && rows+p.Rows > budget {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		pass, rows = append(pass, p), rows+p.Rows
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return out, nil
}

// encodePass runs the tower once over px.
func (m *Model) encodePass(ctx context.Context, v VisionNetwork, px []*vision.Pixels) ([]Span, error) {
	c := m.backend.NewContext()
	defer c.Close()
	t, grids := v.EncodeImages(&cancellable{Context: c, ctx: ctx}, px)
	rows, err := c.Float32s(t)
	if ctx.Err() != nil {
		err = ctx.Err()
	}
	if err != nil {
		return nil, err
	}
	hidden := m.Config.HiddenSize
	out := make([]Span, len(px))
	off := 0
	for i, g := range grids {
		n := g[0] * g[1] * g[2] * hidden
		if off+n > len(rows) {
			return nil, fmt.Errorf("model: the vision tower returned %d values for grids %v", len(rows), grids)
		}
		out[i] = Span{Grid: g, Rows: append([]float32(nil), rows[off:off+n]...)}
		off += n
	}
	m.Recycle(rows)
	return out, nil
}

// LinearData binds an out × in float matrix made on the host (a weight the architecture
// rearranges at load: a convolution's kernel read as a matrix) as prefix.weight, with the
// checkpoint's prefix.bias when it has one.
func (l *Loader) LinearData(prefix string, data []float32, out, in int) compute.Weight {
	if l.err != nil {
		return nil
	}
	if len(data) != out*in {
		l.Fail(fmt.Errorf("%s: %d values for a %d×%d matrix", prefix, len(data), out, in))
		return nil
	}
	src := memSource{prefix + ".weight": f32Tensor(prefix+".weight", data, out, in)}
	if b, ok := l.ckpt.Tensor(prefix + ".bias"); ok {
		src[prefix+".bias"] = b
	}
	w, err := l.Backend.Weight(src, prefix, compute.Quant{})
	if err != nil {
		l.Fail(err)
		return nil
	}
	return w
}

// memSource is a compute.Source of tensors made in memory.
type memSource map[string]*safetensors.Tensor

func (m memSource) Tensor(name string) (*safetensors.Tensor, bool) { t, ok := m[name]; return t, ok }

func f32Tensor(name string, data []float32, shape ...int) *safetensors.Tensor {
	b := make([]byte, 4*len(data))
	for i, v := range data {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return &safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: name, DType: safetensors.F32, Shape: shape}, Data: b}
}

// PatchKernel reads a Qwen vision tower's patch embedding (a Conv3d whose stride is its
// kernel) as an out × (channels·temporal·patch·patch) matrix in the order of the
// processor's patch rows: from Hugging Face's [out, channels, temporal, patch, patch] as
// it is, from MLX's channels-last [out, temporal, patch, patch, channels] rearranged.
func (l *Loader) PatchKernel(name string, out, C, T, P int) []float32 {
	t, ok := l.Tensor(name)
	if !ok {
		l.Fail(fmt.Errorf("checkpoint has no tensor %q", name))
		return nil
	}
	v, err := t.Float32s()
	if err != nil {
		l.Fail(fmt.Errorf("%s: %w", name, err))
		return nil
	}
	sh := t.Shape
	switch {
	case len(sh) == 5 && sh[0] == out && sh[1] == C && sh[2] == T && sh[3] == P && sh[4] == P:
		return v
	case len(sh) == 5 && sh[0] == out && sh[1] == T && sh[2] == P && sh[3] == P && sh[4] == C:
		res := make([]float32, len(v))
		in := C * T * P * P
		for o := range out {
			for c := range C {
				for tt := range T {
					for y := range P {
						for x := range P {
							res[o*in+((c*T+tt)*P+y)*P+x] = v[o*in+(((tt*P+y)*P+x)*C+c)]
						}
					}
				}
			}
		}
		return res
	}
	l.Fail(fmt.Errorf("%s has shape %v: want [%d, %d, %d, %d, %d] or MLX's [%d, %d, %d, %d, %d]", name, sh, out, C, T, P, P, out, T, P, P, C))
	return nil
}
