package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
)

// mlxg run DIR --think=low|high passes the level to the chat template as reasoning_effort, as the server
// does: a template that skips thinking at low effort makes the scripted model answer plainly.
func TestRunDirectoryThinkLevel(t *testing.T) {
	t.Setenv("MLXG_BACKEND", "cpu")
	t.Setenv("MLXG_HOST", "127.0.0.1:1") // no server
	dir := filepath.Join(t.TempDir(), "effort")
	if err := apitest.WriteScripted(dir, testdata.Tokenizer(t, "qwen3"), apitest.Qwen3); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "tokenizer_config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	tmpl, _ := cfg["chat_template"].(string)
	if !strings.Contains(tmpl, "enable_thinking is false") {
		t.Fatal("the Qwen3 template changed")
	}
	cfg["chat_template"] = strings.Replace(tmpl, "enable_thinking is false", `enable_thinking is false or (reasoning_effort is defined and reasoning_effort == "low")`, 1)
	b, _ = json.Marshal(cfg)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for level, plain := range map[string]bool{"low": true, "high": false} {
		stdout, stderr, err := runCLI(t, "run", dir, "--think="+level, "Weather?")
		if err != nil || strings.Contains(stdout, apitest.PlainReply) != plain {
			t.Errorf("--think %s: %v %q\n%s", level, err, stdout, stderr)
		}
	}
	if _, _, err := runCLI(t, "run", dir, "--think=extreme", "Weather?"); err == nil || !strings.Contains(err.Error(), "high, medium or low") {
		t.Errorf("--think extreme: %v", err)
	}
}
