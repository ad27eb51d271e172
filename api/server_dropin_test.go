package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/mlxg/mlxg/runner/sched"
)

// /api/version reports an Ollama release number clients accept (some refuse a development version or
// anything below 0.6.4) and mlxg's own version beside it.
func TestVersionIsOllamas(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	resp, err := http.Get(ts.URL + "/api/version")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var v VersionResponse
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Version != OllamaVersion || v.MLXGVersion != "test" {
		t.Fatalf("/api/version = %+v", v)
	}
	var major, minor, patch int
	if n, _ := fmt.Sscanf(v.Version, "%d.%d.%d", &major, &minor, &patch); n != 3 || major != 0 || minor < 7 {
		t.Fatalf("version %q is not an Ollama release of at least 0.7.0", v.Version)
	}
}
