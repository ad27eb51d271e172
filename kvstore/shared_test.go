package kvstore

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// A shared layer attends over its source's positions exactly as the source does, stores
// nothing, and follows the source's length.
func TestSharedAttendsOverItsSource(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = r.Float32()*2 - 1
		}
		return v
	}
	const kvHeads, dim, heads = 2, 16, 4
	for _, mk := range []func() (Layer, error){
		func() (Layer, error) { return NewFull(kvHeads, dim, dim, false) },
		func() (Layer, error) { return NewRotating(kvHeads, dim, dim, 4, SpecF16, 0) },
	} {
		src, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		sh, err := NewShared(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{7, 1, 1, 5} {
			k, v := rnd(n*kvHeads*dim), rnd(n*kvHeads*dim)
			if err := src.Append(k, v, n); err != nil {
				t.Fatal(err)
			}
			if err := sh.Append(k, v, n); err != nil {
				t.Fatal(err)
			}
			q := rnd(n * heads * dim)
			want, got := make([]float32, n*heads*dim), make([]float32, n*heads*dim)
			if err := src.Attend(Attention{Q: q, Out: want, N: n, Heads: heads, Scale: 1}); err != nil {
				t.Fatal(err)
			}
			if err := sh.Attend(Attention{Q: q, Out: got, N: n, Heads: heads, Scale: 1}); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%T: the shared layer's attention differs from its source's", src)
			}
			if sh.Len() != src.Len() || sh.Bytes() != 0 {
				t.Fatalf("shared layer: %d positions (source %d), %d bytes", sh.Len(), src.Len(), sh.Bytes())
			}
		}
		n := src.Len() - 1
		if err := src.Truncate(n); err != nil {
			t.Fatal(err)
		}
		if sh.Len() != n || sh.Truncate(n) != nil || sh.Truncate(n+1) == nil {
			t.Fatalf("after truncation: shared length %d", sh.Len())
		}
	}
	if _, err := NewShared(nil); err == nil {
		t.Error("a shared layer without a source")
	}
	src, _ := NewFull(1, 8, 8, false)
	sh, _ := NewShared(src)
	if _, err := NewShared(sh); err == nil {
		t.Error("a shared layer of a shared layer")
	}
}

// Gemma 4's shape: sliding layers of head_dim, full layers of global_head_dim (and, with
// attention_k_eq_v, num_global_key_value_heads), the last num_kv_shared_layers keeping
// nothing; text_config nested.
func TestShapeGemma4(t *testing.T) {
	cfg := []byte(`{"model_type": "gemma4", "text_config": {"model_type": "gemma4_text", "num_hidden_layers": 8,
		"num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "global_head_dim": 64,
		"num_global_key_value_heads": 1, "attention_k_eq_v": true, "num_kv_shared_layers": 3, "sliding_window": 16,
		"hidden_size": 128, "max_position_embeddings": 4096,
		"layer_types": ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention",
			"full_attention", "sliding_attention", "sliding_attention", "full_attention"]}}`)
	m, err := ShapeFromConfig(cfg, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []LayerShape{
		{Kind: LayerSliding, KVHeads: 2, KHeadDim: 32, VHeadDim: 32, Window: 16},
		{Kind: LayerSliding, KVHeads: 2, KHeadDim: 32, VHeadDim: 32, Window: 16},
		{Kind: LayerFull, KVHeads: 1, KHeadDim: 64, VHeadDim: 64},
		{Kind: LayerSliding, KVHeads: 2, KHeadDim: 32, VHeadDim: 32, Window: 16},
		{Kind: LayerFull, KVHeads: 1, KHeadDim: 64, VHeadDim: 64},
		{Kind: LayerNone}, {Kind: LayerNone}, {Kind: LayerNone},
	}
	if !slices.Equal(m.Layers, want) {
		t.Fatalf("layers %+v\nwant   %+v", m.Layers, want)
	}
	// Without layer_types: five sliding layers to a full one, the last layer full.
	m, err = ShapeFromConfig([]byte(`{"model_type": "gemma4_text", "num_hidden_layers": 8, "num_attention_heads": 4,
		"num_key_value_heads": 2, "head_dim": 32, "sliding_window": 16, "hidden_size": 128}`), 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []LayerKind
	for _, l := range m.Layers {
		kinds = append(kinds, l.Kind)
	}
	S, F := LayerSliding, LayerFull
	if !slices.Equal(kinds, []LayerKind{S, S, S, S, S, F, S, F}) {
		t.Fatalf("default pattern %v", kinds)
	}
}
