package server

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner"
)

// num_draft reaches the engine from every route: options.num_draft on Ollama's, a
// top-level num_draft on OpenAI's, the Responses API and Anthropic's; speculative decoding
// is on by default; the reply's draft counts, the PERF line and /metrics report what it
// drafted and kept.
func TestNumDraftOnEveryRoute(t *testing.T) {
	ks := startKVServer(t)
	post := func(path, body string) []byte {
		t.Helper()
		resp, err := http.Post(ks.url+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: status %d: %s", path, resp.StatusCode, b)
		}
		return b
	}
	perfs := func() []string {
		return regexp.MustCompile(`PERF: [^\n]*`).FindAllString(ks.logs.String(), -1)
	}
	// An unscripted prompt: the scripted model repeats one token, which prompt lookup drafts.
	gen := `{"model":"scripted","prompt":"zebra quartz","raw":true,"stream":false,"options":{"num_predict":24,"temperature":0%s}}`
	var r api.GenerateResponse
	if err := json.Unmarshal(post("/api/generate", strings.Replace(gen, "%s", "", 1)), &r); err != nil {
		t.Fatal(err)
	}
	if r.DraftCount == 0 || r.DraftAcceptedCount == 0 || r.DraftAcceptedCount > r.DraftCount {
		t.Fatalf("default num_draft: draft_count %d, draft_accepted_count %d", r.DraftCount, r.DraftAcceptedCount)
	}
	p := perfs()
	want := regexp.MustCompile(`draft_tok=(\d+) draft_acc=(\d+) draft_rate=0\.\d{3}|draft_rate=1\.000`)
	if len(p) != 1 || !want.MatchString(p[0]) {
		t.Fatalf("PERF: %q", p)
	}
	off := []struct{ path, body string }{
		{"/api/generate", strings.Replace(gen, "%s", `,"num_draft":0`, 1)},
		{"/v1/chat/completions", `{"model":"scripted","max_tokens":8,"num_draft":0,"messages":[{"role":"user","content":"zebra quartz"}]}`},
		{"/v1/completions", `{"model":"scripted","max_tokens":8,"num_draft":0,"prompt":"zebra quartz"}`},
		{"/v1/responses", `{"model":"scripted","max_output_tokens":8,"num_draft":0,"input":"zebra quartz"}`},
		{"/v1/messages", `{"model":"scripted","max_tokens":8,"num_draft":0,"messages":[{"role":"user","content":"zebra quartz"}]}`},
	}
	for i, o := range off {
		post(o.path, o.body)
		if p := perfs(); len(p) != i+2 || strings.Contains(p[i+1], "draft_tok") {
			t.Fatalf("%s with num_draft 0: PERF %q", o.path, p[len(p)-1])
		}
	}
	post("/v1/chat/completions", `{"model":"scripted","max_tokens":8,"num_draft":3,"messages":[{"role":"user","content":"zebra quartz"}]}`)
	if p := perfs(); !strings.Contains(p[len(p)-1], "draft_tok=") {
		t.Fatalf("/v1/chat/completions with num_draft 3: PERF %q", p[len(p)-1])
	}
	bad, err := http.Post(ks.url+"/api/generate", "application/json", strings.NewReader(strings.Replace(gen, "%s", `,"num_draft":-1`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	bad.Body.Close()
	if bad.StatusCode != http.StatusBadRequest {
		t.Errorf("num_draft -1: status %d, want 400", bad.StatusCode)
	}
	resp, err := http.Get(ks.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{`mlxg_draft_tokens_total{model="scripted"}`, `mlxg_draft_accepted_tokens_total{model="scripted"}`} {
		if !strings.Contains(string(b), m) {
			t.Errorf("/metrics has no %s", m)
		}
	}
}

func TestNumDraftDefault(t *testing.T) {
	for in, want := range map[int]int{0: runner.DefaultNumDraft, -1: 0, 5: 5} {
		if got := (ServerConfig{NumDraft: in}).numDraft(); got != want {
			t.Errorf("NumDraft %d: default num_draft %d, want %d", in, got, want)
		}
	}
}

// A Modelfile's PARAMETER num_draft sets the model's default, which a request's option overrides.
func TestNumDraftModelfileParameter(t *testing.T) {
	req, _, err := api.ParseModelfile(strings.NewReader("FROM org/tiny\nPARAMETER num_draft 3\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var params map[string]any // as the store keeps them: JSON
	raw, _ := json.Marshal(req.Parameters)
	if err := json.Unmarshal(raw, &params); err != nil {
		t.Fatal(err)
	}
	lm := &registry.LocalModel{Name: "tiny", Modelfile: &registry.Modelfile{Parameters: params}}
	o := api.DefaultOptions()
	o.NumDraft = runner.DefaultNumDraft
	if err := modelOptions(&o, lm); err != nil || o.NumDraft != 3 {
		t.Fatalf("PARAMETER num_draft 3: num_draft %d (%v)", o.NumDraft, err)
	}
	if err := o.FromMap(map[string]any{"num_draft": float64(0)}); err != nil || o.NumDraft != 0 {
		t.Fatalf("the request's num_draft 0: %d (%v)", o.NumDraft, err)
	}
}
