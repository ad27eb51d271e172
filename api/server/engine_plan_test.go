package server

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/kvstore/sysmem"
)

// countingSensor counts the memory readings the KV policy takes.
type countingSensor struct {
	sysmem.Sensor
	reads atomic.Int32
}

func (s *countingSensor) Read() (sysmem.Info, error) {
	s.reads.Add(1)
	return s.Sensor.Read()
}

// A cold request plans its model once: the scheduler's size, the load and the first sequence's caches
// all go by that plan; a later request plans its new sequence from a fresh reading. A num_ctx above the
// model's maximum (the scripted checkpoint's 8192) is settled where the load is planned and reaches
// /api/ps.
func TestOnePlanPerLoad(t *testing.T) {
	ks := startKVServer(t)
	sensor := &countingSensor{Sensor: ks.sensor}
	ks.loader.KV.Sensor = sensor
	ks.chat(t, "Weather?")
	if got := sensor.reads.Load(); got != 1 {
		t.Errorf("a cold request read memory %d times, want 1 (one plan for size, load and first sequence)", got)
	}
	ks.chat(t, "Rain?")
	if got := sensor.reads.Load(); got != 2 {
		t.Errorf("after a second request: %d readings, want 2", got)
	}

	// Another num_ctx reloads the model (load only: one plan, no sequence).
	resp, err := http.Post(ks.url+"/api/generate", "application/json", strings.NewReader(`{"model":"scripted","options":{"num_ctx":100000}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || sensor.reads.Load() != 3 {
		t.Fatalf("reload: status %d, %d readings, want 200 and 3", resp.StatusCode, sensor.reads.Load())
	}
	if resp, err = http.Get(ks.url + "/api/ps"); err != nil {
		t.Fatal(err)
	}
	var ps api.ProcessResponse
	err = json.NewDecoder(resp.Body).Decode(&ps)
	resp.Body.Close()
	if err != nil || len(ps.Models) != 1 || ps.Models[0].ContextLength != 8192 {
		t.Fatalf("/api/ps: %v %+v, want context_length 8192", err, ps)
	}
}
