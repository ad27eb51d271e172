package server

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/sched"
)

// countingSensor counts the memory readings the KV policy takes.
type countingSensor struct {
	sysmem.Fixed
	reads atomic.Int32
}

func (s *countingSensor) Read() (sysmem.Info, error) {
	s.reads.Add(1)
	return s.Fixed.Read()
}

// A cold request plans its model once: the scheduler's size, the load and the first sequence's caches
// all go by that plan; a later request plans its new sequence from a fresh reading. A num_ctx above the
// model's maximum (the scripted checkpoint's 8192) is settled there and reaches /api/ps.
func TestOnePlanPerLoad(t *testing.T) {
	ckpt := scriptedCheckpoint(t)
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	n, _ := registry.ParseName("scripted")
	if _, err := store.ImportDir(context.Background(), n, ckpt); err != nil {
		t.Fatal(err)
	}
	sensor := &countingSensor{Fixed: sysmem.Fixed{Total: 64 << 30, Available: 40 << 30, Source: "test"}}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	loader := &EngineLoader{Threads: 2, KV: &kvstore.Policy{Log: log, Sensor: sensor}, Logger: log}
	srv, err := NewServer(ServerConfig{Store: store, Loader: loader, Sched: sched.Config{}, Version: "test", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv.Handler())
	defer func() { ts.Close(); srv.Close() }()

	chat := func(user string) {
		t.Helper()
		body := `{"model":"scripted","stream":false,"think":false,"options":{"num_predict":4,"num_ctx":100000},"messages":[{"role":"user","content":"` + user + `"}]}`
		resp, err := http.Post(ts.URL+"/api/chat", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
	}
	chat("Weather?")
	if got := sensor.reads.Load(); got != 1 {
		t.Errorf("a cold request read memory %d times, want 1 (one plan for size, load and first sequence)", got)
	}
	chat("Rain?")
	if got := sensor.reads.Load(); got != 2 {
		t.Errorf("after a second request: %d readings, want 2", got)
	}

	resp, err := http.Get(ts.URL + "/api/ps")
	if err != nil {
		t.Fatal(err)
	}
	var ps api.ProcessResponse
	err = json.NewDecoder(resp.Body).Decode(&ps)
	resp.Body.Close()
	if err != nil || len(ps.Models) != 1 || ps.Models[0].ContextLength != 8192 {
		t.Fatalf("/api/ps: %v %+v, want context_length 8192", err, ps)
	}
}
