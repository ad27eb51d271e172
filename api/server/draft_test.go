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
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/pipeline"
	"github.com/mlxg/mlxg/runner/sched"
)

// draftServer serves qwen3-tiny twice (as qwen3-tiny and tiny-draft), a scripted model with
// Llama 3's tokenizer (llama-scripted), under the KV policy, with defaultDraft as the
// server's default draft model.
func draftServer(t *testing.T, defaultDraft string) *testServer {
	t.Helper()
	tmp := t.TempDir()
	store := &registry.Store{HubCache: filepath.Join(tmp, "hub"), Home: filepath.Join(tmp, "home")}
	llama := filepath.Join(tmp, "llama-scripted")
	if err := apitest.WriteScripted(llama, testdata.Tokenizer(t, "llama3_1"), []apitest.Script{{After: "Hi", Reply: "Hello there."}}); err != nil {
		t.Fatal(err)
	}
	tiny := testdata.SharedModel(t, "qwen3-tiny")
	for name, dir := range map[string]string{"qwen3-tiny": tiny, "tiny-draft": tiny, "llama-scripted": llama} {
		n, _ := registry.ParseName(name)
		if _, err := store.ImportDir(context.Background(), n, dir); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.NewTextHandler(&syncBuffer{}, nil))
	sensor := &switchSensor{info: sysmem.Info{Total: 64 << 30, Available: 40 << 30, Source: "test"}}
	loader := &EngineLoader{Threads: 2, KV: &kvstore.Policy{Log: log, Sensor: sensor}, Logger: log}
	srv, err := NewServer(ServerConfig{Store: store, Loader: loader, Sched: sched.Config{}, Version: "test", Logger: log,
		DraftModel: defaultDraft})
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{Server: httptest.NewServer(srv.Handler()), srv: srv}
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
	})
	return ts
}

// A Modelfile's PARAMETER draft_model loads the draft with its model: greedy output is the
// model's own, drafted tokens are reported, /api/ps and /api/show name the draft, and the
// draft's weights count in the model's size. A draft with another tokenizer, or none in the
// store, fails the request with a 400 naming both models.
func TestDraftModelParameter(t *testing.T) {
	ts := draftServer(t, "")
	var done api.ProgressResponse
	if ts.postJSON(t, "/api/create", `{"model":"tiny-drafted","from":"qwen3-tiny","stream":false,"parameters":{"draft_model":"tiny-draft"}}`, &done) != 200 {
		t.Fatal("create tiny-drafted")
	}
	gen := func(model string) (api.GenerateResponse, api.ProcessModelResponse) {
		t.Helper()
		var r api.GenerateResponse
		body := `{"model":"` + model + `","prompt":"The capital of France is","raw":true,"stream":false,"options":{"num_predict":24,"temperature":0,"num_draft":4}}`
		if ts.postJSON(t, "/api/generate", body, &r) != 200 {
			t.Fatalf("generate with %s", model)
		}
		resp, err := http.Get(ts.URL + "/api/ps")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var ps api.ProcessResponse
		if err := json.Unmarshal(b, &ps); err != nil || resp.StatusCode != 200 || len(ps.Models) != 1 {
			t.Fatalf("/api/ps: %d %s", resp.StatusCode, b)
		}
		return r, ps.Models[0]
	}
	plain, plainPs := gen("qwen3-tiny")
	drafted, draftedPs := gen("tiny-drafted")
	if drafted.Response != plain.Response || plain.Response == "" {
		t.Errorf("with a draft model: %q; without: %q", drafted.Response, plain.Response)
	}
	if drafted.DraftCount == 0 || drafted.DraftAcceptedCount == 0 {
		t.Errorf("draft_count %d, draft_accepted_count %d: the draft model drafted nothing", drafted.DraftCount, drafted.DraftAcceptedCount)
	}
	if plainPs.Draft != "" || !strings.HasPrefix(draftedPs.Draft, "tiny-draft") {
		t.Errorf("/api/ps draft: %q without, %q with a draft model", plainPs.Draft, draftedPs.Draft)
	}
	if draftedPs.Size <= plainPs.Size || draftedPs.PeakSize <= plainPs.PeakSize {
		t.Errorf("/api/ps size %d, peak %d with a draft model; %d, %d without", draftedPs.Size, draftedPs.PeakSize, plainPs.Size, plainPs.PeakSize)
	}
	resp, err := http.Get(ts.URL + "/api/status")
	if err != nil {
		t.Fatal(err)
	}
	var st api.StatusResponse
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Models) != 1 || st.Models[0].Draft != draftedPs.Draft {
		t.Errorf("/api/status models: %+v, %v; want the draft %q", st.Models, err, draftedPs.Draft)
	}
	var show api.ShowResponse
	if ts.postJSON(t, "/api/show", `{"model":"tiny-drafted"}`, &show) != 200 || !strings.Contains(show.Parameters, "draft_model") ||
		!strings.Contains(show.Modelfile, `PARAMETER draft_model "tiny-draft"`) {
		t.Errorf("/api/show: parameters %q, modelfile %q", show.Parameters, show.Modelfile)
	}

	for _, c := range []struct{ draft, want string }{
		{"llama-scripted", "llama-scripted:latest cannot draft for tiny-bad:latest"},
		{"nowhere", "its draft model nowhere"},
	} {
		if ts.postJSON(t, "/api/create", `{"model":"tiny-bad","from":"qwen3-tiny","stream":false,"parameters":{"draft_model":"`+c.draft+`"}}`, &done) != 200 {
			t.Fatal("create tiny-bad")
		}
		status, msg := ts.errorOf(t, "/api/generate", `{"model":"tiny-bad","prompt":"Hi","stream":false,"options":{"num_predict":2}}`)
		if status != 400 && status != 404 || !strings.Contains(msg, c.want) {
			t.Errorf("draft_model %s: %d %q, want 400 with %q", c.draft, status, msg, c.want)
		}
	}
	if status, msg := ts.errorOf(t, "/api/create", `{"model":"x","from":"qwen3-tiny","parameters":{"draft_model":3}}`); status != 400 || !strings.Contains(msg, "draft_model") {
		t.Errorf("draft_model 3: %d %q", status, msg)
	}
}

