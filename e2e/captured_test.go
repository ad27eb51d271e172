package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// capturedRequests are request bodies the real clients sent (captured by the recorder with
// MLXG_E2E_CAPTURE, kept in testdata/clients; README.md there says what each shows), each with the route it
// went to and what a correct reply holds.
var capturedRequests = []struct {
	file, method, path string
	check              func(body []byte) string // "" when the reply is right
}{
	{"codex_pull.json", "POST", "/api/pull", contains(`"status":"success"`)},
	{"ollama-cli_show.json", "POST", "/api/show", chatCapabilities},
	{"ollama-cli_generate.json", "POST", "/api/generate", contains(`"done":true`)},
	{"ai-sdk-ollama_chat_tool_history.json", "POST", "/api/chat", contains(`"done":true`)},
	{"ai-sdk-ollama_chat_object.json", "POST", "/api/chat", contains(`"done":true`)},
	{"ai-sdk-ollama_embed.json", "POST", "/api/embed", embedMetrics},
	{"ai-sdk-openai-compatible_chat_object.json", "POST", "/v1/chat/completions", contains(`"finish_reason"`)},
	{"langchain-ollama_chat_tool_history.json", "POST", "/api/chat", contains(`"done":true`)},
	{"langchain-openai_embeddings.json", "POST", "/v1/embeddings", contains(`"object":"list"`)},
}

func contains(want string) func([]byte) string {
	return func(b []byte) string {
		if !bytes.Contains(b, []byte(want)) {
			return "no " + want
		}
		return ""
	}
}

// chatCapabilities: /api/show lists what the CLI reads a chat model by; "embedding" would make `ollama run`
// print a vector.
func chatCapabilities(b []byte) string {
	var show struct {
		Capabilities []string `json:"capabilities"`
	}
	if err := json.Unmarshal(b, &show); err != nil {
		return err.Error()
	}
	if !slices.Contains(show.Capabilities, "completion") || slices.Contains(show.Capabilities, "embedding") {
		return "capabilities " + strings.Join(show.Capabilities, ",")
	}
	return ""
}

// embedMetrics: ollama-ai-provider-v2 rejects an /api/embed reply without each of Ollama's metrics, a
// load_duration of 0 included.
func embedMetrics(b []byte) string {
	var e map[string]json.RawMessage
	if err := json.Unmarshal(b, &e); err != nil {
		return err.Error()
	}
	for _, k := range []string{"model", "embeddings", "total_duration", "load_duration", "prompt_eval_count"} {
		if _, ok := e[k]; !ok {
			return "no " + k
		}
	}
	return ""
}

// TestCapturedRequests sends what the real clients sent (testdata/clients) straight to the server: the
// agent tests' failures, reproducible without the clients.
func TestCapturedRequests(t *testing.T) {
	s := startTiny(t)
	client := &http.Client{Timeout: 3 * time.Minute}
	for _, c := range capturedRequests {
		t.Run(strings.TrimSuffix(c.file, ".json"), func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", "clients", c.file))
			if err != nil {
				t.Fatal(err)
			}
			req, err := http.NewRequest(c.method, s.base+c.path, bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			reply, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%d: %s", resp.StatusCode, clip(string(reply), 1000))
			}
			if msg := c.check(reply); msg != "" {
				t.Fatalf("%s in the reply:\n%s", msg, clip(string(reply), 1500))
			}
		})
	}
}
