package kvstore

import (
	"math/rand/v2"
	"testing"
)

// TestNewCachesMixedLayout: a hybrid stack with full, sliding, recurrent and cache-less
// layers gets the right kind per layer, each storing its layout's spec, and every
// cache takes a prefill and a decode step without error.
func TestNewCachesMixedLayout(t *testing.T) {
	m := ModelShape{Layers: []LayerShape{
		{Kind: LayerFull, KVHeads: 2, KHeadDim: 64, VHeadDim: 64},
		{Kind: LayerSliding, KVHeads: 2, KHeadDim: 64, VHeadDim: 64, Window: 16},
		{Kind: LayerRecurrent, State: 100},
		{Kind: LayerNone},
		{Kind: LayerFull, KVHeads: 2, KHeadDim: 64, VHeadDim: 64},
		{Kind: LayerFull, KVHeads: 2, KHeadDim: 64, VHeadDim: 64},
	}}
	l, err := NewLayout(m, k8v4, 1, k8v8)
	if err != nil {
		t.Fatal(err)
	}
	caches, err := NewCaches(m, l)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := caches[0].(*Quantized); !ok {
		t.Errorf("layer 0: %T", caches[0])
	}
	if c, ok := caches[1].(*Rotating); !ok || c.Window() != 16 || c.Spec() != k8v4 {
		t.Errorf("layer 1: %T", caches[1])
	}
	if caches[2] != nil || caches[3] != nil {
		t.Errorf("layers 2, 3: %T %T", caches[2], caches[3])
	}
	if c := caches[5].(*Quantized); c.Spec() != k8v8 {
		t.Errorf("layer 5 (last KV layer): %v", c.Spec())
	}
	r := rand.New(rand.NewPCG(10, 10))
	for _, n := range []int{40, 1} {
		for i, c := range caches {
			if c == nil {
				continue
			}
			if err := c.Append(randVec(r, n*128), randVec(r, n*128), n); err != nil {
				t.Fatal(i, err)
			}
			out := make([]float32, n*4*64)
			if err := c.Attend(Attention{Q: randVec(r, n*4*64), Out: out, N: n, Heads: 4, Scale: 0.125}); err != nil {
				t.Fatal(i, err)
			}
		}
	}

	// fp16 full layers use Full; --max-kv-size makes them rotating and caps sliding windows.
	l, _ = NewLayout(m, SpecF16, 0, SpecF16)
	caches, _ = NewCaches(m, l)
	if _, ok := caches[0].(*Full); !ok {
		t.Errorf("fp16 layer 0: %T", caches[0])
	}
	l.MaxKVSize = 8
	caches, _ = NewCaches(m, l)
	if c, ok := caches[0].(*Rotating); !ok || c.Window() != 8 {
		t.Errorf("max-kv-size layer 0: %T", caches[0])
	}
	if c := caches[1].(*Rotating); c.Window() != 8 {
		t.Errorf("max-kv-size sliding window %d", c.Window())
	}
	if _, err := NewCaches(m, Layout{}); err == nil {
		t.Error("a layout for another model accepted")
	}
}
