package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/sched"
)

// serveScripted writes a scripted model (apitest.WriteScripted over the tokenizer in tokDir)
// whose chat template is tmpl, and serves it as name from a new test server: the family
// tests drive a real template and parser with replies they choose.
func serveScripted(t *testing.T, name, tokDir, tmpl string, scripts []apitest.Script) *testServer {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	if err := apitest.WriteScripted(dir, tokDir, scripts); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "tokenizer_config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["chat_template"] = tmpl
	if raw, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, sched.Config{})
	n, err := registry.ParseName(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.srv.cfg.Store.ImportDir(context.Background(), n, dir); err != nil {
		t.Fatal(err)
	}
	return ts
}

// streamedChat gathers a streamed /api/chat body's tool calls, thinking and content.
func streamedChat(t *testing.T, body []byte) (calls []api.ToolCall, thinking, content string) {
	t.Helper()
	var th, co strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var c api.ChatResponse
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		calls = append(calls, c.Message.ToolCalls...)
		th.WriteString(c.Message.Thinking)
		co.WriteString(c.Message.Content)
	}
	return calls, th.String(), co.String()
}
