package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCP: the official Go SDK's client lists mlxg's tools and calls generate, list_models and memory_status,
// over stdio (`mlxg mcp` as a host starts it, talking to the running server) and over streamable HTTP (/mcp).
func TestMCP(t *testing.T) {
	s := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.Command(s.bin, "mcp")
	cmd.Env = append(os.Environ(), "MLXG_HOST="+strings.TrimPrefix(s.base, "http://"), "OLLAMA_HOST=")
	for name, tr := range map[string]mcp.Transport{
		"stdio": &mcp.CommandTransport{Command: cmd},
		"http":  &mcp.StreamableClientTransport{Endpoint: s.base + "/mcp"},
	} {
		t.Run(name, func(t *testing.T) {
			c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
			cs, err := c.Connect(ctx, tr, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			tl, err := cs.ListTools(ctx, nil)
			if err != nil || len(tl.Tools) < 7 {
				t.Fatalf("tools: %v %+v", err, tl)
			}
			for _, call := range []struct {
				tool string
				args map[string]any
				want string
			}{
				{"list_models", map[string]any{}, model},
				{"generate", map[string]any{"model": model, "prompt": "Weather?", "think": false}, `"content"`},
				{"memory_status", map[string]any{}, `"k_bits"`},
			} {
				r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: call.tool, Arguments: call.args})
				if err != nil || r.IsError {
					t.Fatalf("%s: %v %+v", call.tool, err, r)
				}
				var text string
				for _, c := range r.Content {
					if tc, ok := c.(*mcp.TextContent); ok {
						text += tc.Text
					}
				}
				if !strings.Contains(text, call.want) {
					t.Fatalf("%s: %s lacks %s", call.tool, text, call.want)
				}
			}
		})
	}
}
