package server

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/registry"
)

// resolve parses and finds a model name: 400 for a malformed name, 404 (Ollama's message) when it is not
// in the store.
func (s *Server) resolve(name string) (*registry.LocalModel, error) {
	if strings.TrimSpace(name) == "" {
		return nil, errorf(http.StatusBadRequest, "model is required")
	}
	n, err := registry.ParseName(name)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "%v", err)
	}
	m, err := s.cfg.Store.Resolve(n)
	if errors.Is(err, registry.ErrNotFound) {
		return nil, errorf(http.StatusNotFound, "model '%s' not found", name)
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

func (s *Server) handleVersion(c *gin.Context) {
	c.JSON(http.StatusOK, api.VersionResponse{Version: api.OllamaVersion, MLXGVersion: s.cfg.Version})
}

// notFound turns the store's "not found" into Ollama's 404 answer for name.
func notFound(err error, name string) error {
	var se api.StatusError
	switch {
	case errors.As(err, &se) && se.StatusCode != 0:
		return &apiError{status: se.StatusCode, msg: se.ErrorMessage}
	case errors.Is(err, registry.ErrNotFound):
		return errorf(http.StatusNotFound, "model '%s' not found", name)
	}
	return err
}

func (s *Server) handleTags(c *gin.Context) {
	resp, err := s.models.List(c.Request.Context())
	if err != nil {
		abortErr(c, err)
		return
	}
	c.JSON(http.StatusOK, resp)
}

func (s *Server) handleShow(c *gin.Context) {
	var req api.ShowRequest
	if err := decode(c, &req); err != nil {
		abortErr(c, err)
		return
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	if _, err := s.resolve(req.Model); err != nil {
		abortErr(c, err)
		return
	}
	resp, err := s.models.Show(c.Request.Context(), &req)
	if err != nil {
		abortErr(c, notFound(err, req.Model))
		return
	}
	s.showContext(resp, req.Model)
	if !s.enginesSeeImages() {
		resp.Capabilities = slices.DeleteFunc(resp.Capabilities, func(c string) bool { return c == "vision" })
	}
	c.JSON(http.StatusOK, resp)
}

// showContext adds to /api/show's model_info the context the model runs with and why (mlxg's keys;
// "<arch>.context_length" stays the trained maximum, as Ollama's): a loaded model's, else the one a
// load would choose now from this server's settings and memory (mlxg.context_loaded says which).
func (s *Server) showContext(resp *api.ShowResponse, model string) {
	if resp.ModelInfo == nil {
		return
	}
	lm, err := s.resolve(model)
	if err != nil {
		return
	}
	for _, st := range s.sched.Running() {
		if l, ok := st.Model.(*loaded); ok && st.Key == lm.Dir {
			info := l.Info()
			resp.ModelInfo["mlxg.context_length"] = info.ContextLength
			resp.ModelInfo["mlxg.context_reason"] = info.ContextReason
			resp.ModelInfo["mlxg.context_loaded"] = true
			return
		}
	}
	o := api.DefaultOptions()
	o.NumCtx = s.cfg.ContextLength
	if modelOptions(&o, lm) != nil {
		return
	}
	p, err := s.cfg.Loader.Plan(lm, o.NumCtx, 0)
	if err != nil {
		resp.ModelInfo["mlxg.context_reason"] = "it would not load now: " + err.Error()
		return
	}
	resp.ModelInfo["mlxg.context_length"] = p.Context
	resp.ModelInfo["mlxg.context_reason"] = p.ContextReason
	resp.ModelInfo["mlxg.context_loaded"] = false
}

func (s *Server) handlePull(c *gin.Context) {
	var req api.PullRequest
	if err := decode(c, &req); err != nil {
		abortErr(c, err)
		return
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	if strings.TrimSpace(req.Model) == "" {
		abort(c, http.StatusBadRequest, "model is required")
		return
	}
	if _, err := registry.ParseName(req.Model); err != nil {
		abort(c, http.StatusBadRequest, err.Error())
		return
	}
	stream := req.Stream == nil || *req.Stream
	nd := newNDJSON(c)
	err := s.models.Pull(c.Request.Context(), &req, func(p api.ProgressResponse) error {
		if !stream {
			return nil
		}
		return nd.send(p)
	})
	if err != nil {
		s.log.Warn("pull failed", "model", req.Model, "error", err)
		if errors.Is(err, registry.ErrNotFound) {
			err = errorf(http.StatusNotFound, "%v", err)
		}
		nd.fail(notFound(err, req.Model))
		return
	}
	if !stream {
		c.JSON(http.StatusOK, api.ProgressResponse{Status: "success"})
	}
}

func (s *Server) handleDelete(c *gin.Context) {
	var req api.DeleteRequest
	if err := decode(c, &req); err != nil {
		abortErr(c, err)
		return
	}
	if req.Model == "" {
		req.Model = req.Name
	}
	m, err := s.resolve(req.Model)
	if err != nil {
		abortErr(c, err)
		return
	}
	s.sched.Unload(m.Dir)
	if err := s.models.Delete(c.Request.Context(), &req); err != nil {
		abortErr(c, notFound(err, req.Model))
		return
	}
	c.Status(http.StatusOK)
}

func (s *Server) handleCopy(c *gin.Context) {
	var req api.CopyRequest
	if err := decode(c, &req); err != nil {
		abortErr(c, err)
		return
	}
	if req.Source == "" || req.Destination == "" {
		abort(c, http.StatusBadRequest, "source and destination are required")
		return
	}
	if _, err := s.resolve(req.Source); err != nil {
		abortErr(c, err)
		return
	}
	if err := s.models.Copy(c.Request.Context(), &req); err != nil {
		var se api.StatusError
		if errors.As(err, &se) || errors.Is(err, registry.ErrNotFound) {
			abortErr(c, notFound(err, req.Source))
			return
		}
		abort(c, http.StatusBadRequest, err.Error())
		return
	}
	c.Status(http.StatusOK)
}

// loaded is what the scheduler holds: the model and what ps shows about it.
type loaded struct {
	Model
	lm      *registry.LocalModel
	details api.ModelDetails
}

// Size is what the scheduler budgets for the model: its predicted peak.
func (l *loaded) Size() int64 {
	if i := l.Info(); i.Peak > 0 {
		return i.Peak
	}
	return l.Info().Size
}

func processBatch(info LoadedInfo) *api.ProcessBatch {
	b := info.Batch
	if b == nil {
		return nil
	}
	p := &api.ProcessBatch{MaxSequences: b.Cap, Running: b.Running, Waiting: b.Waiting, Steps: b.Steps}
	if b.Steps > 0 {
		p.MeanSequences = float64(b.Seqs) / float64(b.Steps)
	}
	return p
}

func (s *Server) handlePs(c *gin.Context) {
	resp := api.ProcessResponse{Models: []api.ProcessModelResponse{}}
	for _, st := range s.sched.Running() {
		l, ok := st.Model.(*loaded)
		if !ok {
			continue
		}
		info := l.Info()
		exp := st.ExpiresAt
		switch {
		case st.Forever:
			exp = time.Now().Add(time.Duration(1<<63 - 1))
		case exp.IsZero(): // in use: it expires keep_alive after its requests end
			exp = time.Now().Add(st.KeepAlive)
		}
		size := info.Size // resident, as Ollama reports it; the scheduler's budget is the peak
		if size <= 0 {
			size = st.Size
		}
		resp.Models = append(resp.Models, api.ProcessModelResponse{Name: st.Name, Model: st.Name, Size: size,
			Digest: l.lm.Commit, Details: l.details, ExpiresAt: exp, SizeVRAM: min(info.GPUSize, size),
			ContextLength: info.ContextLength, ContextReason: info.ContextReason, KVCache: info.KVSpec, PeakSize: st.Size, Batch: processBatch(info), Ranks: processRanks(info),
			Streaming: processStreaming(info), Draft: info.Draft, Vision: processVision(info)})
	}
	c.JSON(http.StatusOK, resp)
}

func processRanks(info LoadedInfo) []api.ProcessRank {
	var out []api.ProcessRank
	for _, r := range info.Ranks {
		out = append(out, api.ProcessRank{Rank: r.Rank, Host: r.Host, Layers: r.Layers, State: r.State})
	}
	return out
}

// processVision is a loaded model's vision tower memory for /api/ps, nil when it reads text only.
func processVision(info LoadedInfo) *api.ProcessVision {
	v := info.Vision
	if v == nil {
		return nil
	}
	return &api.ProcessVision{Weights: v.Weights, Activations: v.Activations(), EncodePeak: v.Encode, MaxPatches: v.MaxPatches, Features: v.Features,
		MaxPixels: v.MaxPixels, Lowered: v.MaxPixels < v.CheckpointPixels}
}

// processStreaming is a loaded model's weight residency for /api/ps, nil when it does not stream.
func processStreaming(info LoadedInfo) *api.ProcessStreaming {
	s := info.Stream
	if s == nil {
		return nil
	}
	return &api.ProcessStreaming{Resident: s.Pinned + s.Resident, Weights: info.Weights, Budget: s.Budget,
		Hits: s.Hits, Misses: s.Misses, BytesRead: s.BytesRead, HitRate: s.HitRate(), Layers: info.Layers, KeptLayers: info.KeptLayers}
}
