package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/sched"
)

// switchSensor is a faked memory sensor whose reading a test changes between requests.
type switchSensor struct {
	mu   sync.Mutex
	info sysmem.Info
}

func (s *switchSensor) Read() (sysmem.Info, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.info, nil
}

func (s *switchSensor) set(p sysmem.Pressure) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.info.Pressure = p
}

type kvServer struct {
	url    string
	logs   *syncBuffer
	sensor *switchSensor
	prefix *kvstore.PrefixCache
	loader *EngineLoader
}

// startKVServer serves the scripted checkpoint with the KV policy reading a faked sensor
// (64 GiB, 40 GiB available, normal pressure) and a RAM prefix cache.
func startKVServer(t *testing.T) *kvServer { return startKVServerWith(t, nil) }

// startKVServerWith is startKVServer with the server's configuration changed by configure.
func startKVServerWith(t *testing.T, configure func(*ServerConfig)) *kvServer {
	ckpt := scriptedCheckpoint(t)
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName("scripted")
	if _, err := store.ImportDir(context.Background(), n, ckpt); err != nil {
		t.Fatal(err)
	}
	ks := &kvServer{logs: &syncBuffer{}, sensor: &switchSensor{info: sysmem.Info{Total: 64 << 30, Available: 40 << 30, Source: "test"}}}
	log := slog.New(slog.NewTextHandler(ks.logs, nil))
	pc, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Log: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	ks.prefix = pc
	ks.loader = &EngineLoader{Threads: 2, KV: &kvstore.Policy{Log: log, Sensor: ks.sensor}, Prefix: pc, Logger: log}
	cfg := ServerConfig{Store: store, Loader: ks.loader, Sched: sched.Config{}, Version: "test", Logger: log}
	if configure != nil {
		configure(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	ks.url = ts.URL
	return ks
}

func (ks *kvServer) chat(t *testing.T, user string) {
	t.Helper()
	body := `{"model":"scripted","stream":false,"think":false,"options":{"num_predict":4},"messages":[{"role":"system","content":"` +
		strings.Repeat("You answer questions about the weather. ", 40) + `"},{"role":"user","content":"` + user + `"}]}`
	resp, err := http.Post(ks.url+"/api/chat", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
}

// The PERF line carries the KV spec, the bytes the sequence's caches held and the pressure
// the policy read; /api/ps shows the spec string.
func TestPerfLineKVBytesAndPressure(t *testing.T) {
	ks := startKVServer(t)
	ks.chat(t, "Weather?")
	ks.sensor.set(sysmem.Warn)
	ks.chat(t, "Rain?")

	perf := regexp.MustCompile(`kv=\\"(K[^"\\]+ layers with KV)\\" kv_bytes=(\d+) pressure=(\w+)`).FindAllStringSubmatch(ks.logs.String(), -1)
	if len(perf) != 2 {
		t.Fatalf("PERF lines with kv, kv_bytes and pressure: %q\n%s", perf, ks.logs.String())
	}
	for i, want := range []string{"normal", "warn"} {
		if n, _ := strconv.Atoi(perf[i][2]); n <= 0 || perf[i][3] != want {
			t.Errorf("request %d: kv_bytes %s pressure %s, want > 0 and %s", i, perf[i][2], perf[i][3], want)
		}
	}

	resp, err := http.Get(ks.url + "/api/ps")
	if err != nil {
		t.Fatal(err)
	}
	var ps api.ProcessResponse
	err = json.NewDecoder(resp.Body).Decode(&ps)
	resp.Body.Close()
	if err != nil || len(ps.Models) != 1 {
		t.Fatalf("/api/ps: %v %+v", err, ps)
	}
	if !regexp.MustCompile(`^K6h/V6h g64, \d+ of \d+ layers with KV$`).MatchString(ps.Models[0].KVCache) ||
		ps.Models[0].KVCache != perf[0][1] || !strings.HasPrefix(perf[1][1], "K4/V4") {
		t.Errorf("/api/ps kv_cache %q (PERF %q)", ps.Models[0].KVCache, perf[0][1])
	}

	// size is the resident size, as Ollama's: weights and KV at the context; size_peak adds
	// the policy's overhead (512 MiB + weights/50) and is what the scheduler budgets.
	load := regexp.MustCompile(`msg="kv policy" .* kv_bytes=(\d+) .* weights=(\d+) .*pressure=normal`).FindStringSubmatch(ks.logs.String())
	if load == nil {
		t.Fatalf("no load-time kv policy line:\n%s", ks.logs.String())
	}
	kv, _ := strconv.ParseInt(load[1], 10, 64)
	weights, _ := strconv.ParseInt(load[2], 10, 64)
	if got := ps.Models[0]; got.Size != weights+kv || got.PeakSize != weights+kv+512<<20+weights/50 {
		t.Errorf("/api/ps size %d size_peak %d, want weights %d + kv %d and that plus the overhead", got.Size, got.PeakSize, weights, kv)
	}
}

// The prefix cache's RAM budget follows the pressure read on each request: critical drops
// the RAM blocks, normal keeps them again.
func TestPrefixBudgetPerRequest(t *testing.T) {
	ks := startKVServer(t)
	ks.chat(t, "Weather?")
	if st := ks.prefix.Stats(); st.RAMBlocks == 0 {
		t.Fatalf("no RAM prefix blocks after the first request: %+v", st)
	}
	ks.sensor.set(sysmem.Critical)
	ks.chat(t, "Rain?")
	if st := ks.prefix.Stats(); st.RAMBlocks != 0 || st.RAMBytes != 0 {
		t.Errorf("critical pressure kept %d RAM prefix blocks (%d bytes)", st.RAMBlocks, st.RAMBytes)
	}
	ks.sensor.set(sysmem.Normal)
	ks.chat(t, "Snow?")
	if st := ks.prefix.Stats(); st.RAMBlocks == 0 {
		t.Errorf("normal pressure again: no RAM prefix blocks: %+v", st)
	}
	hits := regexp.MustCompile(`ram_hit=(\d+)`).FindAllStringSubmatch(ks.logs.String(), -1)
	if len(hits) != 3 || hits[1][1] != "0" {
		t.Errorf("ram_hit per request %q, want 3 requests and none for the critical one", hits)
	}
}
