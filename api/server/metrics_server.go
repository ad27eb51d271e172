package server

import (
	"context"
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mlxg/mlxg/kvstore/sysmem"
)

// The server's Prometheus metrics: per request (counted where the PERF line is logged) and,
// at each scrape, the loaded models and the memory pressure.

var (
	requestsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mlxg_requests_total",
		Help: "Generation requests finished, by model and outcome (stop, length, cancelled, error)."}, []string{"model", "outcome"})
	promptTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mlxg_prompt_tokens_total",
		Help: "Prompt tokens of finished requests."}, []string{"model"})
	generatedTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mlxg_generated_tokens_total",
		Help: "Tokens generated."}, []string{"model"})
	prefillSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mlxg_prefill_seconds",
		Help: "Prompt evaluation time per request (time to first token, less loading).", Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12)}, []string{"model"})
	decodeSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "mlxg_decode_seconds",
		Help: "Generation time per request.", Buckets: prometheus.ExponentialBuckets(0.01, 2.5, 12)}, []string{"model"})
	draftTokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mlxg_draft_tokens_total",
		Help: "Tokens drafted by speculative decoding (prompt lookup)."}, []string{"model"})
	draftAccepted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mlxg_draft_accepted_tokens_total",
		Help: "Drafted tokens the model kept (divided by mlxg_draft_tokens_total: the acceptance rate)."}, []string{"model"})
	registerRequests sync.Once
)

// observeRequest counts one finished request.
func observeRequest(model string, o *outcome, err error) {
	registerRequests.Do(func() {
		for _, c := range []prometheus.Collector{requestsTotal, promptTokens, generatedTokens, prefillSeconds, decodeSeconds, draftTokens, draftAccepted} {
			prometheus.Register(c)
		}
	})
	outcome := o.DoneReason
	switch {
	case errors.Is(err, context.Canceled):
		outcome = "cancelled"
	case err != nil:
		outcome = "error"
	case outcome == "":
		outcome = "stop"
	}
	requestsTotal.WithLabelValues(model, outcome).Inc()
	promptTokens.WithLabelValues(model).Add(float64(o.PromptTokens))
	generatedTokens.WithLabelValues(model).Add(float64(o.EvalTokens))
	prefillSeconds.WithLabelValues(model).Observe(o.PromptEvalDuration.Seconds())
	decodeSeconds.WithLabelValues(model).Observe(o.EvalDuration.Seconds())
	if o.DraftTokens > 0 {
		draftTokens.WithLabelValues(model).Add(float64(o.DraftTokens))
		draftAccepted.WithLabelValues(model).Add(float64(o.DraftAccepted))
	}
}

var (
	loadedModels = prometheus.NewDesc("mlxg_loaded_models", "Models loaded.", nil, nil)
	loadedBytes  = prometheus.NewDesc("mlxg_loaded_model_bytes", "Memory of a loaded model (weights and KV cache).", []string{"model"}, nil)
	memPressure  = prometheus.NewDesc("mlxg_memory_pressure", "The system's memory pressure: 0 normal, 1 warn, 2 critical.", nil, nil)
	memAvailable = prometheus.NewDesc("mlxg_memory_available_bytes", "Memory available to new allocations.", nil, nil)
	batchRunning = prometheus.NewDesc("mlxg_batch_sequences", "Sequences in a model's continuous batch now.", []string{"model"}, nil)
	batchWaiting = prometheus.NewDesc("mlxg_batch_waiting", "Requests waiting for a place in a model's continuous batch.", []string{"model"}, nil)
	batchMax     = prometheus.NewDesc("mlxg_batch_max_sequences", "Sequences a model batches at once.", []string{"model"}, nil)
	batchSteps   = prometheus.NewDesc("mlxg_batch_steps_total", "Batched forward passes run by a loaded model.", []string{"model"}, nil)
	batchSeqs    = prometheus.NewDesc("mlxg_batch_sequence_steps_total", "Sequences summed over a loaded model's batched passes (divided by the steps: the mean batch).", []string{"model"}, nil)

	streamHits     = prometheus.NewDesc("mlxg_expert_cache_hits_total", "Experts (a dense model: layers) a model in streaming mode found in its RAM cache.", []string{"model"}, nil)
	streamMisses   = prometheus.NewDesc("mlxg_expert_cache_misses_total", "Experts (a dense model: layers) a model in streaming mode read from its checkpoint.", []string{"model"}, nil)
	streamRead     = prometheus.NewDesc("mlxg_weight_stream_read_bytes_total", "Bytes of weights a model in streaming mode read from its checkpoint.", []string{"model"}, nil)
	streamIssued   = prometheus.NewDesc("mlxg_expert_prefetch_issued_total", "Experts (a dense model: layers) a model in streaming mode read ahead of their use.", []string{"model"}, nil)
	streamUseful   = prometheus.NewDesc("mlxg_expert_prefetch_useful_total", "Experts (a dense model: layers) read ahead that were used before being evicted.", []string{"model"}, nil)
	streamResident = prometheus.NewDesc("mlxg_weight_resident_bytes", "Bytes of weights a model in streaming mode holds in memory.", []string{"model"}, nil)
	streamBudget   = prometheus.NewDesc("mlxg_weight_budget_bytes", "The most bytes of weights a model in streaming mode keeps in memory now.", []string{"model"}, nil)
)

