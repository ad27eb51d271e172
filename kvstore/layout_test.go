package kvstore

import (
	"strings"
	"testing"

	"github.com/mlxg/mlxg/kvstore/sysmem"
)

var (
	k8v4 = Spec{K: AffineFormat(8, 64), V: AffineFormat(4, 32)}
	k8v8 = Spec{K: AffineFormat(8, 64), V: AffineFormat(8, 32)}
)

// hybrid is a Qwen3-Next-like stack: three recurrent layers, then one full-attention layer, ×4.
func hybrid() ModelShape {
	var m ModelShape
	for i := 0; i < 16; i++ {
		if i%4 == 3 {
			m.Layers = append(m.Layers, LayerShape{Kind: LayerFull, KVHeads: 2, KHeadDim: 256, VHeadDim: 256})
		} else {
			m.Layers = append(m.Layers, LayerShape{Kind: LayerRecurrent, State: 1 << 20})
		}
	}
	return m
}

func TestLayoutBoundaryCountsKVLayers(t *testing.T) {
	m := hybrid()
	l, err := NewLayout(m, k8v4, 1, k8v8)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range l.Specs {
		var want Spec
		switch i {
		case 3, 15: // first and last KV layers, not layers 0 and 15 of the stack
			want = k8v8
		case 7, 11:
			want = k8v4
		}
		if s != want {
			t.Errorf("layer %d: %v, want %v", i, s, want)
		}
	}
	if got := l.String(); got != "K8/V4 g64/32, boundary 1@8/8, 4 of 16 layers with KV" {
		t.Errorf("String() = %q", got)
	}
	// 2 boundary layers cover all 4 KV layers.
	l, _ = NewLayout(m, k8v4, 2, k8v8)
	for _, i := range []int{3, 7, 11, 15} {
		if l.Specs[i] != k8v8 {
			t.Errorf("layer %d: %v", i, l.Specs[i])
		}
	}
}

func TestLayoutBytes(t *testing.T) {
	m := ModelShape{Layers: []LayerShape{
		{Kind: LayerFull, KVHeads: 8, KHeadDim: 128, VHeadDim: 128},
		{Kind: LayerSliding, KVHeads: 8, KHeadDim: 128, VHeadDim: 128, Window: 1024},
		{Kind: LayerFull, KVHeads: 8, KHeadDim: 128, VHeadDim: 128},
		{Kind: LayerRecurrent, State: 5000},
		{Kind: LayerNone},
	}}
	l, err := NewLayout(m, k8v4, 1, k8v8)
	if err != nil {
		t.Fatal(err)
	}
	// Layers 0 and 2 are the boundary (first and last of three KV layers), the sliding one is inner.
	b88 := int64(8 * (136 + 128 + 16)) // K 8-bit g64: 136 B per head row; V 8-bit g32: 128+16
	b84 := int64(8 * (136 + 64 + 16))
	if got, want := l.TokenBytes(m), 2*b88; got != want {
		t.Errorf("TokenBytes = %d, want %d", got, want)
	}
	if got, want := l.Bytes(m, 4000), 4000*2*b88+1024*b84+5000; got != want {
		t.Errorf("Bytes(4000) = %d, want %d", got, want)
	}
	if got, want := l.Bytes(m, 100), 100*2*b88+100*b84+5000; got != want {
		t.Errorf("Bytes(100) = %d, want %d", got, want)
	}
	l.QuantizedKVStart = 500
	if got, want := l.Bytes(m, 100), int64(3*100*8*512+5000); got != want {
		t.Errorf("Bytes(100) under quantized_kv_start = %d, want %d", got, want)
	}
	l.QuantizedKVStart, l.MaxKVSize = 0, 2000
	if got, want := l.Bytes(m, 4000), 2000*2*b88+1024*b84+5000; got != want {
		t.Errorf("Bytes(4000) with max-kv-size = %d, want %d", got, want)
	}
	if s := l.String(); !strings.Contains(s, "max 2000 tokens") || !strings.Contains(s, "3 of 5 layers") {
		t.Errorf("String() = %q", s)
	}
}

