package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// codexConfig is Codex's config.toml: the Ollama provider for --oss, and no analytics, feedback, OpenTelemetry
// export or update check.
const codexConfig = `oss_provider = "ollama"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"
trace_exporter = "none"
metrics_exporter = "none"
log_user_prompt = false
`

// codexEnv gives Codex a fresh CODEX_HOME holding codexConfig, and the server (through rec) as its Ollama:
// CODEX_OSS_BASE_URL is how Codex's --oss provider is pointed at a host other than localhost:11434.
func codexEnv(t *testing.T, base string) []string {
	home := t.TempDir()
	codexHome := filepath.Join(home, ".codex")
	if err := os.MkdirAll(codexHome, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(codexHome, "config.toml"), []byte(codexConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	return isolatedEnv(home, "CODEX_HOME="+codexHome, "CODEX_OSS_BASE_URL="+base+"/v1", "RUST_LOG=error")
}

// codexEvent is one line of `codex exec --json`.
type codexEvent struct {
	Type string `json:"type"`
	Item struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Command string `json:"command"`
		Output  string `json:"aggregated_output"`
	} `json:"item"`
	Message string `json:"message"`
	Error   struct {
		Message string `json:"message"`
	} `json:"error"`
}

func codexEvents(stdout string) []codexEvent {
	var evs []codexEvent
	for _, line := range strings.Split(stdout, "\n") {
		var ev codexEvent
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type != "" {
			evs = append(evs, ev)
		}
	}
	return evs
}

// checkCodexOutcome accepts a completed turn with the agent's message, or the turn failing only because
// the reply hit its token limit ("Incomplete response returned, reason: max_output_tokens"): Codex sends
// no limit, so the model's own num_predict (tinyNumPredict) ends a reply that does not stop by itself.
func checkCodexOutcome(t *testing.T, stdout, stderr string, err error, rec *recorder) {
	t.Helper()
	var text, failed string
	completed := false
	for _, ev := range codexEvents(stdout) {
		switch ev.Type {
		case "item.completed":
			if ev.Item.Type == "agent_message" {
				text += ev.Item.Text
			}
		case "turn.completed":
			completed = true
		case "turn.failed":
			failed = ev.Error.Message
		}
	}
	switch {
	case completed && err == nil && strings.TrimSpace(text) != "":
		t.Logf("codex answered: %q", clip(text, 200))
	case failed != "" && strings.Contains(failed, "reason: max_output_tokens"):
		t.Logf("codex stopped on the reply's token limit (the model did not stop within %d tokens)", tinyNumPredict)
	case completed && err == nil && endedAtOnce(rec):
		// A sampled reply may end on its first token: the turn is complete and empty, which
		// Codex handles; what this test checks is that the exchange worked.
		t.Logf("codex completed its turn; the model ended its last reply at once (0 output tokens)")
	default:
		t.Fatalf("codex: %v (turn completed %v, failed %q, text %q)\nstdout: %s\nstderr: %s\nexchanges:\n%s",
			err, completed, failed, text, clip(stdout, 3000), clip(stderr, 2000), rec.summary())
	}
}

// endedAtOnce reports whether mlxg's last /v1/responses reply completed with no output tokens.
func endedAtOnce(rec *recorder) bool {
	var last *exchange
	for _, x := range rec.to("/v1/responses") {
		if !x.Canned {
			last = x
		}
	}
	if last == nil || last.Status != http.StatusOK {
		return false
	}
	r := string(last.Resp)
	return strings.Contains(r, `"type":"response.completed"`) && strings.Contains(r, `"output_tokens":0,`)
}

// checkResponsesExchanges: every exchange succeeded, and every /v1/responses stream reached its end.
func checkResponsesExchanges(t *testing.T, rec *recorder, model string) {
	t.Helper()
	for _, x := range rec.exchanges() {
		if x.Status != http.StatusOK {
			t.Errorf("%s\n  %s", x, clip(string(x.Resp), 600))
		}
	}
	resps := rec.to("/v1/responses")
	if len(resps) == 0 {
		t.Errorf("no /v1/responses request")
	}
	for _, x := range resps {
		var req struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(x.Body, &req)
		if req.Model != model {
			t.Errorf("%s: model %q, want %q", x, req.Model, model)
		}
		r := string(x.Resp)
		if x.Status == http.StatusOK && !strings.Contains(r, `"type":"response.completed"`) && !strings.Contains(r, `"type":"response.incomplete"`) {
			t.Errorf("%s: stream without response.completed or response.incomplete:\n%s", x, clip(r, 1500))
		}
	}
	if t.Failed() {
		t.Fatalf("exchanges:\n%s", rec.summary())
	}
}

// TestCodex runs `codex exec --oss` (Codex's Ollama provider: /api/tags, /api/pull for a model it does
// not see listed, then the Responses API on /v1/responses).
func TestCodex(t *testing.T) {
	codex := agentBin(t, "codex")
	s := startTiny(t)

	// Tagged as /api/tags lists it, and untagged as people type it.
	for _, model := range []string{tinyModel + ":latest", tinyModel} {
		t.Run(model, func(t *testing.T) {
			rec := newRecorder(t, s)
			stdout, stderr, err := runClient(t, 2*time.Minute, t.TempDir(), codexEnv(t, rec.URL), "", codex,
				"exec", "--oss", "-m", model, "--skip-git-repo-check", "--ephemeral", "--json", "say hi")
			checkResponsesExchanges(t, rec, model)
			checkCodexOutcome(t, stdout, stderr, err, rec)
		})
	}

	// The model's first turn is a canned exec_command call; Codex runs it and sends the output back as a
	// function_call_output, which must reach mlxg and be answered.
	t.Run("function call round trip", func(t *testing.T) {
		rec := newRecorder(t, s)
		const callID, token = "call_mlxg_e2e_01", "mlxg-e2e-echo-7f1c"
		var canned atomic.Bool
		rec.answer = func(x *exchange, w http.ResponseWriter) bool {
			if x.Path != "/v1/responses" || strings.Contains(string(x.Body), `"function_call_output"`) ||
				!strings.Contains(string(x.Body), `"exec_command"`) || !canned.CompareAndSwap(false, true) {
				return false
			}
			args, _ := json.Marshal(map[string]string{"cmd": "echo " + token})
			item := fmt.Sprintf(`{"type":"function_call","id":"fc_mlxg_e2e","call_id":%q,"name":"exec_command","arguments":%q,"status":"completed"}`, callID, args)
			resp := func(status, output string) string {
				return fmt.Sprintf(`{"id":"resp_mlxg_e2e","object":"response","created_at":%d,"status":%q,"model":%q,"output":[%s],"usage":{"input_tokens":1,"input_tokens_details":{"cached_tokens":0},"output_tokens":1,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":2}}`,
					time.Now().Unix(), status, tinyModel+":latest", output)
			}
			sse(w,
				fmt.Sprintf(`{"type":"response.created","sequence_number":0,"response":%s}`, resp("in_progress", "")),
				fmt.Sprintf(`{"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":%s}`, strings.Replace(item, `"completed"`, `"in_progress"`, 1)),
				fmt.Sprintf(`{"type":"response.output_item.done","sequence_number":2,"output_index":0,"item":%s}`, item),
				fmt.Sprintf(`{"type":"response.completed","sequence_number":3,"response":%s}`, resp("completed", item)))
			return true
		}
		work := t.TempDir()
		stdout, stderr, err := runClient(t, 2*time.Minute, work, codexEnv(t, rec.URL), "", codex,
			"exec", "--oss", "-m", tinyModel+":latest", "--skip-git-repo-check", "--ephemeral", "--json",
			"--dangerously-bypass-approvals-and-sandbox", "Run echo and tell me what it printed.")
		if !canned.Load() {
			t.Fatalf("Codex sent no /v1/responses request with exec_command:\n%s\nstdout: %s\nstderr: %s", rec.summary(), clip(stdout, 2000), clip(stderr, 2000))
		}
		checkResponsesExchanges(t, rec, tinyModel+":latest")
		var withOutput *exchange
		for _, x := range rec.to("/v1/responses") {
			if !x.Canned && carriesFunctionOutput(x.Body, callID, token) {
				withOutput = x
				break
			}
		}
		if withOutput == nil {
			t.Fatalf("no request to mlxg carried the function_call_output of %s with %q:\n%s\nstdout: %s", callID, token, rec.summary(), clip(stdout, 3000))
		}
		t.Logf("function_call_output reached mlxg: %s", withOutput)
		checkCodexOutcome(t, stdout, stderr, err, rec)
	})
}

// carriesFunctionOutput reports whether a Responses request's input holds the function_call callID and its
// function_call_output containing token.
func carriesFunctionOutput(body []byte, callID, token string) bool {
	var req struct {
		Input []struct {
			Type   string          `json:"type"`
			CallID string          `json:"call_id"`
			Output json.RawMessage `json:"output"`
		} `json:"input"`
	}
	if json.Unmarshal(body, &req) != nil {
		return false
	}
	called := false
	for _, it := range req.Input {
		switch {
		case it.Type == "function_call" && it.CallID == callID:
			called = true
		case it.Type == "function_call_output" && it.CallID == callID && called && strings.Contains(string(it.Output), token):
			return true
		}
	}
	return false
}
