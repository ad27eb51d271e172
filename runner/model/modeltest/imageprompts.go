package modeltest

import (
	"context"
	"slices"
	"testing"

	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// ImagePrompts is what CheckImagePrompts runs on an M-RoPE model with a tower.
type ImagePrompts struct {
	// Images: the first two are placed in the prompts; the third, of the first's size,
	// takes the first's place.
	Images [3]vision.Image
	Chunks []int // the prefill chunks that must give one pass's logits
	// FirstGrid, when set, is the grid the first image must have.
	FirstGrid [3]int
	// PlainMRoPE: without images, M-RoPE at positions (i, i, i) computes plain RoPE's
	// logits (where no other test checks it).
	PlainMRoPE bool
	// ImageFirst adds a prompt that opens with the second image.
	ImageFirst bool
}

// CheckImagePrompts: prompts with 0, 1 and 2 images run; chunked prefill (chunks cutting
// through an image or not) gives one pass's logits; the image rows change the logits of the
// text alone; another image of the same size in the first one's place gives other media ids
// and (where the first image is c.Images[0]) other logits.
func CheckImagePrompts(t *testing.T, m *model.Model, c ImagePrompts) {
	t.Helper()
	imgs := c.Images[:]
	spans, err := m.EncodeImages(context.Background(), imgs)
	if err != nil {
		t.Fatal(err)
	}
	if c.FirstGrid != [3]int{} && spans[0].Grid != c.FirstGrid {
		t.Fatalf("a %d×%d image's grid %v, want %v", imgs[0].W, imgs[0].H, spans[0].Grid, c.FirstGrid)
	}
	text := Tokens(5, 12)
	run := func(ids []int32, md *model.Media, chunk int) []float32 {
		return ForwardMediaChunks(t, m, ids, md, chunk)
	}
	plain := run(text, nil, len(text))
	if c.PlainMRoPE {
		if got := run(text, &model.Media{Hidden: m.Config.HiddenSize}, len(text)); MaxRel(got, plain) > 1e-6 {
			t.Errorf("M-RoPE at positions (i, i, i) differs from RoPE by %.3g", MaxRel(got, plain))
		}
	}
	type prompt struct {
		name   string
		at     []int
		images []int
	}
	cases := []prompt{
		{"one image", []int{3}, []int{0}},
		{"two images", []int{2, 7}, []int{0, 1}},
	}
	if c.ImageFirst {
		cases = append(cases, prompt{"image first", []int{0}, []int{1}})
	}
	for _, pc := range cases {
		var sp []model.Span
		var im []vision.Image
		for _, i := range pc.images {
			sp, im = append(sp, spans[i]), append(im, imgs[i])
		}
		ids, md := MediaAt(m, text, pc.at, sp, im)
		whole := run(ids, md, len(ids))
		for _, chunk := range c.Chunks {
			if r := MaxRel(run(ids, md, chunk), whole); r > 1e-5 {
				t.Errorf("%s: chunks of %d differ from one pass by %.3g", pc.name, chunk, r)
			}
		}
		if r := MaxRel(whole, plain); r < 1e-3 {
			t.Errorf("%s: the image rows changed nothing (%.3g)", pc.name, r)
		}
		// The same prompt with another image of the same size in the first slot.
		other := slices.Clone(sp)
		other[0] = spans[2]
		oids, omd := MediaAt(m, text, pc.at, other, append([]vision.Image{imgs[2]}, im[1:]...))
		if slices.Equal(oids, ids) {
			t.Errorf("%s: another image gave the same media ids", pc.name)
		}
		if pc.images[0] == 0 {
			if r := MaxRel(run(oids, omd, len(oids)), whole); r < 1e-4 {
				t.Errorf("%s: another image gave the same logits (%.3g)", pc.name, r)
			}
		}
	}
}
