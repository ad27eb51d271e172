package randmodel

import (
	"strings"
	"testing"
)

// TinyOf gives every architecture this package writes a valid tiny shape, its preset
// where it has one, and refuses the others by name.
func TestTinyOf(t *testing.T) {
	for arch := range archNames {
		c, err := TinyOf(arch, 256)
		if err != nil || c.Arch != arch || c.VocabSize != 256 {
			t.Errorf("%s: %+v %v", arch, c, err)
		}
	}
	if c, _ := TinyOf("qwen3_moe", 256); c.NumExperts == 0 {
		t.Errorf("qwen3_moe without its preset's experts: %+v", c)
	}
	if _, err := TinyOf("gpt2", 256); err == nil || !strings.Contains(err.Error(), "does not write gpt2 checkpoints") {
		t.Errorf("an unknown architecture: %v", err)
	}
}
