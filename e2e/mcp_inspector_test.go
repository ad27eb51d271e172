package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
)

// TestMCPInspector: the official MCP inspector's CLI (@modelcontextprotocol/inspector, installed by scripts/test
// into .testdata/mcp-inspector) lists mlxg's tools and calls generate, list_models and memory_status, over stdio
// (`mlxg mcp`, which the inspector starts) and over streamable HTTP (/mcp); a malformed call is a JSON-RPC error.
func TestMCPInspector(t *testing.T) {
	agentsPass(t) // the HTTP surface is the same on every pass
	cli := filepath.Join(testdata.Dir(), "mcp-inspector", "node_modules", "@modelcontextprotocol", "inspector", "clients", "launcher", "build", "index.js")
	if _, err := os.Stat(cli); err != nil {
		if os.Getenv("MLXG_REQUIRE_TESTDATA") == "1" {
			t.Fatalf("the MCP inspector is missing at %s (scripts/test installs it)", cli)
		}
		t.Skipf("the MCP inspector is missing at %s; run scripts/test", cli)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: the MCP inspector needs Node.js")
	}
	s := start(t)
	host := strings.TrimPrefix(s.base, "http://")
	inspect := func(t *testing.T, target []string, args ...string) (output string, err error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		argv := append([]string{cli, "--cli"}, args...)
		if strings.HasPrefix(target[0], "http") {
			// The URL first: --tool-arg takes every word after it.
			argv = append(append([]string{cli, "--cli"}, target...), args...)
		} else {
			argv = append(argv, target...)
		}
		cmd := exec.CommandContext(ctx, node, argv...)
		// Its own catalog, so that nothing is read from or written to the home directory.
		cmd.Env = append(os.Environ(), "MLXG_HOST="+host, "OLLAMA_HOST=", "MCP_CATALOG_PATH="+filepath.Join(t.TempDir(), "mcp.json"))
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err = cmd.Run()
		t.Logf("inspector %s: %v\n%.600s\n%s", strings.Join(args, " "), err, out.String(), errb.String())
		return out.String() + errb.String(), err // stdout first: its JSON decodes before the errors
	}
	for name, target := range map[string][]string{
		// The inspector starts `mlxg mcp` with only the variables -e names (and PATH, HOME...).
		"stdio": {"-e", "MLXG_HOST=" + host, "--", s.bin, "mcp"},
		"http":  {s.base + "/mcp"},
	} {
		t.Run(name, func(t *testing.T) {
			out, err := inspect(t, target, "--method", "tools/list")
			var list struct {
				Tools []struct {
					Name        string         `json:"name"`
					InputSchema map[string]any `json:"inputSchema"`
				} `json:"tools"`
			}
			if err != nil || json.NewDecoder(strings.NewReader(out)).Decode(&list) != nil {
				t.Fatalf("tools/list: %v %s", err, out)
			}
			names := map[string]bool{}
			for _, tl := range list.Tools {
				names[tl.Name] = tl.InputSchema["type"] == "object"
			}
			for _, want := range []string{"generate", "chat", "list_models", "running", "memory_status", "pull", "unload", "fit"} {
				if !names[want] {
					t.Errorf("tools/list lacks %s (or its input schema): %v", want, names)
				}
			}
			for _, call := range []struct {
				tool string
				args []string
				want string
			}{
				{"list_models", nil, `"name": "` + model},
				{"generate", []string{"model=" + model, "prompt=Weather?", "think=false"}, `"content": "The weather`},
				{"memory_status", nil, `"k_bits"`},
			} {
				args := []string{"--method", "tools/call", "--tool-name", call.tool}
				if call.args != nil {
					args = append(append(args, "--tool-arg"), call.args...)
				}
				out, err := inspect(t, target, args...)
				var r struct {
					Content []struct {
						Type string `json:"type"`
						Text string `json:"text"`
					} `json:"content"`
					IsError bool `json:"isError"`
				}
				if err != nil || json.NewDecoder(strings.NewReader(out)).Decode(&r) != nil || r.IsError || len(r.Content) == 0 {
					t.Fatalf("%s: %v %s", call.tool, err, out)
				}
				if r.Content[0].Type != "text" || !strings.Contains(r.Content[0].Text, call.want) {
					t.Fatalf("%s: %q lacks %s", call.tool, r.Content[0].Text, call.want)
				}
			}
			// Arguments that break the tool's schema: the SDK answers with a tool error that names the argument,
			// as the spec has it for input validation, and the inspector exits non-zero.
			out, err = inspect(t, target, "--method", "tools/call", "--tool-name", "generate", "--tool-arg", "model=123", "prompt=x")
			if err == nil || !strings.Contains(out, `"isError": true`) || !strings.Contains(out, "/properties/model") {
				t.Fatalf("generate with a number for its model: %v %s", err, out)
			}
			// A request the server cannot answer: a JSON-RPC error from mlxg's server, which the inspector reports.
			out, err = inspect(t, target, "--method", "prompts/get", "--prompt-name", "nope")
			if err == nil || !strings.Contains(out, `unknown prompt \"nope\"`) {
				t.Fatalf("prompts/get: %v %s", err, out)
			}
		})
	}
}

// TestClaudeMCP registers mlxg with Claude Code as its docs say (`claude mcp add mlxg -- mlxg mcp`) and asks
// Claude Code for its MCP servers' health: it starts `mlxg mcp` and must find it connected.
func TestClaudeMCP(t *testing.T) {
	claude := agentBin(t, "claude")
	s := startTiny(t)
	home, work := t.TempDir(), t.TempDir()
	env := claudeEnv(home, s.base)
	env = append(env, "MLXG_HOST="+strings.TrimPrefix(s.base, "http://"))
	if out, errOut, err := runClient(t, time.Minute, work, env, "", claude, "mcp", "add", "mlxg", "--", s.bin, "mcp"); err != nil {
		t.Fatalf("claude mcp add: %v\n%s\n%s", err, out, errOut)
	}
	out, errOut, err := runClient(t, 2*time.Minute, work, env, "", claude, "mcp", "list")
	if err != nil || !regexp.MustCompile(`(?m)^mlxg: .*Connected`).MatchString(out) {
		t.Fatalf("claude mcp list: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
}
