package server

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/pipeline/pipelinetest"
	"github.com/mlxg/mlxg/runner/sched"
)

// TestSplitRefusalThroughServer: a server that splits its models over ranks (as `mlxg
// serve --hostfile`, here five ranks of pipelinetest's in-process transport) answers a
// request for a model it cannot split over them (a Gemma 4 of the E2B kind, 6 layers, the
// last two reading the KV of layers 2 and 3, which leaves 3 places to cut) with a 400
// that gives the reason, on Ollama's and OpenAI's APIs, as it answers a model whose
// architecture it does not run, not with a 500.
func TestSplitRefusalThroughServer(t *testing.T) {
	hf := filepath.Join(t.TempDir(), "e2b")
	if err := randmodel.Generate(hf, randmodel.TinyGemma4(262208), randmodel.Options{Seed: 3, TokenizerDir: testdata.Tokenizer(t, "gemma3")}); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, sched.Config{})
	n, _ := registry.ParseName("e2b")
	if _, err := ts.srv.cfg.Store.ImportDir(context.Background(), n, hf); err != nil {
		t.Fatal(err)
	}
	p := pipelinetest.Start(t, pipelinetest.Config{Ranks: 5, Backend: func(int) compute.Backend { return cpu.New(2) }})
	ts.srv.cfg.Loader.(*EngineLoader).Pipeline = p.Leader
	const why = "6 layers cannot be split over 5 ranks: a layer that reads another layer's KV runs on that layer's rank, which leaves 3 places to cut"
	for _, c := range []struct{ path, body string }{
		{"/api/generate", `{"model":"e2b","prompt":"Hi","stream":false,"options":{"num_predict":2}}`},
		{"/v1/chat/completions", `{"model":"e2b","max_tokens":2,"messages":[{"role":"user","content":"Hi"}]}`},
	} {
		resp, body := ts.post(t, c.path, c.body)
		if resp.StatusCode != 400 || !strings.Contains(string(body), why) {
			t.Errorf("%s for a model that cannot be split: %d %s, want 400 with %q", c.path, resp.StatusCode, body, why)
		}
	}
}