func TestLayoutFP16HasNoBoundary(t *testing.T) {
	l, err := NewLayout(hybrid(), SpecF16, 2, k8v8)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{3, 7, 11, 15} {
		if l.Specs[i] != SpecF16 {
			t.Errorf("layer %d: %v", i, l.Specs[i])
		}
	}
	if l.String() != "fp16, 4 of 16 layers with KV" {
		t.Errorf("String() = %q", l.String())
	}
}

func TestLayoutRejectsBadGroup(t *testing.T) {
	m := ModelShape{Layers: []LayerShape{{Kind: LayerFull, KVHeads: 2, KHeadDim: 64, VHeadDim: 64}}}
	_, err := NewLayout(m, Spec{K: AffineFormat(8, 128), V: AffineFormat(4, 32)}, 0, k8v8)
	if err == nil || !strings.Contains(err.Error(), "layer 0") || !strings.Contains(err.Error(), "head_dim 64") {
		t.Errorf("got %v", err)
	}
}

func TestLayoutBoundaryNeverTighter(t *testing.T) {
	m := hybrid()
	base := Spec{K: FormatF16, V: AffineFormat(4, 32)}
	l, err := NewLayout(m, base, 1, k8v8)
	if err != nil {
		t.Fatal(err)
	}
	// Keys stay fp16 in the boundary layers; values get the boundary's 8 bits.
	want := Spec{K: FormatF16, V: AffineFormat(8, 32)}
	if l.Specs[3] != want || l.Specs[7] != base || l.Boundary != want {
		t.Errorf("boundary %v, inner %v", l.Specs[3], l.Specs[7])
	}
	// A boundary looser in nothing is no boundary.
	l, _ = NewLayout(m, k8v8, 2, Spec{K: AffineFormat(4, 64), V: AffineFormat(4, 32)})
	if l.BoundaryLayers != 0 || l.Specs[3] != k8v8 {
		t.Errorf("boundary tighter than base: %v, %v", l, l.Specs[3])
	}
}

// Rotated formats and groups of 16 in spec strings, and a layer whose head_dim is not a
// power of two keeps its bits unrotated, with the reason in the layout.
func TestLayoutRotated(t *testing.T) {
	a := AffineFormat
	for spec, want := range map[Spec]string{
		{K: a(8, 64), V: a(4, 32).Rotate(true)}:                  "K8/V4h g64/32",
		{K: a(8, 64).Rotate(true), V: a(4, 16).Rotate(true)}:     "K8h/V4h g64/16",
		{K: FormatQ4_0.Rotate(true), V: FormatQ4_0.Rotate(true)}: "q4_0h",
		{K: FormatQ4_0.Rotate(true), V: FormatQ4_0}:              "Kq4_0h/Vq4_0",
	} {
		if got := spec.String(); got != want {
			t.Errorf("%+v: String() = %q, want %q", spec, got, want)
		}
	}
	var m ModelShape
	for _, d := range []int{128, 96, 96, 128} {
		m.Layers = append(m.Layers, LayerShape{Kind: LayerFull, KVHeads: 2, KHeadDim: d, VHeadDim: d})
	}
	var o Options
	if err := o.Set("kv-bits", "8h/4h", "--kv-bits"); err != nil {
		t.Fatal(err)
	}
	if err := o.Set("kv-boundary-layers", "0", "--kv-boundary-layers"); err != nil {
		t.Fatal(err)
	}
	p, err := Choose(PolicyInput{Model: m, NumCtx: 1024, Options: o, Memory: mem(64<<30, 48<<30, sysmem.Normal)})
	if err != nil {
		t.Fatal(err)
	}
	l := p.Layout
	if !l.Specs[0].K.Rotated || !l.Specs[0].V.Rotated || l.Specs[1].K.Rotated || l.Specs[1].V.Rotated || l.Specs[1].V.Bits != 4 {
		t.Errorf("specs %v", l.Specs)
	}
	if s := l.String(); !strings.Contains(s, "unrotated in 2 layers (head_dim 96: Hadamard rotation needs a power of two)") {
		t.Errorf("String() = %q", s)
	}
	if !strings.Contains(p.Reason, "unrotated") {
		t.Errorf("reason %q", p.Reason)
	}
}
