package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestBadInput sends what clients get wrong, over plain HTTP.
func TestBadInput(t *testing.T) {
	s := start(t)
	big := `{"model":"scripted","prompt":"` + strings.Repeat("x", 33<<20) + `"}`
	for _, c := range []struct {
		name, path, body string
		status           int
		msg              string
	}{
		{"malformed JSON", "/api/chat", `{"model": "scripted", "messages": [`, 400, "invalid JSON"},
		{"unknown model", "/api/generate", `{"model":"nope","prompt":"hi"}`, 404, "model 'nope' not found"},
		{"wrong option type", "/api/generate", `{"model":"scripted","prompt":"hi","options":{"top_k":"40"}}`, 400, `option "top_k" must be of type integer`},
		{"wrong field type", "/api/chat", `{"model":"scripted","messages":"hi"}`, 400, `"messages"`},
		{"oversized body", "/api/generate", big, 413, "request body too large"},
	} {
		resp, err := http.Post(s.base+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var e struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != c.status || !strings.Contains(e.Error, c.msg) {
			t.Errorf("%s: %d %q, want %d with %q", c.name, resp.StatusCode, e.Error, c.status, c.msg)
		}
	}
}

// TestDisconnectMidStream: a client that leaves mid-stream stops generation; the server's goroutine count
// (its /metrics) returns to what it was, and the PERF line says the request was cancelled.
func TestDisconnectMidStream(t *testing.T) {
	s := start(t)
	// Load the model first, so that its loading does not count.
	resp, err := http.Post(s.base+"/api/generate", "application/json", strings.NewReader(`{"model":"scripted"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	time.Sleep(200 * time.Millisecond)
	before := s.goroutines(t)

	for round := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		// An unscripted raw prompt: greedy decoding never reaches EOS; only the disconnect ends it.
		req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/api/generate",
			strings.NewReader(`{"model":"scripted","raw":true,"prompt":"zzzz","options":{"temperature":0}}`))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		rd := bufio.NewReader(resp.Body)
		for range 10 {
			line, err := rd.ReadString('\n')
			if err != nil || strings.Contains(line, `"error"`) {
				t.Fatalf("round %d: %q %v", round, line, err)
			}
		}
		cancel()
		resp.Body.Close()
	}
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(15 * time.Second)
	for {
		n := s.goroutines(t)
		if n <= before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server has %d goroutines, %d before the disconnects", n, before)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		log, _ := os.ReadFile(s.logPath)
		if strings.Count(string(log), "done=cancelled") >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no PERF line with done=cancelled for each disconnect:\n%s", s.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The model is free again: a normal request completes.
	resp, err = http.Post(s.base+"/api/generate", "application/json",
		strings.NewReader(`{"model":"scripted","prompt":"Weather?","think":false,"stream":false}`))
	if err != nil {
		t.Fatal(err)
	}
	var g struct{ Response string }
	_ = json.NewDecoder(resp.Body).Decode(&g)
	resp.Body.Close()
	if g.Response != "The weather in Paris is sunny." {
		t.Fatalf("after the disconnects: %q", g.Response)
	}
}

// TestUnlimitedGenerationEnds: a request without a token limit (num_predict -1, Ollama's default, and what
// a client that sends none gets) on a model that never emits its end token still ends. Ollama caps it at
// 10 x num_ctx tokens (llm/server.go); clients such as Codex and ollama-ai-provider-v2's /api/chat send no
// limit Ollama reads, and would otherwise wait forever.
func TestUnlimitedGenerationEnds(t *testing.T) {
	s := start(t)
	const numCtx = 64
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// As in TestDisconnectMidStream: greedy decoding of this raw prompt never reaches EOS.
	req, _ := http.NewRequestWithContext(ctx, "POST", s.base+"/api/generate", strings.NewReader(
		fmt.Sprintf(`{"model":"scripted","raw":true,"prompt":"zzzz","stream":false,"options":{"temperature":0,"num_predict":-1,"num_ctx":%d}}`, numCtx)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("no end within 2 minutes: %v", err)
	}
	defer resp.Body.Close()
	var g struct {
		Done       bool   `json:"done"`
		DoneReason string `json:"done_reason"`
		EvalCount  int    `json:"eval_count"`
		Error      string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil || resp.StatusCode != http.StatusOK || !g.Done {
		t.Fatalf("%d %+v %v", resp.StatusCode, g, err)
	}
	if g.EvalCount > 10*numCtx {
		t.Errorf("%d tokens generated, more than 10 x num_ctx = %d", g.EvalCount, 10*numCtx)
	}
	t.Logf("ended after %d tokens (%s)", g.EvalCount, g.DoneReason)
}
