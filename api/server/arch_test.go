package server

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/hubtest"
	"github.com/mlxg/mlxg/runner/model"
	"github.com/mlxg/mlxg/runner/sched"
)

// A checkpoint whose architecture no registered one runs is a 400 that names its model_type (top level,
// or nested in text_config) and lists the registry's model types: at create from uploaded files before
// anything is converted or imported, and at pull before any weight downloads.
func TestUnsupportedArchitecture(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	supported := "supported model types: " + strings.Join(model.Supported(), ", ")
	weights := []byte("not read: the architecture is refused first")
	for _, tc := range []struct{ config, named string }{
		{`{"model_type":"falcon_mamba","architectures":["FalconMambaForCausalLM"]}`, `model_type "falcon_mamba"`},
		{`{"architectures":["Gemma4ForConditionalGeneration"],"text_config":{"model_type":"gemma4_fake_text"}}`, `model_type "gemma4_fake_text"`},
	} {
		files := map[string]string{"config.json": blobDigest([]byte(tc.config)), "model.safetensors": blobDigest(weights)}
		for name, b := range map[string][]byte{"config.json": []byte(tc.config), "model.safetensors": weights} {
			if c := blobReq(t, ts, "POST", files[name], b); c != 201 && c != 200 { // 200: uploaded before
				t.Fatalf("upload %s: %d", name, c)
			}
		}
		req, _ := json.Marshal(map[string]any{"model": "unrunnable", "files": files, "stream": false})
		status, msg := ts.errorOf(t, "/api/create", string(req))
		if status != 400 || !strings.Contains(msg, tc.named) || !strings.HasSuffix(msg, supported) {
			t.Errorf("create %s: %d %q", tc.config, status, msg)
		}
	}
	if code := ts.postJSON(t, "/api/show", `{"model":"unrunnable"}`, nil); code != 404 {
		t.Errorf("a refused create left a model: show %d", code)
	}

	root := t.TempDir()
	repo := filepath.Join(root, "org", "gpt-oss-tiny")
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(repo, "config.json"), []byte(`{"model_type":"falcon_mamba","quantization":{"group_size":32,"bits":4,"mode":"mxfp4"}}`), 0o644)
	os.WriteFile(filepath.Join(repo, "model.safetensors"), make([]byte, 1<<16), 0o644)
	hub := hubtest.New(root)
	srv := httptest.NewServer(hub)
	defer srv.Close()
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(root, "no-token"))
	ts.srv.models.PullOptions = registry.PullOptions{Endpoint: srv.URL, Retries: -1, Backoff: time.Millisecond}
	status, msg := ts.errorOf(t, "/api/pull", `{"model":"org/gpt-oss-tiny","stream":false}`)
	if status != 400 || !strings.Contains(msg, `model_type "falcon_mamba"`) || !strings.HasSuffix(msg, supported) {
		t.Errorf("pull: %d %q", status, msg)
	}
	if n := hub.Served("model.safetensors"); n != 0 {
		t.Errorf("pull downloaded %d bytes of weights it cannot run", n)
	}
}
