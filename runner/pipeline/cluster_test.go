package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadHostfile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.json")
	os.WriteFile(path, []byte(`[["127.0.0.1:1"]]`), 0o644)
	if _, err := readHostfile(path); err == nil || !strings.Contains(err.Error(), "at least 2") {
		t.Errorf("a hostfile of one rank: %v", err)
	}
	os.WriteFile(path, []byte(`{"not": "a list"}`), 0o644)
	if _, err := readHostfile(path); err == nil {
		t.Error("a hostfile that is not a list read")
	}
	os.WriteFile(path, []byte(`[["127.0.0.1:1"], ["127.0.0.1:2"]]`), 0o644)
	if h, err := readHostfile(path); err != nil || len(h) != 2 {
		t.Errorf("a hostfile of two ranks: %v %v", h, err)
	}
}
