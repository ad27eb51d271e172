package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/sched"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPrefixCacheThroughServer: a repeated request reuses its prompt from the prefix cache
// with the same reply, the PERF lines carry the cache's keys, and /metrics and the server
// collector count requests, tokens and the loaded model.
func TestPrefixCacheThroughServer(t *testing.T) {
	ckpt := scriptedCheckpoint(t)
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName("scripted")
	if _, err := store.ImportDir(context.Background(), n, ckpt); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: filepath.Join(tmp, "prefix"), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	srv, err := NewServer(ServerConfig{Store: store, Loader: &EngineLoader{Threads: 2, KV: &kvstore.Policy{Log: log}, Prefix: pc, Logger: log},
		Sched: sched.Config{}, Version: "test", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer func() {
		ts.Close()
		srv.Close()
	}()
	body := `{"model":"scripted","stream":false,"think":false,"messages":[{"role":"system","content":"` +
		strings.Repeat("You answer questions about the weather. ", 40) + `"},{"role":"user","content":"Weather?"}]}`
	var replies []string
	for range 2 {
		resp, err := http.Post(ts.URL+"/api/chat", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var cr api.ChatResponse
		if resp.StatusCode != 200 || json.Unmarshal(b, &cr) != nil {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		replies = append(replies, cr.Message.Content)
	}
	if replies[0] != replies[1] || replies[0] == "" {
		t.Fatalf("replies differ with the prefix cache: %q, %q", replies[0], replies[1])
	}
	perf := regexp.MustCompile(`cached_tok=(\d+) pref_tok=(\d+) ram_hit=(\d+) block_hit=0 block_write=(\d+) chain_break=0`).FindAllStringSubmatch(logs.String(), -1)
	if len(perf) != 2 || perf[0][1] != "0" || perf[1][1] == "0" || perf[1][3] == "0" || perf[0][4] == "0" {
		t.Fatalf("PERF prefix keys: %q\n%s", perf, logs.String())
	}

	resp, err := http.Get(ts.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	m, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`mlxg_requests_total{model="scripted",outcome="stop"}`, `mlxg_prompt_tokens_total{model="scripted"}`,
		`mlxg_generated_tokens_total{model="scripted"}`, `mlxg_prefill_seconds_count{model="scripted"}`, `mlxg_decode_seconds_count{model="scripted"}`} {
		if !strings.Contains(string(m), want) {
			t.Errorf("/metrics has no %s", want)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(srv.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, mm := range mf.GetMetric() {
			got[mf.GetName()] = mm.GetGauge().GetValue()
		}
	}
	if got["mlxg_loaded_models"] != 1 || got["mlxg_loaded_model_bytes"] <= 0 {
		t.Fatalf("collector: %v", got)
	}
	if _, ok := got["mlxg_memory_pressure"]; !ok {
		t.Fatalf("no memory pressure: %v", got)
	}

	// mlxg cache clear empties the RAM tier through the server.
	req, _ := http.NewRequest(http.MethodDelete, ts.URL+"/api/prefix-cache", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var cleared struct{ Cleared int }
	json.NewDecoder(resp.Body).Decode(&cleared)
	resp.Body.Close()
	if cleared.Cleared == 0 || pc.Stats().RAMBlocks != 0 {
		t.Fatalf("cleared %d, %d blocks left", cleared.Cleared, pc.Stats().RAMBlocks)
	}

	// A restart: a new server whose cache preloads the SSD blocks at start. Its first request
	// says on its PERF line that its blocks came from the SSD (block_hit, block_preload), not
	// from RAM; the next one hits RAM.
	pc.Flush()
	ts.Close()
	srv.Close()
	var logs2 syncBuffer
	log2 := slog.New(slog.NewTextHandler(&logs2, nil))
	pc2, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: filepath.Join(tmp, "prefix"), Log: log2, Hot: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer pc2.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st := pc2.Stats(); st.RAMBlocks > 0 && st.RAMBlocks == st.DiskBlocks {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hot blocks did not load: %+v", pc2.Stats())
		}
	}
	srv, err = NewServer(ServerConfig{Store: store, Loader: &EngineLoader{Threads: 2, KV: &kvstore.Policy{Log: log2}, Prefix: pc2, Logger: log2},
		Sched: sched.Config{}, Version: "test", Logger: log2})
	if err != nil {
		t.Fatal(err)
	}
	ts = httptest.NewServer(srv.Handler())
	for range 2 {
		resp, err := http.Post(ts.URL+"/api/chat", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var cr api.ChatResponse
		if resp.StatusCode != 200 || json.Unmarshal(b, &cr) != nil || cr.Message.Content != replies[0] {
			t.Fatalf("after the restart: status %d: %s, want %q", resp.StatusCode, b, replies[0])
		}
	}
	perf = regexp.MustCompile(`ram_hit=(\d+) block_hit=(\d+) block_write=\d+ chain_break=0 block_preload=(\d+)`).FindAllStringSubmatch(logs2.String(), -1)
	if len(perf) != 2 || perf[0][1] != "0" || perf[0][2] == "0" || perf[0][3] != perf[0][2] ||
		perf[1][1] != perf[0][2] || perf[1][2] != "0" || perf[1][3] != "0" {
		t.Fatalf("PERF after a restart: %q, want the first request's blocks all from SSD (preloaded), the second's from RAM\n%s", perf, logs2.String())
	}
}
