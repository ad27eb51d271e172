package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
)

// runNodeSDK runs one of scripts/clienttest's SDK scripts against qwen3-tiny through a recorder; every check
// in it runs, and its output lists each as ok or FAIL.
func runNodeSDK(t *testing.T, script string, pkgs ...string) {
	t.Helper()
	for _, pkg := range pkgs {
		requireAsset(t, "npm package "+pkg, filepath.Join(agentsDir(), filepath.FromSlash(pkg), "package.json"))
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatal("node is not installed: the client tests need Node.js")
	}
	s := startTiny(t)
	rec := newRecorder(t, s)
	stdout, stderr, err := runClient(t, 4*time.Minute, t.TempDir(), isolatedEnv(t.TempDir(), "MLXG_URL="+rec.URL, "MLXG_NODE_MODULES="+agentsDir(),
		"MLXG_MODEL="+tinyModel, fmt.Sprintf("MLXG_MAX_TOKENS=%d", agentMaxTokens)), "",
		node, filepath.Join(testdata.Root(), "scripts", "clienttest", script))
	t.Logf("%s%s", stdout, stderr)
	if err != nil {
		t.Fatalf("%s: %v\nexchanges:\n%s", script, err, rec.summary())
	}
	for _, x := range rec.exchanges() {
		if x.Status >= 400 {
			t.Errorf("%s\n  %s", x, clip(string(x.Resp), 600))
		}
	}
}

// TestAISDK runs the Vercel AI SDK's Ollama and OpenAI-compatible providers (scripts/clienttest/aisdk.mjs):
// generateText, streamText, tools, generateObject, embed and embedMany on each.
func TestAISDK(t *testing.T) {
	runNodeSDK(t, "aisdk.mjs", "ai", "ollama-ai-provider-v2", "@ai-sdk/openai-compatible", "zod")
}

// TestLangChain runs LangChain JS's ChatOllama, OllamaEmbeddings, ChatOpenAI and OpenAIEmbeddings
// (scripts/clienttest/langchain.mjs): invoke, stream, tools, structured output and embeddings on each.
func TestLangChain(t *testing.T) {
	runNodeSDK(t, "langchain.mjs", "@langchain/ollama", "@langchain/openai", "@langchain/core", "zod")
}
