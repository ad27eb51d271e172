package quality_test

import (
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/runner/quality"
)

// TestLoadSource: every own-source text reads from its package, long enough for the
// scenario's 4K context, starting past its table of contents.
func TestLoadSource(t *testing.T) {
	for _, s := range quality.Sources {
		t.Run(s.Name, func(t *testing.T) {
			testdata.DebianFile(t, s.Package, s.Path)
			text, err := quality.LoadSource(s.Name)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(strings.Fields(text)); n < 5000 {
				t.Errorf("%d words, want enough for 4K tokens", n)
			}
			if s.Start != "" && !strings.HasPrefix(text, s.Start) {
				t.Errorf("starts %q, want %q", text[:min(len(text), 40)], s.Start)
			}
		})
	}
	if _, err := quality.LoadSource("nonesuch"); err == nil || !strings.Contains(err.Error(), "gnu-standards") {
		t.Errorf("an unknown text: %v, want an error listing the texts", err)
	}
}
