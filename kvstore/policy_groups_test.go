package kvstore

import (
	"strings"
	"testing"

	"github.com/mlxg/mlxg/kvstore/sysmem"
)

func shapeWithHeadDim(d int) ModelShape {
	m := ModelShape{WeightBytes: 80 << 20, MaxContext: 4096}
	for range 6 {
		m.Layers = append(m.Layers, LayerShape{Kind: LayerFull, KVHeads: 2, KHeadDim: d, VHeadDim: d})
	}
	return m
}

// The policy picks groups that divide head_dim, and keeps a layer fp16 (saying so) when none does.
func TestPolicyGroupFitsHeadDim(t *testing.T) {
	m16 := shapeWithHeadDim(16)
	p, err := Choose(PolicyInput{Model: m16, NumCtx: 2048, Memory: mem(64*gib, 40*gib, sysmem.Normal)})
	if err != nil {
		t.Fatalf("head_dim 16: %v", err)
	}
	for i, s := range p.Layout.Specs {
		if s != SpecF16 {
			t.Errorf("head_dim 16 layer %d: %s, want fp16", i, s)
		}
	}
	if got := p.Layout.String(); !strings.Contains(got, "fp16 in 6 layers (head_dim 16") {
		t.Errorf("layout %q does not say the layers fell back to fp16", got)
	}
	if !strings.Contains(p.Reason, "kept fp16") {
		t.Errorf("reason %q", p.Reason)
	}
	if p.KVTokenBytes != int64(6*SpecF16.TokenBytes(2, 16, 16)) {
		t.Errorf("kv per token %d", p.KVTokenBytes)
	}

	// head_dim 96: 64 does not divide it, 32 does; the spec string shows the group used.
	p, err = Choose(PolicyInput{Model: shapeWithHeadDim(96), NumCtx: 2048, Memory: mem(64*gib, 40*gib, sysmem.Normal)})
	if err != nil {
		t.Fatalf("head_dim 96: %v", err)
	}
	// Hadamard rotation needs a power of two: the layers keep 6 bits, unrotated.
	if want := (Spec{K: AffineFormat(6, 32), V: AffineFormat(6, 32)}); p.Layout.Specs[2] != want {
		t.Errorf("head_dim 96 inner layer %s, want %s", p.Layout.Specs[2], want)
	}
	if got := p.Layout.String(); !strings.HasPrefix(got, "K6/V6 g32, unrotated in 6 layers (head_dim 96") || strings.Contains(got, "fp16 in") {
		t.Errorf("head_dim 96 layout %q", got)
	}

	// head_dim 128 keeps the defaults.
	p, _ = Choose(PolicyInput{Model: shapeWithHeadDim(128), NumCtx: 2048, Memory: mem(64*gib, 40*gib, sysmem.Normal)})
	if !strings.HasPrefix(p.Layout.String(), "K6h/V6h g64, 6 of 6") {
		t.Errorf("head_dim 128 layout %q", p.Layout)
	}
}

// Explicit settings that cannot fit the model are an error naming the setting and the head_dim.
func TestPolicyExplicitGroupMisfit(t *testing.T) {
	for _, tc := range []struct {
		headDim     int
		set         [][3]string // name, value, source
		wantInError []string
	}{
		{96, [][3]string{{"kv-group-size", "64", "--kv-group-size"}}, []string{"--kv-group-size", "head_dim 96"}},
		{16, [][3]string{{"kv-bits", "8", "--kv-bits"}}, []string{"--kv-bits", "head_dim 16"}},
		{48, [][3]string{{"kv-bits", "q4_0", "OLLAMA_KV_CACHE_TYPE=q4_0"}}, []string{"OLLAMA_KV_CACHE_TYPE=q4_0", "head_dim 48"}},
		{16, [][3]string{{"kv-boundary-bits", "8", "MLXG_KV_BOUNDARY_BITS"}, {"kv-bits", "16", "--kv-bits"}}, nil},
	} {
		var o Options
		for _, s := range tc.set {
			if err := o.Set(s[0], s[1], s[2]); err != nil {
				t.Fatal(err)
			}
		}
		_, err := Choose(PolicyInput{Model: shapeWithHeadDim(tc.headDim), NumCtx: 1024, Memory: mem(64*gib, 40*gib, sysmem.Normal), Options: o})
		if tc.wantInError == nil {
			// fp16 base: boundary layers are never tighter than base, so fp16 too; nothing to fit.
			if err != nil {
				t.Errorf("%v: %v", tc.set, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("head_dim %d with %v: no error", tc.headDim, tc.set)
			continue
		}
		for _, w := range tc.wantInError {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("head_dim %d with %v: error %q lacks %q", tc.headDim, tc.set, err, w)
			}
		}
	}
}
