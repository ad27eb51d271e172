package server

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/sched"
)

// statusServer serves the scripted model with a KV policy and a prefix cache, as serve does; it returns the
// test server and the temporary directory the store and the cache live in.
func statusServer(t *testing.T, cfg ServerConfig) (*httptest.Server, *Server, string) {
	t.Helper()
	ckpt := scriptedCheckpoint(t)
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName("scripted")
	if _, err := store.ImportDir(context.Background(), n, ckpt); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: filepath.Join(tmp, "prefix"), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	mem := sysmem.Fixed{Total: 64 << 30, Available: 40 << 30, Source: "fixed"}
	cfg.Store = store
	cfg.Loader = &EngineLoader{Threads: 2, KV: &kvstore.Policy{Log: log, Sensor: mem}, Prefix: pc, Logger: log}
	cfg.Version, cfg.Logger = "test", log
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.status.sensor = mem
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
		pc.Close()
	})
	return ts, srv, tmp
}

func getStatus(t *testing.T, base string) (api.StatusResponse, string) {
	t.Helper()
	resp, err := http.Get(base + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var st api.StatusResponse
	if resp.StatusCode != 200 || json.Unmarshal(b, &st) != nil {
		t.Fatalf("status: %d %s", resp.StatusCode, b)
	}
	return st, string(b)
}

// TestStatus: after a chat, /api/status names the loaded model with its backend, keep-alive expiry and KV
// plan (one entry per layer whose K/V bits spell the layout /api/ps prints), the memory split into weights,
// KV and prefix cache, the prefix cache's counters, the recent throughput and the request's PERF line; it
// names no file of the store or the cache.
func TestStatus(t *testing.T) {
	ts, _, tmp := statusServer(t, ServerConfig{Sched: sched.Config{}})
	st, _ := getStatus(t, ts.URL)
	if len(st.Models) != 0 || len(st.Requests) != 0 || st.Memory.Total != 64<<30 || st.Memory.Pressure != "normal" || st.PrefixCache == nil {
		t.Fatalf("idle status %+v", st)
	}
	body := `{"model":"scripted","stream":false,"think":false,"messages":[{"role":"user","content":"Weather?"}]}`
	resp, err := http.Post(ts.URL+"/api/chat", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	st, raw := getStatus(t, ts.URL)
	if strings.Contains(raw, tmp) || strings.Contains(raw, filepath.ToSlash(tmp)) {
		t.Fatalf("the status names a file under %s: %s", tmp, raw)
	}
	if len(st.Models) != 1 {
		t.Fatalf("models %+v", st.Models)
	}
	m := st.Models[0]
	if m.Name != "scripted:latest" || m.Backend == "" || m.Size <= 0 || m.Peak < m.Size || time.Until(m.ExpiresAt) < 4*time.Minute || m.Plan == nil {
		t.Fatalf("model %+v", m)
	}
	p := m.Plan
	if p.Layout != m.KVCache || p.Context != m.ContextLength || p.TokenBytes <= 0 || p.KVBytes <= 0 || p.Weights <= 0 || len(p.Layers) == 0 {
		t.Fatalf("plan %+v", p)
	}
	var sum int64
	boundary := 0
	for i, l := range p.Layers {
		if l.Layer != i || l.Kind != "full" || l.KBits == "" || l.VBits == "" || l.TokenBytes <= 0 {
			t.Fatalf("layer %d: %+v", i, l)
		}
		label := fmt.Sprintf("K%s/V%s", l.KBits, l.VBits)
		if l.KBits == "16" && l.VBits == "16" {
			label = "fp16"
		}
		if l.Boundary {
			boundary++
			if !strings.Contains(m.KVCache, fmt.Sprintf("@%s/%s", l.KBits, l.VBits)) {
				t.Fatalf("boundary layer %d is %s, the layout %q", i, label, m.KVCache)
			}
		} else if !strings.HasPrefix(m.KVCache, label) {
			t.Fatalf("layer %d is %s, the layout %q", i, label, m.KVCache)
		}
		sum += l.TokenBytes
	}
	if sum != p.TokenBytes {
		t.Fatalf("layers' token bytes sum to %d, the plan says %d", sum, p.TokenBytes)
	}
	if strings.Contains(m.KVCache, "boundary") != (boundary > 0) {
		t.Fatalf("%d boundary layers, layout %q", boundary, m.KVCache)
	}
	if st.Memory.Weights != p.Weights || st.Memory.KV != p.KVBytes {
		t.Fatalf("memory %+v, plan %+v", st.Memory, p)
	}
	if len(st.Requests) != 1 {
		t.Fatalf("requests %+v", st.Requests)
	}
	r := st.Requests[0]
	if r.Model != "scripted" && r.Model != "scripted:latest" || r.EvalTokens == 0 || r.Done != "stop" || !strings.HasPrefix(r.Perf, "PERF: model=") {
		t.Fatalf("request %+v", r)
	}
	if st.Throughput.Requests != 1 || st.Throughput.DecodeTPS <= 0 || st.Throughput.PrefillTPS <= 0 || st.Throughput.TTFTSeconds <= 0 {
		t.Fatalf("throughput %+v", st.Throughput)
	}
	if st.PrefixCache.Lookups == 0 {
		t.Fatalf("prefix cache %+v", st.PrefixCache)
	}
}

// TestStatusRecentBounded: the status keeps the latest requests only, newest first.
func TestStatusRecentBounded(t *testing.T) {
	var st statusState
	for i := range recentRequests + 5 {
		st.record(fmt.Sprint(i), &outcome{GenerateStats: GenerateStats{EvalTokens: 1, EvalDuration: time.Second}}, nil, "PERF")
	}
	r := st.requests()
	if len(r) != recentRequests || r[0].Model != fmt.Sprint(recentRequests+4) || r[len(r)-1].Model != "5" {
		t.Fatalf("%d requests, first %s last %s", len(r), r[0].Model, r[len(r)-1].Model)
	}
	st.record("c", &outcome{}, context.Canceled, "")
	if r := st.requests(); r[0].Done != "cancelled" {
		t.Fatalf("%+v", r[0])
	}
	if tp := throughput(st.requests(), time.Now()); tp.DecodeTPS != 1 || tp.Requests != recentRequests {
		t.Fatalf("%+v", tp)
	}
}

// TestStatusEvents: the events route sends a status event at once, and a foreign origin is refused.
func TestStatusEvents(t *testing.T) {
	ts, _, _ := statusServer(t, ServerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", ts.URL+"/api/status/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	var event string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			event = v
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			var st api.StatusResponse
			if event != "status" || json.Unmarshal([]byte(v), &st) != nil || st.Version != "test" || st.Time.IsZero() {
				t.Fatalf("event %q data %s", event, v)
			}
			break
		}
	}
	cancel()

	req, _ = http.NewRequest("GET", ts.URL+"/api/status", nil)
	req.Header.Set("Origin", "https://evil.example")
	resp2, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp2.Body.Close()
	if resp2.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign origin: %d", resp2.StatusCode)
	}
}
