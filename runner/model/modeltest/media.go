package modeltest

import (
	"context"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/vision"
)

// MediaPrompt turns a transformers prompt, whose images are runs of imageToken, into mlxg's:
// the k-th run becomes the encoded image spans[which[k]] (ids from imgs[which[k]]'s pixel
// hash), placed where the run starts. It fails the test when the runs and the images
// disagree.
func MediaPrompt(t *testing.T, name string, inputIDs []int32, imageToken int32, which []int, spans []model.Span, imgs []vision.Image, hidden int) ([]int32, *model.Media) {
	t.Helper()
	md := &model.Media{Hidden: hidden}
	ids := make([]int32, 0, len(inputIDs))
	k := 0
	for i := 0; i < len(inputIDs); {
		if inputIDs[i] != imageToken {
			ids = append(ids, inputIDs[i])
			i++
			continue
		}
		if k >= len(which) {
			t.Fatalf("%s: more image runs than images %v", name, which)
		}
		s := spans[which[k]]
		s.Start = i
		md.Spans = append(md.Spans, s)
		ids = append(ids, model.MediaIDs(imgs[which[k]].Hash, s.N())...)
		i += s.N()
		k++
	}
	if len(ids) != len(inputIDs) {
		t.Fatalf("%s: %d rows for transformers' %d", name, len(ids), len(inputIDs))
	}
	return ids, md
}

// ForwardMedia is the last position's logits of ids with their images md, through fresh
// float32 caches.
func ForwardMedia(t testing.TB, m *model.Model, ids []int32, md *model.Media) []float32 {
	t.Helper()
	return ForwardMediaChunks(t, m, ids, md, len(ids))
}

// ForwardMediaChunks is ForwardMedia with the prompt prefilled in chunks of chunk rows.
func ForwardMediaChunks(t testing.TB, m *model.Model, ids []int32, md *model.Media, chunk int) []float32 {
	t.Helper()
	caches := mediaCaches(t, m, md)
	defer model.SetMedia(caches, nil)
	var last []float32
	for i := 0; i < len(ids); i += chunk {
		var err error
		if last, err = m.Forward(context.Background(), ids[i:min(i+chunk, len(ids))], caches, false); err != nil {
			t.Fatal(err)
		}
	}
	return last
}

// ForwardMediaRows is every row's logits of ids with their images md in one pass through
// fresh float32 caches.
func ForwardMediaRows(t testing.TB, m *model.Model, ids []int32, md *model.Media) []float32 {
	t.Helper()
	caches := mediaCaches(t, m, md)
	defer model.SetMedia(caches, nil)
	out, err := m.Forward(context.Background(), ids, caches, true)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// mediaCaches is fresh float32 caches of m with md attached (the caller detaches it).
func mediaCaches(t testing.TB, m *model.Model, md *model.Media) []kvstore.Layer {
	t.Helper()
	caches, err := m.NewCaches(true)
	if err != nil {
		t.Fatal(err)
	}
	model.SetMedia(caches, md)
	return caches
}

// MediaAt lays out text tokens with images after the given text positions (at, one per
// image, ascending): it returns the ids (media ids in the images' rows) and the media.
func MediaAt(m *model.Model, text []int32, at []int, spans []model.Span, images []vision.Image) ([]int32, *model.Media) {
	md := &model.Media{Hidden: m.Config.HiddenSize}
	var ids []int32
	k := 0
	for i := 0; i <= len(text); i++ {
		for k < len(at) && at[k] == i {
			s := spans[k]
			s.Start = len(ids)
			md.Spans = append(md.Spans, s)
			ids = append(ids, model.MediaIDs(images[k].Hash, s.N())...)
			k++
		}
		if i < len(text) {
			ids = append(ids, text[i])
		}
	}
	return ids, md
}

// TwoImagePrompt encodes a and b with m and lays them out as 5 text tokens, image a, 4
// text tokens, image b, 3 text tokens (ids below 240).
func TwoImagePrompt(t testing.TB, m *model.Model, a, b vision.Image) ([]int32, *model.Media) {
	t.Helper()
	spans, err := m.EncodeImages(context.Background(), []vision.Image{a, b})
	if err != nil {
		t.Fatal(err)
	}
	md := &model.Media{Hidden: m.Config.HiddenSize}
	var ids []int32
	text := func(n int) {
		for i := range n {
			ids = append(ids, int32(10+len(ids)*7+i)%240)
		}
	}
	text(5)
	for k, im := range []vision.Image{a, b} {
		s := spans[k]
		s.Start = len(ids)
		md.Spans = append(md.Spans, s)
		ids = append(ids, model.MediaIDs(im.Hash, s.N())...)
		text(4 - k)
	}
	return ids, md
}

// MaxAbs is max|a-b|, infinite when the lengths differ.
func MaxAbs(a, b []float32) float64 {
	if len(a) != len(b) {
		return math.Inf(1)
	}
	var m float64
	for i := range a {
		m = max(m, math.Abs(float64(a[i]-b[i])))
	}
	return m
}

// Image is a w×h test image whose pixels depend on seed: the vision families' tests and the
// engine tests of runner/runnertest draw the same image from the same arguments.
func Image(w, h int, seed uint8) vision.Image {
	m := vision.NewRGB(w, h)
	for i := range m.Pix {
		m.Pix[i] = uint8(i*7+int(seed)*31) ^ seed
	}
	return vision.NewImage(m)
}

// Float64s opens the checkpoint in dir (closed when the test ends) and returns a reader of
// its tensors as float64, for the plain references: name is the tensor's after prefix, and
// a tensor that is missing or not a float fails the test.
func Float64s(t testing.TB, dir, prefix string) func(name string) []float64 {
	t.Helper()
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ck.Close() })
	return func(name string) []float64 {
		t.Helper()
		tt, ok := ck.Tensor(prefix + name)
		if !ok {
			t.Fatalf("no %s", prefix+name)
		}
		f, err := tt.Float32s()
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, len(f))
		for i, x := range f {
			out[i] = float64(x)
		}
		return out
	}
}

