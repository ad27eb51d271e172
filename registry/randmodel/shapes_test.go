package randmodel

import "testing"

// TestShapesValidate checks every real shape, whole and cut to 1 to 4 layers as the
// family benchmark cuts them, against Validate, and that its config and tensor list can
// be built.
func TestShapesValidate(t *testing.T) {
	for name, shape := range Shapes {
		full := shape()
		for _, c := range []Config{full, full.Cut(1), full.Cut(2), full.Cut(4)} {
			if err := c.Validate(); err != nil {
				t.Errorf("%s at %d layers: %v", name, c.NumLayers, err)
				continue
			}
			if c.HFConfig() == nil || len(c.Tensors()) == 0 {
				t.Errorf("%s at %d layers: no config or tensors", name, c.NumLayers)
			}
		}
	}
}

// TestCutGemma4E4B: the E4B cut keeps KV-shared layers behind a sliding and a full layer
// of their own.
func TestCutGemma4E4B(t *testing.T) {
	c := Gemma4E4B().Cut(4)
	if c.NumLayers != 9 || c.KVSharedLayers != 2 {
		t.Fatalf("Gemma4E4B().Cut(4): %d layers, %d shared; want 9 and 2", c.NumLayers, c.KVSharedLayers)
	}
	if c := Qwen3_8B().Cut(4); c.NumLayers != 4 {
		t.Fatalf("Qwen3_8B().Cut(4): %d layers", c.NumLayers)
	}
}
