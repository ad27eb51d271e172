package e2e

// The agents at full length: Claude Code's and Codex's real first requests (their system prompts and
// tool schemas, ~27K and ~10K tokens) reach a model whose trained maximum is 40960 (qwen3-tiny's config
// with a longer maximum, tinyMaxContext) on a server with default settings (no MLXG_CONTEXT_LENGTH, no
// num_ctx): the context is sized from memory, and the server must prefill every token of every request
// and restore the shared prefix of the next one from its prefix cache.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// served is what the server says of one of its requests: the PERF line's counts (/api/status).
type served struct {
	Prompt, Cached, Prefilled int
	KVBytes                   int64
	TTFT                      time.Duration // load and prefill: the time to the first token
	Perf                      string
}

// servedRequests are the server's latest finished requests, oldest first (at most 50).
func servedRequests(t *testing.T, s *server) []served {
	t.Helper()
	var st struct {
		Requests []struct {
			PrefillS float64 `json:"prefill_s"`
			LoadS    float64 `json:"load_s"`
			Perf     string  `json:"perf"`
		} `json:"requests"`
	}
	getJSON(t, s.base+"/api/status", &st)
	field := func(perf, key string) int64 {
		m := regexp.MustCompile(`\b` + key + `=(\d+)`).FindStringSubmatch(perf)
		if m == nil {
			return -1
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		return n
	}
	var out []served
	for i := len(st.Requests) - 1; i >= 0; i-- {
		r := st.Requests[i]
		out = append(out, served{Prompt: int(field(r.Perf, "prompt_tok")), Cached: int(field(r.Perf, "cached_tok")),
			Prefilled: int(field(r.Perf, "pref_tok")), KVBytes: field(r.Perf, "kv_bytes"),
			TTFT: time.Duration((r.LoadS + r.PrefillS) * float64(time.Second)), Perf: r.Perf})
	}
	return out
}

// textTokens counts the tokens of the text a request carries (system prompt, messages, tool names,
// descriptions and schemas), each piece alone: a lower bound of its rendered prompt, which adds the chat
// template's markup. A prompt the server cut holds fewer.
func textTokens(tok *tokenizer.Tokenizer, body []byte) int {
	var v any
	if json.Unmarshal(body, &v) != nil {
		return 0
	}
	n := 0
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch x := v.(type) {
		case string:
			switch key {
			case "type", "role", "model", "id", "tool_use_id", "call_id", "status", "cache_control", "effort", "summary":
				return // the wire's own words, which the template renders differently or not at all
			}
			n += len(tok.Encode(x, false))
		case []any:
			for _, e := range x {
				walk(key, e)
			}
		case map[string]any:
			for k, e := range x {
				if k == "input_schema" || k == "parameters" {
					b, _ := json.Marshal(e) // rendered as JSON by the template
					n += len(tok.Encode(string(b), false)) * 9 / 10
					continue
				}
				if k == "metadata" || k == "tool_choice" || k == "thinking" || k == "reasoning" || k == "text" && isMap(e) || k == "include" {
					continue
				}
				walk(k, e)
			}
		}
	}
	walk("", v)
	return n
}

func isMap(v any) bool { _, ok := v.(map[string]any); return ok }

