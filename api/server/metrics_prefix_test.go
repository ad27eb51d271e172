package server

import (
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mlxg/mlxg/kvstore"
)

func TestPrefixMetrics(t *testing.T) {
	p, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := rand.New(rand.NewPCG(1, 2))
	tokens := make([]int32, 600)
	for i := range tokens {
		tokens[i] = int32(r.IntN(1000))
	}
	// Two requests with the same prompt: the second reuses two full blocks and the partial.
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
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewPrefixCollector(p))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "{" + l.GetValue() + "}"
			}
			got[name] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	want := map[string]float64{"mlxg_prefix_cache_hits_total{ram}": 3, "mlxg_prefix_cache_hits_total{ssd}": 0,
		"mlxg_prefix_cache_lookups_total": 2, "mlxg_prefix_cache_misses_total": 1, "mlxg_prefix_cache_ssd_blocks_written_total": 3,
		"mlxg_prefix_cache_blocks{ram}": 3, "mlxg_prefix_cache_blocks{ssd}": 3, "mlxg_prefix_cache_ssd_full": 0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != 15 {
		t.Errorf("%d metrics, want 15: %v", len(got), got)
	}
}
