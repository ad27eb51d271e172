package main

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mlxg/mlxg/api/server"
	"github.com/mlxg/mlxg/kvstore"
)

// fillPrefixCache runs two requests with the same 600-token prompt through p: the first
// writes 3 blocks, the second reuses them from RAM.
func fillPrefixCache(t *testing.T, p *kvstore.PrefixCache) {
	r := rand.New(rand.NewPCG(1, 2))
	tokens := make([]int32, 600)
	for i := range tokens {
		tokens[i] = int32(r.IntN(1000))
	}
	for range 2 {
		c, _ := kvstore.NewFull(2, 64, 64, false)
		seq := kvstore.Seq{Layers: []kvstore.Layer{c}}
		key, err := kvstore.NewModelKey("m", seq)
		if err != nil {
			t.Fatal(err)
		}
		s := p.Begin(key, seq)
		n := s.Restore(tokens)
		k := make([]float32, (len(tokens)-n)*2*64)
		for i := range k {
			k[i] = r.Float32()
		}
		if err := c.Append(k, k, len(tokens)-n); err != nil {
			t.Fatal(err)
		}
		s.Save(tokens)
		s.End()
	}
	p.Flush()
}

func TestCacheShowClear(t *testing.T) {
	dir := t.TempDir()
	p, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	fillPrefixCache(t, p)

	// The RAM tier and hit rate come from a server's /metrics.
	reg := prometheus.NewRegistry()
	reg.MustRegister(server.NewPrefixCollector(p))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("DELETE /api/prefix-cache", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"cleared":%d}`, p.ClearRAM())
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	t.Setenv("MLXG_HOST", srv.URL)
	out, _, err := mlxg(t, "cache", "--block-ssd-cache-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"RAM    3 ", "SSD    3 ", "Hit rate: 50% of 2 requests", "3 from RAM, 0 from SSD"} {
		if !strings.Contains(out, want) {
			t.Errorf("mlxg cache: no %q in\n%s", want, out)
		}
	}

	out, _, err = mlxg(t, "cache", "clear", "--block-ssd-cache-dir", dir)
	if err != nil || !strings.Contains(out, "Deleted 3 blocks") || !strings.Contains(out, "Cleared 3 blocks from the RAM tier") {
		t.Fatalf("clear: %v\n%s", err, out)
	}
	if st := p.Stats(); st.RAMBlocks != 0 {
		t.Fatalf("%d blocks left in RAM", st.RAMBlocks)
	}
	t.Setenv("MLXG_HOST", "127.0.0.1:1")
	t.Setenv("MLXG_PREFIX_DIR", dir)
	out, _, _ = mlxg(t, "cache", "show")
	if !strings.Contains(out, "SSD    0 ") || !strings.Contains(out, "no server") {
		t.Fatalf("after clear:\n%s", out)
	}
	if _, _, err := mlxg(t, "cache", "drop"); err == nil || !strings.Contains(err.Error(), "show or clear") {
		t.Fatalf("unknown action: %v", err)
	}
}
