package runner

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// A request's images (Request.Images) become rows of the prompt: each image placeholder
// token the chat template rendered is replaced by as many media ids as the tower gives
// the image rows (model.MediaIDs: from the hash of its pixels, so the prefix cache keys
// on the image), and the sequence's model.Media carries their features and M-RoPE grid.

// featureCache keeps the features of recently encoded images, by the hash of their pixels.
type featureCache struct {
	mu    sync.Mutex
	spans map[[32]byte]model.Span
	order [][32]byte
	bytes int
}

// featureCacheSize and featureCacheBytes bound what an engine keeps (model.VisionMemory plans
// them).
const (
	featureCacheSize  = model.FeatureCacheImages
	featureCacheBytes = model.FeatureCacheBytes
)

func (f *featureCache) get(h [32]byte) (model.Span, bool) {
	if f == nil {
		return model.Span{}, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.spans[h]
	return s, ok
}

func (f *featureCache) put(h [32]byte, s model.Span) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.spans == nil {
		f.spans = map[[32]byte]model.Span{}
	}
	size := 4 * len(s.Rows)
	if _, ok := f.spans[h]; ok || size > featureCacheBytes {
		return
	}
	for len(f.order) > 0 && (len(f.order) >= featureCacheSize || f.bytes+size > featureCacheBytes) {
		f.bytes -= 4 * len(f.spans[f.order[0]].Rows)
		delete(f.spans, f.order[0])
		f.order = f.order[1:]
	}
	f.spans[h] = s
	f.order = append(f.order, h)
	f.bytes += size
}

var (
	// ErrTextOnly is returned for images given to a model that reads text only.
	ErrTextOnly = errors.New("this model reads text only")
	// ErrImagePlacement is returned when the rendered prompt's image placeholders do not
	// match the images.
	ErrImagePlacement = errors.New("images and the prompt's placeholders do not match")
)

// withImages replaces the image placeholders of prompt by the images' rows. The prompt's
// placeholders stand for the last of images (the oldest go with the messages truncation
// dropped); a placeholder without an image is an error. It returns the new prompt, the
// media, and how many images it encoded (not found in the feature cache) in how long.
func (e *Engine) withImages(ctx context.Context, prompt []int32, images []vision.Image) ([]int32, *model.Media, imageStats, error) {
	var st imageStats
	v := e.Model.Vision()
	if v == nil {
		return nil, nil, st, fmt.Errorf("%w: it has no vision tower mlxg runs on this backend", ErrTextOnly)
	}
	tok := v.ImageTokenID()
	var at []int
	for i, id := range prompt {
		if id == tok {
			at = append(at, i)
		}
	}
	switch {
	case len(at) == 0:
		return nil, nil, st, fmt.Errorf("%w: the chat template placed no image in the prompt", ErrImagePlacement)
	case len(at) > len(images):
		return nil, nil, st, fmt.Errorf("%w: the prompt has %d image placeholders for %d images", ErrImagePlacement, len(at), len(images))
	}
	images = images[len(images)-len(at):]
	spans := make([]model.Span, len(images))
	var todo []vision.Image
	var todoAt []int
	for i, im := range images {
		if s, ok := e.features.get(im.Hash); ok {
			spans[i] = s
			continue
		}
		todo, todoAt = append(todo, im), append(todoAt, i)
	}
	if len(todo) > 0 {
		start := time.Now()
		enc, err := e.Model.EncodeImages(ctx, todo)
		if err != nil {
			return nil, nil, st, err
		}
		n := 0
		for k, s := range enc {
			spans[todoAt[k]] = s
			e.features.put(todo[k].Hash, s)
			n += s.N()
		}
		st.encoded, st.took = len(todo), time.Since(start)
		e.log.Info("images encoded", "images", len(todo), "image_tokens", n, "took", st.took.Round(time.Millisecond))
	}
	md := &model.Media{Hidden: e.Model.Config.HiddenSize}
	out := make([]int32, 0, len(prompt))
	k := 0
	for i, id := range prompt {
		if k < len(at) && at[k] == i {
			s := spans[k]
			s.Start = len(out)
			md.Spans = append(md.Spans, s)
			out = append(out, model.MediaIDs(images[k].Hash, s.N())...)
			k++
			continue
		}
		out = append(out, id)
	}
	return out, md, st, nil
}

// frameImages writes each image marker of the rendered text as the model's processor frames an
// image (model.ImageFramer: Gemma 3's "\n\n<start_of_image><image_soft_token><end_of_image>\n\n"),
// before tokenizing, so that the text around an image tokenizes as the processor's does; the
// placeholder token then becomes the image's rows (withImages). Text is unchanged for a model
// whose template renders the placeholder itself.
func (e *Engine) frameImages(text string) string {
	v := e.Model.Vision()
	f, ok := v.(model.ImageFramer)
	if !ok {
		return text
	}
	fr := f.ImageFrame()
	marker, end, image := e.Tokenizer.Token(fr.Marker), e.Tokenizer.Token(fr.End), e.Tokenizer.Token(v.ImageTokenID())
	if marker == "" || end == "" || image == "" {
		return text // withImages then finds no placeholder and says so
	}
	open := marker
	if fr.Open != 0 {
		if open = e.Tokenizer.Token(fr.Open); open == "" {
			return text
		}
	}
	return strings.ReplaceAll(text, marker, fr.Before+open+image+end+fr.After)
}

// imageStats is what withImages did: images encoded (not in the feature cache), and the time.
type imageStats struct {
	encoded int
	took    time.Duration
}

// chunkEnd is where a prefill chunk from start of at most n rows ends: before an image's
// rows rather than inside them, unless the image starts the chunk, which then takes it
// whole.
func chunkEnd(md *model.Media, offset, start, n, total int) int {
	end := min(start+n, total)
	if md == nil {
		return end
	}
	for _, s := range md.Spans {
		a, b := s.Start-offset, s.Start-offset+s.N()
		if a < end && b > end {
			if a > start {
				return a
			}
			return min(b, total)
		}
	}
	return end
}

// seqLen is how many positions caches hold: the first layer's that has a cache (a hybrid
// model's linear layers may have none until the model fills them).
func seqLen(caches []kvstore.Layer) int {
	for _, c := range caches {
		if c != nil {
			return c.Len()
		}
	}
	return 0
}
