package gemma4_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/model/modeltest"
)

// rowDiff is max|a-b| / max|b| over rows lo..hi-1 of vocab columns.
func rowDiff(a, b []float32, vocab, lo, hi int) float64 {
	var num, den float64
	for i := lo * vocab; i < hi*vocab; i++ {
		num = max(num, math.Abs(float64(a[i]-b[i])))
		den = max(den, math.Abs(float64(b[i])))
	}
	return num / den
}

// TestImageMask: with use_bidirectional_attention "vision" an image's rows attend to each
// other in both directions: the rows before the first image match the same checkpoint
// without it, the image rows and everything after them do not (so dropping the mask fails
// this test); a prefill resumed inside an image gives the one pass's rows; a pass that
// would split an image is refused.
func TestImageMask(t *testing.T) {
	v := randmodel.TinyGemma4Vision()
	m := visionModel(t, v)
	// The same checkpoint read as a model whose images attend causally.
	dir := filepath.Join(t.TempDir(), "causal")
	if err := os.CopyFS(dir, os.DirFS(m.Dir)); err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	delete(cfg["text_config"].(map[string]any), "use_bidirectional_attention")
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	causal := loadVision(t, dir)

	ids, md := modeltest.TwoImagePrompt(t, m, testImage(24, 20, 1), testImage(20, 28, 2))
	first, firstEnd := md.Spans[0].Start, md.Spans[0].Start+md.Spans[0].N()
	if md.Spans[0].N() <= 8 {
		t.Fatalf("the first image is %d rows: not longer than the sliding window of 8", md.Spans[0].N())
	}
	V := m.Config.VocabSize
	got, plain := modeltest.ForwardMediaRows(t, m, ids, md), modeltest.ForwardMediaRows(t, causal, ids, md)
	if r := rowDiff(got, plain, V, 0, first); r > 1e-6 {
		t.Errorf("rows before the image differ with the image mask by %.3g", r)
	}
	if r := rowDiff(got, plain, V, first, firstEnd-1); r < 1e-3 {
		t.Errorf("the image's rows are within %.3g of causal attention: the mask does nothing", r)
	}
	if r := rowDiff(got, plain, V, len(ids)-1, len(ids)); r < 1e-3 {
		t.Errorf("the last row is within %.3g of causal attention", r)
	}
	// The image rows carry the features: another first image of the same grid changes the
	// image's rows and what follows, not the text before it.
	ids2, md2 := modeltest.TwoImagePrompt(t, m, testImage(24, 20, 9), testImage(20, 28, 2))
	if !slices.Equal(ids2[:first], ids[:first]) || md2.Spans[0].N() != md.Spans[0].N() {
		t.Fatal("the second prompt's layout differs")
	}
	other := modeltest.ForwardMediaRows(t, m, ids2, md2)
	if r := rowDiff(other, got, V, 0, first); r > 1e-6 {
		t.Errorf("rows before the image depend on it (%.3g)", r)
	}
	if r := rowDiff(other, got, V, len(ids)-1, len(ids)); r < 1e-3 {
		t.Errorf("another image moves the last row by only %.3g", r)
	}
	// Resume at a row inside the first image: the caches keep the rows before it.
	cut := first + 3
	caches, _ := m.NewCaches(true)
	model.SetMedia(caches, md)
	if _, err := m.Forward(context.Background(), ids, caches, false); err != nil {
		t.Fatal(err)
	}
	for _, c := range caches {
		if err := c.Truncate(cut); err != nil {
			t.Fatal(err)
		}
	}
	rest, err := m.Forward(context.Background(), ids[cut:], caches, true)
	if err != nil {
		t.Fatal(err)
	}
	if r := rowDiff(rest, got[cut*V:], V, 0, len(ids)-cut); r > 1e-4 {
		t.Errorf("a prefill resumed inside an image differs from the one pass by %.3g", r)
	}
	model.SetMedia(caches, nil)
	split, _ := m.NewCaches(true)
	model.SetMedia(split, md)
	defer model.SetMedia(split, nil)
	if _, err := m.Forward(context.Background(), ids[:cut], split, false); err == nil || !strings.Contains(err.Error(), "split") {
		t.Errorf("a pass ending inside an image: %v, want an error about the split", err)
	}
}