// The server's default draft model (mlxg serve --draft-model) drafts for every model without
// a draft_model of its own, but not for itself; a model whose tokenizer it does not share
// runs without it instead of failing.
func TestDraftModelServerDefault(t *testing.T) {
	ts := draftServer(t, "tiny-draft")
	lm, err := ts.srv.resolve("qwen3-tiny")
	if err != nil {
		t.Fatal(err)
	}
	d, byDefault, err := ts.srv.draftFor(lm)
	if err != nil || d == nil || !byDefault || !strings.HasPrefix(d.Name, "tiny-draft") {
		t.Fatalf("qwen3-tiny's draft: %v, %v, %v", d, byDefault, err)
	}
	self, _ := ts.srv.resolve("tiny-draft")
	if d, _, err := ts.srv.draftFor(self); err != nil || d != nil {
		t.Errorf("the default draft model's own draft: %v, %v; want none", d, err)
	}
	loader := ts.srv.cfg.Loader.(*EngineLoader)
	loader.Pipeline = &pipeline.Leader{}
	if d, _, err := ts.srv.draftFor(lm); err != nil || d != nil {
		t.Errorf("a split model's draft: %v, %v; want none", d, err)
	}
	loader.Pipeline = nil

	var r api.GenerateResponse
	if ts.postJSON(t, "/api/generate", `{"model":"llama-scripted","prompt":"Hi","raw":true,"stream":false,"options":{"num_predict":8,"temperature":0}}`, &r) != 200 ||
		r.Response != "Hello there." {
		t.Fatalf("llama-scripted with the server's draft model (another tokenizer): %q", r.Response)
	}
	resp, err := http.Get(ts.URL + "/api/ps")
	if err != nil {
		t.Fatal(err)
	}
	var ps api.ProcessResponse
	err = json.NewDecoder(resp.Body).Decode(&ps)
	resp.Body.Close()
	if err != nil || len(ps.Models) != 1 || ps.Models[0].Draft != "" {
		t.Errorf("/api/ps: %+v, %v; want llama-scripted without a draft", ps.Models, err)
	}
}
