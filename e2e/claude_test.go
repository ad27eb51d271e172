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

// claudeEnv is Claude Code's environment: the server through ANTHROPIC_BASE_URL, a throwaway key and
// config dir, nothing sent anywhere else, replies capped at agentMaxTokens.
func claudeEnv(home, base string) []string {
	return isolatedEnv(home, "ANTHROPIC_BASE_URL="+base, "ANTHROPIC_API_KEY=mlxg-e2e", "CLAUDE_CONFIG_DIR="+filepath.Join(home, ".claude"),
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_ERROR_REPORTING=1", "DISABLE_BUG_COMMAND=1",
		"DISABLE_COST_WARNINGS=1", fmt.Sprintf("CLAUDE_CODE_MAX_OUTPUT_TOKENS=%d", agentMaxTokens))
}

// claudeResult is the last line of `claude -p --output-format json`.
type claudeResult struct {
	Type     string `json:"type"`
	IsError  bool   `json:"is_error"`
	Result   string `json:"result"`
	APIError string `json:"api_error"`
	NumTurns int    `json:"num_turns"`
}

// checkClaudeOutcome accepts the two endings a working server gives: a reply, or Claude Code giving up
// because the model kept writing past max_tokens (its "max_output_tokens" error, after it asked the model to
// continue): the tiny model seldom stops under Claude Code's system prompt. Any other error fails.
func checkClaudeOutcome(t *testing.T, stdout, stderr string, err error, rec *recorder) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	var res claudeResult
	if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &res); jerr != nil || res.Type != "result" {
		t.Fatalf("claude: %v, no result line (%v)\nstdout: %s\nstderr: %s\nexchanges:\n%s", err, jerr, clip(stdout, 2000), clip(stderr, 2000), rec.summary())
	}
	switch {
	case !res.IsError && err == nil && strings.TrimSpace(res.Result) != "":
		t.Logf("claude answered: %q", clip(res.Result, 200))
	case res.IsError && res.APIError == "max_output_tokens":
		t.Logf("claude stopped on max_tokens after %d turns (the model did not stop within %d tokens)", res.NumTurns, agentMaxTokens)
	default:
		t.Fatalf("claude: %v, result %+v\nstderr: %s\nexchanges:\n%s", err, res, clip(stderr, 2000), rec.summary())
	}
}

// checkMessagesExchanges: every request reached mlxg (or the canned answer) and got a complete reply.
func checkMessagesExchanges(t *testing.T, rec *recorder) {
	t.Helper()
	msgs := rec.to("/v1/messages")
	if len(msgs) == 0 {
		t.Fatalf("no /v1/messages request:\n%s", rec.summary())
	}
	for _, x := range rec.exchanges() {
		if x.Status != http.StatusOK {
			t.Errorf("%s\n  %s", x, clip(string(x.Resp), 600))
		}
	}
	for _, x := range msgs {
		var req struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		_ = json.Unmarshal(x.Body, &req)
		if req.Model != tinyModel {
			t.Errorf("%s: model %q", x, req.Model)
		}
		complete := `"type":"message_stop"`
		if !req.Stream {
			complete = `"type":"message"`
		}
		if x.Status == http.StatusOK && !strings.Contains(string(x.Resp), complete) {
			t.Errorf("%s: reply incomplete, no %s:\n%s", x, complete, clip(string(x.Resp), 1500))
		}
	}
	if t.Failed() {
		t.Fatalf("exchanges:\n%s", rec.summary())
	}
}