// checkFullLength checks every request of an agent that reached mlxg at path: answered 200, nothing cut
// (no X-Mlxg-Prompt-Truncated, X-Mlxg-Prompt-Tokens at least the request's text), every prompt token
// either restored or prefilled, and from the second request on, the shared prefix restored. It logs the
// time to first token and KV bytes of each.
func checkFullLength(t *testing.T, s *server, rec *recorder, path string, before int) {
	t.Helper()
	tok, err := tokenizer.Load(testdata.SharedModel(t, tinyModel))
	if err != nil {
		t.Fatal(err)
	}
	var mine []*exchange
	for _, x := range rec.to(path) {
		if !x.Canned {
			mine = append(mine, x)
		}
	}
	if len(mine) < 2 {
		t.Fatalf("%d requests to %s reached mlxg, want at least 2:\n%s", len(mine), path, rec.summary())
	}
	all := servedRequests(t, s)
	if len(all)-before < len(mine) {
		t.Fatalf("the server finished %d requests, the agent sent %d", len(all)-before, len(mine))
	}
	srv := all[len(all)-len(mine):]
	for i, x := range mine {
		text := textTokens(tok, x.Body)
		promptHdr, _ := strconv.Atoi(x.Header.Get("X-Mlxg-Prompt-Tokens"))
		numCtx, _ := strconv.Atoi(x.Header.Get("X-Mlxg-Num-Ctx"))
		sv := srv[i]
		t.Logf("request %d: %d bytes, %d tokens of text; prompt %d tokens (context %d): %d restored, %d prefilled; TTFT %.2fs; KV %.1f MiB",
			i+1, len(x.Body), text, promptHdr, numCtx, sv.Cached, sv.Prefilled, sv.TTFT.Seconds(), float64(sv.KVBytes)/(1<<20))
		switch {
		case x.Status != http.StatusOK:
			t.Errorf("request %d: %d %s", i+1, x.Status, clip(string(x.Resp), 600))
		case x.Header.Get("X-Mlxg-Prompt-Truncated") != "" || x.Header.Get("X-Mlxg-Messages-Dropped") != "":
			t.Errorf("request %d was cut: %v", i+1, x.Header)
		case promptHdr < text || promptHdr <= 4096 || numCtx < tinyMaxContext/2:
			t.Errorf("request %d: the server took %d prompt tokens (context %d) of a request whose text alone is %d", i+1, promptHdr, numCtx, text)
		case sv.Prompt != promptHdr || sv.Cached+sv.Prefilled != sv.Prompt:
			t.Errorf("request %d: PERF %q against %d prompt tokens", i+1, sv.Perf, promptHdr)
		case i > 0 && sv.Cached < srv[0].Prompt/2:
			t.Errorf("request %d restored %d tokens of the first request's %d: %s", i+1, sv.Cached, srv[0].Prompt, sv.Perf)
		}
	}
}

// TestAgentsFullLength runs Claude Code and Codex with default settings against the long-context model
// and checks that the server took their whole prompts (checkFullLength).
func TestAgentsFullLength(t *testing.T) {
	s := startTiny(t)

	t.Run("claude", func(t *testing.T) {
		claude := agentBin(t, "claude")
		rec := newRecorder(t, s)
		home, work := t.TempDir(), t.TempDir()
		before := len(servedRequests(t, s))
		// Claude Code goes on after a reply cut by max_tokens, which sends its prompt again; when the
		// model stops at once it does not, and a second run in the same place does.
		for run := 0; run < 2 && len(rec.to("/v1/messages")) < 2; run++ {
			stdout, stderr, err := runClient(t, 5*time.Minute, work, claudeEnv(home, rec.URL), "", claude,
				"-p", "say hi", "--model", tinyModel, "--output-format", "json")
			checkClaudeOutcome(t, stdout, stderr, err, rec)
		}
		checkFullLength(t, s, rec, "/v1/messages", before)
	})

	t.Run("codex", func(t *testing.T) {
		codex := agentBin(t, "codex")
		rec := newRecorder(t, s)
		work := t.TempDir()
		before := len(servedRequests(t, s))
		for run := 0; run < 2; run++ {
			stdout, stderr, err := runClient(t, 5*time.Minute, work, codexEnv(t, rec.URL), "", codex,
				"exec", "--oss", "-m", tinyModel+":latest", "--skip-git-repo-check", "--ephemeral", "--json", fmt.Sprintf("say hi %d", run))
			checkCodexOutcome(t, stdout, stderr, err, rec)
		}
		checkFullLength(t, s, rec, "/v1/responses", before)
	})

	var ps struct {
		Models []struct {
			Name          string `json:"name"`
			ContextLength int    `json:"context_length"`
			ContextReason string `json:"context_reason"`
		} `json:"models"`
	}
	getJSON(t, s.base+"/api/ps", &ps)
	for _, m := range ps.Models {
		if strings.HasPrefix(m.Name, tinyModel) {
			t.Logf("%s: context %d (%s)", m.Name, m.ContextLength, m.ContextReason)
		}
	}
}
