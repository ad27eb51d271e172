package runner

import (
	"testing"

	"github.com/mlxg/mlxg/runner/model"
)

// TestFeatureCacheBounds: the feature cache keeps at most featureCacheSize images and
// featureCacheBytes of features, dropping the oldest first.
func TestFeatureCacheBounds(t *testing.T) {
	var f featureCache
	key := func(i int) [32]byte { return [32]byte{byte(i), byte(i >> 8)} }
	for i := range featureCacheSize + 5 {
		f.put(key(i), model.Span{Rows: make([]float32, 10)})
	}
	if _, ok := f.get(key(4)); ok || len(f.order) != featureCacheSize {
		t.Fatalf("%d kept, the fifth still there", len(f.order))
	}
	if _, ok := f.get(key(featureCacheSize + 4)); !ok {
		t.Fatal("the newest is gone")
	}
	big := model.Span{Rows: make([]float32, featureCacheBytes/4/2+1)} // two do not fit
	f.put(key(1000), big)
	f.put(key(1001), big)
	if _, ok := f.get(key(1000)); ok || f.bytes > featureCacheBytes {
		t.Fatalf("over the byte budget: %d bytes", f.bytes)
	}
	if _, ok := f.get(key(1001)); !ok {
		t.Fatal("the newest big one is gone")
	}
	f.put(key(2000), model.Span{Rows: make([]float32, featureCacheBytes/4+1)}) // larger than the budget: not kept
	if _, ok := f.get(key(2000)); ok {
		t.Fatal("a span over the whole budget was kept")
	}
}
