package pipeline

import (
	"fmt"

	"github.com/mlxg/mlxg/runner/model"
)

// A sequence's media places are what every rank's layers need of its images: per image,
// where its rows start and its grid (Qwen's M-RoPE positions follow it, and the rope
// delta of the text after it; Gemma's image rows attend to each other over the span). The
// features stay on rank 0, which embeds them. In a message they are the image count, then
// per image its start and its three grid sizes.
const placeLen = 4

// mediaPlaces encodes md's places; a sequence without media is a single 0.
func mediaPlaces(md *model.Media) []int32 {
	if md == nil {
		return []int32{0}
	}
	out := make([]int32, 0, 1+placeLen*len(md.Spans))
	out = append(out, int32(len(md.Spans)))
	for _, s := range md.Spans {
		out = append(out, int32(s.Start), int32(s.Grid[0]), int32(s.Grid[1]), int32(s.Grid[2]))
	}
	return out
}

// readPlaces decodes one sequence's media places from the front of v: its media (nil
// when it has none: features elsewhere, model.Media.Elsewhere) and the rest of v.
func readPlaces(v []int32, hidden int) (*model.Media, []int32, error) {
	if len(v) == 0 {
		return nil, v, fmt.Errorf("a pass's media places end early")
	}
	n := int(v[0])
	v = v[1:]
	if n < 0 || n*placeLen > len(v) {
		return nil, v, fmt.Errorf("a pass's media places name %d images in %d values", n, len(v))
	}
	if n == 0 {
		return nil, v, nil
	}
	md := &model.Media{Hidden: hidden, Elsewhere: true}
	end := 0
	for i := range n {
		p := v[i*placeLen : (i+1)*placeLen]
		s := model.Span{Start: int(p[0]), Grid: [3]int{int(p[1]), int(p[2]), int(p[3])}}
		if s.Start < end || s.Grid[0] <= 0 || s.Grid[1] <= 0 || s.Grid[2] <= 0 {
			return nil, v, fmt.Errorf("bad media places: image %d at %d with grid %v", i, s.Start, s.Grid)
		}
		end = s.Start + s.N()
		md.Spans = append(md.Spans, s)
	}
	return md, v[n*placeLen:], nil
}
