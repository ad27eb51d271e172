package api

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

func TestHostRules(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "http://127.0.0.1:11434",
		"1.2.3.4":                  "http://1.2.3.4:11434",
		":1234":                    "http://:1234",
		"1.2.3.4:1234":             "http://1.2.3.4:1234",
		"example.com":              "http://example.com:11434",
		"example.com:1234":         "http://example.com:1234",
		":66000":                   "http://:11434",
		":-1":                      "http://:11434",
		"[::1]":                    "http://[::1]:11434",
		"::1":                      "http://[::1]:11434",
		"[::1]:1337":               "http://[::1]:1337",
		" 1.2.3.4 ":                "http://1.2.3.4:11434",
		`"1.2.3.4"`:                "http://1.2.3.4:11434",
		` " 1.2.3.4 " `:            "http://1.2.3.4:11434",
		"'1.2.3.4'":                "http://1.2.3.4:11434",
		"http://1.2.3.4":           "http://1.2.3.4:80",
		"https://1.2.3.4":          "https://1.2.3.4:443",
		"https://1.2.3.4:4321":     "https://1.2.3.4:4321",
		"https://example.com/mlxg": "https://example.com:443/mlxg",
	} {
		t.Setenv("MLXG_HOST", in)
		t.Setenv("OLLAMA_HOST", "9.9.9.9")
		if in == "" {
			t.Setenv("OLLAMA_HOST", "")
		}
		if got := Host().String(); got != want {
			t.Errorf("MLXG_HOST=%q: %s, want %s", in, got, want)
		}
	}
	t.Setenv("MLXG_HOST", "")
	t.Setenv("OLLAMA_HOST", "0.0.0.0:8080")
	if got := Host().String(); got != "http://0.0.0.0:8080" {
		t.Errorf("OLLAMA_HOST fallback: %s", got)
	}
}

func TestClientAgainstServer(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/pull", func(w http.ResponseWriter, r *http.Request) {
		var req PullRequest
		json.NewDecoder(r.Body).Decode(&req)
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		enc.Encode(ProgressResponse{Status: "pulling manifest"})
		enc.Encode(ProgressResponse{Status: "pulling model.safetensors", Digest: "sha256:ab", Total: 10, Completed: 5})
		if req.Model == "bad/model" {
			enc.Encode(map[string]string{"error": "checksum mismatch"})
			return
		}
		enc.Encode(ProgressResponse{Status: "success"})
	})
	mux.HandleFunc("GET /api/version", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"version":"1.2.3"}`))
	})
	mux.HandleFunc("POST /api/show", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"error":"model 'x' not found"}`))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	c := NewClient(u, nil)
	ctx := context.Background()

	var got []ProgressResponse
	err := c.Pull(ctx, &PullRequest{Model: "org/name"}, func(p ProgressResponse) error { got = append(got, p); return nil })
	if err != nil || len(got) != 3 || got[1].Completed != 5 || got[1].Digest != "sha256:ab" || got[2].Status != "success" {
		t.Fatalf("pull: %v, %+v", err, got)
	}
	err = c.Pull(ctx, &PullRequest{Model: "bad/model"}, func(ProgressResponse) error { return nil })
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Errorf("pull error line: %v", err)
	}
	if v, err := c.Version(ctx); err != nil || v != "1.2.3" {
		t.Errorf("version: %q, %v", v, err)
	}
	_, err = c.Show(ctx, &ShowRequest{Model: "x"})
	var se StatusError
	if !errors.As(err, &se) || se.StatusCode != 404 || se.ErrorMessage != "model 'x' not found" {
		t.Errorf("show 404: %#v", err)
	}
	if Unreachable(err) {
		t.Error("a 404 counted as unreachable")
	}
}

func TestUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c := NewClient(&url.URL{Scheme: "http", Host: addr}, nil)
	_, err = c.List(context.Background())
	if err == nil || !Unreachable(err) {
		t.Fatalf("list from a closed port: %v (unreachable %v)", err, Unreachable(err))
	}
}

func TestWireNames(t *testing.T) {
	b, _ := json.Marshal(ProgressResponse{Status: "s", Digest: "d", Total: 2, Completed: 1})
	if string(b) != `{"status":"s","digest":"d","total":2,"completed":1}` {
		t.Errorf("progress JSON = %s", b)
	}
	b, _ = json.Marshal(ListModelResponse{Name: "n", Model: "n", Size: 3, Digest: "c"})
	for _, key := range []string{`"name":"n"`, `"model":"n"`, `"modified_at":`, `"size":3`, `"digest":"c"`, `"details":{"parent_model":"","format":""`, `"parameter_size":""`, `"quantization_level":""`} {
		if !strings.Contains(string(b), key) {
			t.Errorf("list model JSON %s lacks %s", b, key)
		}
	}
}
