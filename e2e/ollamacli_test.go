package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
)

// ollamaCLIVersion is the Ollama release whose CLI scripts/ollamacli/build.sh builds.
const ollamaCLIVersion = "0.17.4"

// ollamaCLI returns the real ollama binary: $MLXG_OLLAMA_CLI, else where scripts/ollamacli/build.sh puts it.
func ollamaCLI(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("MLXG_OLLAMA_CLI")
	if bin == "" {
		bin = filepath.Join(testdata.Dir(), "ollama-cli", "v"+ollamaCLIVersion, "ollama")
	}
	requireAsset(t, "the ollama CLI (scripts/ollamacli/build.sh)", bin)
	return bin
}

// ansi matches the terminal control sequences the CLI writes around its spinner.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// TestOllamaCLI drives the real ollama CLI (OLLAMA_HOST at the server) through the commands people type:
// list, pull, show, run, ps, cp, rm and stop.
func TestOllamaCLI(t *testing.T) {
	bin := ollamaCLI(t)
	s := startTiny(t)
	rec := newRecorder(t, s)
	env := isolatedEnv(t.TempDir(), "OLLAMA_HOST="+strings.TrimPrefix(rec.URL, "http://"), "OLLAMA_NOHISTORY=1")
	// ollama runs the CLI and returns its stdout; progress goes to stderr.
	ollama2 := func(t *testing.T, args ...string) (string, string) {
		t.Helper()
		stdout, stderr, err := runClient(t, 2*time.Minute, t.TempDir(), env, "", bin, args...)
		if err != nil {
			t.Fatalf("ollama %s: %v\nstdout: %s\nstderr: %s\nexchanges:\n%s", strings.Join(args, " "), err, clip(stdout, 2000), clip(stderr, 2000), rec.summary())
		}
		return ansi.ReplaceAllString(stdout, ""), ansi.ReplaceAllString(stderr, "")
	}
	ollama := func(t *testing.T, args ...string) string {
		t.Helper()
		out, _ := ollama2(t, args...)
		return out
	}
	listed := func(t *testing.T, name string) bool {
		t.Helper()
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s`).MatchString(ollama(t, "list"))
	}

	t.Run("list", func(t *testing.T) {
		if !listed(t, tinyModel+":latest") {
			t.Fatalf("%s:latest not listed", tinyModel)
		}
	})

	t.Run("pull rm", func(t *testing.T) {
		if _, progress := ollama2(t, "pull", pullRepo); !strings.Contains(progress, "success") {
			t.Fatalf("pull: %q", clip(progress, 2000))
		}
		// A Hugging Face repo is listed under its repo name, tagged or not.
		if !listed(t, pullRepo) && !listed(t, pullRepo+":latest") {
			t.Fatalf("%s not listed after pull:\n%s", pullRepo, ollama(t, "list"))
		}
		ollama(t, "rm", pullRepo)
		if listed(t, pullRepo) || listed(t, pullRepo+":latest") {
			t.Fatalf("%s still listed after rm", pullRepo)
		}
	})

	t.Run("show", func(t *testing.T) {
		out := ollama(t, "show", tinyModel)
		for _, want := range []string{"architecture", "qwen3", "43.62M", "context length", "4096", "Capabilities", "completion"} {
			if !strings.Contains(out, want) {
				t.Errorf("show lacks %q:\n%s", want, out)
			}
		}
		// A chat model is no embedding model: with "embedding" among its capabilities `ollama run` prints
		// a vector instead of generating.
		if regexp.MustCompile(`(?m)^\s+embedding\s*$`).MatchString(out) {
			t.Errorf("show lists the embedding capability for a chat model:\n%s", out)
		}
	})

	t.Run("run", func(t *testing.T) {
		out := strings.TrimSpace(ollama(t, "run", tinyModel, "In the beginning"))
		if out == "" || strings.HasPrefix(out, "[") {
			t.Fatalf("run printed %q, want generated text\nexchanges:\n%s", clip(out, 500), rec.summary())
		}
		t.Logf("ollama run: %q", clip(out, 300))
	})

	t.Run("ps stop", func(t *testing.T) {
		// Loaded by run; loaded here too, so that ps has it to show whatever run did.
		resp, err := http.Post(s.base+"/api/generate", "application/json", strings.NewReader(`{"model":"`+tinyModel+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if out := ollama(t, "ps"); !strings.Contains(out, tinyModel+":latest") {
			t.Fatalf("ps does not list %s:latest:\n%s", tinyModel, out)
		}
		ollama(t, "stop", tinyModel)
		deadline := time.Now().Add(10 * time.Second)
		for strings.Contains(ollama(t, "ps"), tinyModel) {
			if time.Now().After(deadline) {
				t.Fatalf("%s still running after stop", tinyModel)
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("cp rm", func(t *testing.T) {
		ollama(t, "cp", tinyModel, "tiny-copy")
		if !listed(t, "tiny-copy:latest") {
			t.Fatal("tiny-copy not listed after cp")
		}
		ollama(t, "rm", "tiny-copy")
		if listed(t, "tiny-copy:latest") {
			t.Fatal("tiny-copy still listed after rm")
		}
		if !listed(t, tinyModel+":latest") {
			t.Fatalf("%s gone after removing its copy", tinyModel)
		}
	})

	for _, x := range rec.exchanges() {
		if x.Status >= 400 {
			t.Logf("error answer: %s\n  %s", x, clip(string(x.Resp), 300))
		}
	}
}
