package server

// GET /api/status and GET /api/status/events: what the server holds and does now (loaded models with their
// KV plans, memory, the prefix cache, recent throughput, the latest requests' PERF lines), as one JSON object,
// for the dashboard, `mlxg mcp` and scripts. It names no file: model directories and the prefix cache's SSD
// directory stay out of it.

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
)

// recentRequests is how many finished requests the status keeps; throughputWindow is the span its speeds
// are averaged over.
const (
	recentRequests   = 50
	throughputWindow = time.Minute
)

// statusState keeps the latest finished requests (the zero value is ready).
type statusState struct {
	mu     sync.Mutex
	recent []api.StatusRequest // oldest first, at most recentRequests
	// sensor reads the memory; nil: the system's.
	sensor sysmem.Sensor
}

// record keeps one finished request with its PERF line (called where the line is logged).
func (st *statusState) record(model string, o *outcome, err error, perfLine string) {
	done := o.DoneReason
	switch {
	case errors.Is(err, context.Canceled):
		done = "cancelled"
	case err != nil:
		done = "error"
	case done == "":
		done = "stop"
	}
	r := api.StatusRequest{Time: time.Now(), Model: model, PromptTokens: o.PromptTokens, EvalTokens: o.EvalTokens,
		PrefillS: o.PromptEvalDuration.Seconds(), DecodeS: o.EvalDuration.Seconds(), LoadS: o.load.Seconds(),
		TotalS: o.total.Seconds(), Done: done, Perf: perfLine}
	st.mu.Lock()
	defer st.mu.Unlock()
	st.recent = append(st.recent, r)
	if n := len(st.recent) - recentRequests; n > 0 {
		st.recent = append(st.recent[:0], st.recent[n:]...)
	}
}

// requests returns the kept requests, newest first.
func (st *statusState) requests() []api.StatusRequest {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := make([]api.StatusRequest, len(st.recent))
	for i, r := range st.recent {
		out[len(out)-1-i] = r
	}
	return out
}

// throughput averages the requests finished within the window before now.
func throughput(reqs []api.StatusRequest, now time.Time) api.StatusThroughput {
	t := api.StatusThroughput{WindowSeconds: throughputWindow.Seconds()}
	var prompt, gen int
	var prefill, decode, ttft float64
	for _, r := range reqs {
		if now.Sub(r.Time) > throughputWindow || r.Done == "error" {
			continue
		}
		t.Requests++
		prompt += r.PromptTokens
		gen += r.EvalTokens
		prefill += r.PrefillS
		decode += r.DecodeS
		ttft += r.LoadS + r.PrefillS
	}
	if prefill > 0 {
		t.PrefillTPS = float64(prompt) / prefill
	}
	if decode > 0 {
		t.DecodeTPS = float64(gen) / decode
	}
	if t.Requests > 0 {
		t.TTFTSeconds = ttft / float64(t.Requests)
	}
	return t
}

// Status is the server's status now.
func (s *Server) Status() api.StatusResponse {
	now := time.Now()
	out := api.StatusResponse{Time: now, Version: s.cfg.Version, Models: []api.StatusModel{}, Requests: s.status.requests()}
	out.Throughput = throughput(out.Requests, now)
	out.Throughput.Queued = s.sched.Waiting()
	for _, st := range s.sched.Running() {
		l, ok := st.Model.(*loaded)
		if !ok {
			continue
		}
		info := l.Info()
		size := info.Size
		if size <= 0 {
			size = st.Size
		}
		m := api.StatusModel{Name: st.Name, Size: size, Peak: st.Size, SizeVRAM: min(info.GPUSize, size), ContextLength: info.ContextLength,
			ContextReason: info.ContextReason, KVCache: info.KVSpec, Active: st.Active, ExpiresAt: st.ExpiresAt, Forever: st.Forever, Batch: processBatch(info),
			Draft: info.Draft}
		if m.ExpiresAt.IsZero() && !m.Forever {
			m.ExpiresAt = now.Add(st.KeepAlive) // in use: it expires keep_alive after its requests end
		}
		out.Throughput.Active += st.Active
		if b := info.Batch; b != nil {
			out.Throughput.Queued += b.Waiting
		}
		if u := info.Used; u != nil {
			m.ContextUsed = &api.StatusContextUse{Tokens: u.Tokens, KVBytes: u.KVBytes, Restored: u.Restored, Truncated: u.Truncated,
				MessagesDropped: u.MessagesDropped}
		}
		if em, ok := l.Model.(*engineModel); ok {
			m.Backend = em.backend
			m.KVHeld = em.e.KVHeld()
			out.Memory.KVHeld += m.KVHeld
			if em.loadPlan != nil {
				m.Plan = kvPlanView(em.loadPlan)
				out.Memory.Weights += em.loadPlan.plan.Weights
				out.Memory.KV += em.loadPlan.plan.KVBytes
			} else {
				out.Memory.Weights += l.lm.Size
				out.Memory.KV += max(size-l.lm.Size, 0)
			}
		}
		out.Models = append(out.Models, m)
	}
	sensor := s.status.sensor
	if sensor == nil {
		sensor = sysmem.System()
	}
	if mem, err := sensor.Read(); err != nil {
		out.Memory.Error = err.Error()
	} else {
		out.Memory.Total, out.Memory.Available, out.Memory.Pressure = mem.Total, mem.Available, mem.Pressure.String()
		out.Memory.SwapTotal, out.Memory.SwapUsed = mem.SwapTotal, mem.SwapUsed
	}
	if el, ok := s.cfg.Loader.(*EngineLoader); ok && el.Prefix != nil {
		p := el.Prefix.Stats()
		out.PrefixCache = &api.StatusPrefix{RAMBlocks: p.RAMBlocks, RAMBytes: p.RAMBytes, DiskBlocks: p.DiskBlocks, DiskBytes: p.DiskBytes,
			RAMHits: p.RAMHits, DiskHits: p.DiskHits, Misses: p.Misses, Lookups: p.Lookups}
		out.Memory.PrefixCache, out.Memory.PrefixSSD = p.RAMBytes, p.DiskBytes
	}
	return out
}