type serverCollector struct {
	s      *Server
	sensor sysmem.Sensor
}

// Collector exports the server's loaded models and the memory pressure; serve registers it.
func (s *Server) Collector() prometheus.Collector {
	return serverCollector{s: s, sensor: sysmem.System()}
}

func (c serverCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- loadedModels
	ch <- loadedBytes
	ch <- memPressure
	ch <- memAvailable
	ch <- batchRunning
	ch <- batchWaiting
	ch <- batchMax
	ch <- batchSteps
	ch <- batchSeqs
	for _, d := range []*prometheus.Desc{streamHits, streamMisses, streamRead, streamIssued, streamUseful, streamResident, streamBudget} {
		ch <- d
	}
}

func (c serverCollector) Collect(ch chan<- prometheus.Metric) {
	running := c.s.sched.Running()
	ch <- prometheus.MustNewConstMetric(loadedModels, prometheus.GaugeValue, float64(len(running)))
	bytes := map[string]int64{}
	for _, r := range running {
		bytes[r.Name] += r.Size
	}
	for name, n := range bytes {
		ch <- prometheus.MustNewConstMetric(loadedBytes, prometheus.GaugeValue, float64(n), name)
	}
	seen := map[string]bool{}
	for _, r := range running {
		l, ok := r.Model.(*loaded)
		if !ok || seen[r.Name] {
			continue
		}
		seen[r.Name] = true
		info := l.Info()
		if st := info.Stream; st != nil {
			ch <- prometheus.MustNewConstMetric(streamHits, prometheus.CounterValue, float64(st.Hits), r.Name)
			ch <- prometheus.MustNewConstMetric(streamMisses, prometheus.CounterValue, float64(st.Misses), r.Name)
			ch <- prometheus.MustNewConstMetric(streamRead, prometheus.CounterValue, float64(st.BytesRead), r.Name)
			ch <- prometheus.MustNewConstMetric(streamIssued, prometheus.CounterValue, float64(st.PrefetchIssued), r.Name)
			ch <- prometheus.MustNewConstMetric(streamUseful, prometheus.CounterValue, float64(st.PrefetchUseful), r.Name)
			ch <- prometheus.MustNewConstMetric(streamResident, prometheus.GaugeValue, float64(st.Pinned+st.Resident), r.Name)
			ch <- prometheus.MustNewConstMetric(streamBudget, prometheus.GaugeValue, float64(st.Budget), r.Name)
		}
		if b := info.Batch; b != nil {
			ch <- prometheus.MustNewConstMetric(batchRunning, prometheus.GaugeValue, float64(b.Running), r.Name)
			ch <- prometheus.MustNewConstMetric(batchWaiting, prometheus.GaugeValue, float64(b.Waiting), r.Name)
			ch <- prometheus.MustNewConstMetric(batchMax, prometheus.GaugeValue, float64(b.Cap), r.Name)
			ch <- prometheus.MustNewConstMetric(batchSteps, prometheus.CounterValue, float64(b.Steps), r.Name)
			ch <- prometheus.MustNewConstMetric(batchSeqs, prometheus.CounterValue, float64(b.Seqs), r.Name)
		}
	}
	if m, err := c.sensor.Read(); err == nil {
		ch <- prometheus.MustNewConstMetric(memPressure, prometheus.GaugeValue, float64(m.Pressure))
		ch <- prometheus.MustNewConstMetric(memAvailable, prometheus.GaugeValue, float64(m.Available))
	}
}