// TowerBytes is the size of the tensors in dir's vision.safetensors whose names start with
// prefix ("" for all): what the memory plan must count for a tower.
func TowerBytes(t testing.TB, dir, prefix string) int64 {
	t.Helper()
	h, err := safetensors.ReadHeader(filepath.Join(dir, "vision.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, tn := range h.Tensors {
		if strings.HasPrefix(tn.Name, prefix) {
			n += tn.End - tn.Begin
		}
	}
	return n
}

// EncodePeak encodes images with m, on a backend that counts the buffers it holds (the CPU
// backend), and returns the most it held at once while encoding them, and their spans.
func EncodePeak(t testing.TB, m *model.Model, images ...vision.Image) (int64, []model.Span) {
	t.Helper()
	be, ok := m.Backend().(interface{ ActivationPeak() int64 })
	if !ok {
		t.Fatalf("the %s backend does not count its buffers", m.Backend().Name())
	}
	be.ActivationPeak() // from here
	spans, err := m.EncodeImages(context.Background(), images)
	if err != nil {
		t.Fatal(err)
	}
	return be.ActivationPeak(), spans
}

// EncodeTime times, for the families' TestEncodeTime, the preprocessing of a 1024×768 test
// image and then its encoding by m's tower, and returns the image's span with both times,
// rounded to the millisecond.
func EncodeTime(t testing.TB, m *model.Model) (sp model.Span, pre, enc time.Duration) {
	t.Helper()
	im := Image(1024, 768, 4)
	start := time.Now()
	if _, err := m.Vision().Processor().Process(im.RGB); err != nil {
		t.Fatal(err)
	}
	pre = time.Since(start)
	start = time.Now()
	spans, err := m.EncodeImages(context.Background(), []vision.Image{im})
	if err != nil {
		t.Fatal(err)
	}
	return spans[0], pre.Round(time.Millisecond), time.Since(start).Round(time.Millisecond)
}

// LoadVision loads the checkpoint in dir on backend b (closed when the test ends) and fails
// the test unless its tower is bound and model.HasVision sees it.
func LoadVision(t testing.TB, dir string, b compute.Backend) *model.Model {
	t.Helper()
	m, err := model.Load(dir, b)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	if m.Vision() == nil || !model.HasVision(dir) {
		t.Fatal("the checkpoint's tower was not loaded")
	}
	return m
}