// TestClaudeCode runs Claude Code's CLI (`claude -p`) against the Anthropic Messages API.
func TestClaudeCode(t *testing.T) {
	claude := agentBin(t, "claude")
	s := startTiny(t)

	t.Run("plain", func(t *testing.T) {
		rec := newRecorder(t, s)
		home, work := t.TempDir(), t.TempDir()
		stdout, stderr, err := runClient(t, 3*time.Minute, work, claudeEnv(home, rec.URL), "", claude,
			"-p", "say hi", "--model", tinyModel, "--output-format", "json")
		checkMessagesExchanges(t, rec)
		checkClaudeOutcome(t, stdout, stderr, err, rec)
	})

	// The model's first turn is a canned Read of a file in the working directory; Claude Code runs the tool
	// and sends its result, which must reach mlxg and be answered.
	t.Run("tool round trip", func(t *testing.T) {
		rec := newRecorder(t, s)
		home, work := t.TempDir(), t.TempDir()
		const token = "mlxg-e2e-note-5d41402a"
		note := filepath.Join(work, "note.txt")
		if err := os.WriteFile(note, []byte(token+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		const useID = "toolu_mlxg_e2e_01"
		var canned atomic.Bool
		rec.answer = func(x *exchange, w http.ResponseWriter) bool {
			if canned.Load() || !strings.HasPrefix(x.Path, "/v1/messages") || strings.HasPrefix(x.Path, "/v1/messages/") {
				return false
			}
			var req struct {
				Stream bool `json:"stream"`
				Tools  []struct {
					Name string `json:"name"`
				} `json:"tools"`
			}
			if json.Unmarshal(x.Body, &req) != nil || strings.Contains(string(x.Body), `"tool_result"`) {
				return false
			}
			hasRead := false
			for _, tl := range req.Tools {
				hasRead = hasRead || tl.Name == "Read"
			}
			if !hasRead || !canned.CompareAndSwap(false, true) {
				return false
			}
			input, _ := json.Marshal(map[string]string{"file_path": note})
			if !req.Stream {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"id":"msg_mlxg_e2e","type":"message","role":"assistant","model":%q,"content":[{"type":"tool_use","id":%q,"name":"Read","input":%s}],"stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}`,
					tinyModel, useID, input)
				return true
			}
			partial, _ := json.Marshal(string(input))
			sse(w,
				fmt.Sprintf(`{"type":"message_start","message":{"id":"msg_mlxg_e2e","type":"message","role":"assistant","model":%q,"content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}`, tinyModel),
				fmt.Sprintf(`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":%q,"name":"Read","input":{}}}`, useID),
				fmt.Sprintf(`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":%s}}`, partial),
				`{"type":"content_block_stop","index":0}`,
				`{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":1}}`,
				`{"type":"message_stop"}`)
			return true
		}
		stdout, stderr, err := runClient(t, 3*time.Minute, work, claudeEnv(home, rec.URL), "", claude,
			"-p", "Read note.txt and tell me what it says.", "--model", tinyModel, "--allowedTools", "Read", "--output-format", "json")
		if !canned.Load() {
			t.Fatalf("Claude Code sent no /v1/messages request with the Read tool:\n%s", rec.summary())
		}
		checkMessagesExchanges(t, rec)
		var withResult *exchange
		for _, x := range rec.to("/v1/messages") {
			if !x.Canned && carriesToolResult(x.Body, useID, token) {
				withResult = x
				break
			}
		}
		if withResult == nil {
			t.Fatalf("no request to mlxg carried the tool_result of %s with %q:\n%s\nstdout: %s", useID, token, rec.summary(), clip(stdout, 2000))
		}
		t.Logf("tool_result reached mlxg: %s", withResult)
		checkClaudeOutcome(t, stdout, stderr, err, rec)
	})
}

// carriesToolResult reports whether an Anthropic request holds the assistant's tool_use id and, in a later
// user turn, its tool_result containing token.
func carriesToolResult(body []byte, id, token string) bool {
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if json.Unmarshal(body, &req) != nil {
		return false
	}
	used := false
	for _, m := range req.Messages {
		var blocks []struct {
			Type      string          `json:"type"`
			ID        string          `json:"id"`
			ToolUseID string          `json:"tool_use_id"`
			Content   json.RawMessage `json:"content"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			switch {
			case m.Role == "assistant" && b.Type == "tool_use" && b.ID == id:
				used = true
			case m.Role == "user" && b.Type == "tool_result" && b.ToolUseID == id && used && strings.Contains(string(b.Content), token):
				return true
			}
		}
	}
	return false
}