// bitsLabel spells a format's bits as /api/ps's layout string does: "16", "8", "6h", "4", "q4_0".
func bitsLabel(f kvstore.Format) string {
	label := strconv.Itoa(f.Bits)
	switch f.Mode {
	case kvstore.F16:
		label = "16"
	case kvstore.Q4_0:
		label = "q4_0"
	}
	if f.Rotated && f.Mode != kvstore.F16 { // as the layout spells it: K6h/V6h
		label += "h"
	}
	return label
}

// kvPlan is a plan as the status reports it, with one entry per layer.
func kvPlanView(mp *kvLoad) *api.KVPlan {
	p, shape := mp.plan, mp.shape
	out := &api.KVPlan{Layout: p.Layout.String(), Context: p.Context, FitContext: p.FitContext, TokenBytes: p.KVTokenBytes,
		KVBytes: p.KVBytes, Weights: p.Weights, Overhead: p.Overhead, PrefixBudget: p.PrefixBudget, Reason: p.Reason, ContextReason: p.ContextReason,
		Layers: make([]api.KVLayerPlan, 0, len(shape.Layers))}
	total := shape.KVBefore + len(shape.KVLayers()) + shape.KVAfter
	nb := p.Layout.BoundaryLayers
	n := 0 // KV layers so far
	for i, ls := range shape.Layers {
		l := api.KVLayerPlan{Layer: i, Kind: ls.Kind.String()}
		if ls.Kind.HasKV() && i < len(p.Layout.Specs) {
			g := shape.KVBefore + n // the layer's place among the whole model's KV layers, as the layout counts
			n++
			s := p.Layout.Specs[i]
			l.KBits, l.VBits, l.KGroup, l.VGroup = bitsLabel(s.K), bitsLabel(s.V), s.K.Group, s.V.Group
			l.Boundary = nb > 0 && (g < nb || g >= total-nb)
			l.TokenBytes = int64(s.TokenBytes(ls.KVHeads, ls.KHeadDim, ls.VHeadDim))
		}
		out.Layers = append(out.Layers, l)
	}
	return out
}

func (s *Server) handleStatus(c *gin.Context) {
	c.JSON(http.StatusOK, s.Status())
}

// statusInterval is how often the events route sends a snapshot while it changes, and statusHeartbeat the
// longest it stays silent when nothing does.
var (
	statusInterval  = time.Second
	statusHeartbeat = 15 * time.Second
)

// handleStatusEvents streams the status as server-sent events: one "status" event at once, then one a second
// while it changes (the time field aside), and a comment line as a heartbeat when it does not.
func (s *Server) handleStatusEvents(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	var last []byte
	quiet := time.Duration(0)
	tick := time.NewTicker(statusInterval)
	defer tick.Stop()
	for {
		st := s.Status()
		st.Time = time.Time{}
		key, _ := json.Marshal(st)
		switch {
		case string(key) != string(last):
			st.Time = time.Now()
			b, _ := json.Marshal(st)
			if _, err := c.Writer.Write([]byte("event: status\ndata: " + string(b) + "\n\n")); err != nil {
				return
			}
			last, quiet = key, 0
		case quiet >= statusHeartbeat:
			if _, err := c.Writer.Write([]byte(": heartbeat\n\n")); err != nil {
				return
			}
			quiet = 0
		}
		c.Writer.Flush()
		select {
		case <-c.Request.Context().Done():
			return
		case <-s.stop.Done():
			return
		case <-tick.C:
			quiet += statusInterval
		}
	}
}
