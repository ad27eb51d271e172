package e2e

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ollama/ollama/api"
	"github.com/ollama/ollama/parser"
	ollamamodel "github.com/ollama/ollama/types/model"

	"github.com/mlxg/mlxg/api/apitest"
	"github.com/mlxg/mlxg/internal/testdata"
)

// createLikeOllamaCLI does what `ollama create NAME -f Modelfile` does (Ollama's cmd CreateHandler): the
// Modelfile parsed by Ollama's own parser into the CreateRequest, each local file uploaded as a blob
// (POST /api/blobs/:digest) and named by its base name, then /api/create with progress.
func createLikeOllamaCLI(t *testing.T, c *api.Client, name, modelfile, dir string) ([]string, error) {
	t.Helper()
	ctx := context.Background()
	mf, err := parser.ParseFile(strings.NewReader(modelfile))
	if err != nil {
		t.Fatal(err)
	}
	req, err := mf.CreateRequest(dir)
	if err != nil {
		t.Fatal(err)
	}
	req.Model = name
	files := map[string]string{}
	for path, digest := range req.Files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		err = c.CreateBlob(ctx, digest, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		files[filepath.Base(path)] = digest
	}
	req.Files = files
	var statuses []string
	err = c.Create(ctx, req, func(p api.ProgressResponse) error { statuses = append(statuses, p.Status); return nil })
	return statuses, err
}

// `ollama create` through Ollama's Go client and Modelfile parser: FROM an existing model with PARAMETER,
// SYSTEM, MESSAGE and LICENSE, then FROM a local checkpoint folder (uploaded as blobs); show reports what
// the Modelfile set and generation follows it; TEMPLATE and ADAPTER are refused with a 400.
func TestOllamaCreate(t *testing.T) {
	s := start(t)
	c := api.NewClient(s.url(t), http.DefaultClient)
	ctx := context.Background()
	no := false
	dir := t.TempDir()

	statuses, err := createLikeOllamaCLI(t, c, "e2e-derived", "FROM "+model+`
PARAMETER num_ctx 2048
PARAMETER stop sunny
PARAMETER temperature 0.2
SYSTEM """You are terse."""
MESSAGE user Hi
MESSAGE assistant Hello.
LICENSE MIT-0
`, dir)
	if err != nil || len(statuses) == 0 || statuses[len(statuses)-1] != "success" {
		t.Fatalf("create FROM %s: %v %v", model, err, statuses)
	}
	show, err := c.Show(ctx, &api.ShowRequest{Model: "e2e-derived"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(show.Parameters, "2048") || !strings.Contains(show.Parameters, `"sunny"`) || show.System != "You are terse." ||
		!strings.Contains(show.License, "MIT-0") || len(show.Messages) != 2 {
		t.Errorf("show: parameters %q, system %q, license %q, messages %+v", show.Parameters, show.System, show.License, show.Messages)
	}
	for _, want := range []string{"completion", "tools", "thinking"} {
		if !slices.ContainsFunc(show.Capabilities, func(c ollamamodel.Capability) bool { return string(c) == want }) {
			t.Errorf("capabilities %v lack %s", show.Capabilities, want)
		}
	}
	var reply api.ChatResponse
	err = c.Chat(ctx, &api.ChatRequest{Model: "e2e-derived", Stream: &no, Think: &api.ThinkValue{Value: false},
		Messages: []api.Message{{Role: "user", Content: "Weather?"}}}, func(r api.ChatResponse) error { reply = r; return nil })
	if err != nil || reply.Message.Content != "The weather in Paris is " || reply.DoneReason != "stop" {
		t.Fatalf("chat with the created model: %v %+v (want the stop word to cut %q)", err, reply, apitest.PlainReply)
	}
	ps, err := c.ListRunning(ctx)
	if err != nil || !slices.ContainsFunc(ps.Models, func(m api.ProcessModelResponse) bool {
		return m.Name == "e2e-derived:latest" && m.ContextLength == 2048
	}) {
		t.Errorf("ps: %+v %v, want e2e-derived loaded with num_ctx 2048", ps, err)
	}

	// FROM a folder: the checkpoint's files go up as blobs first.
	ckpt := filepath.Join(dir, "ckpt")
	if err := apitest.WriteScripted(ckpt, testdata.Tokenizer(t, "qwen3"), apitest.Qwen3); err != nil {
		t.Fatal(err)
	}
	if statuses, err := createLikeOllamaCLI(t, c, "e2e-folder", "FROM ./ckpt\nPARAMETER stop Paris\n", dir); err != nil || statuses[len(statuses)-1] != "success" {
		t.Fatalf("create FROM ./ckpt: %v %v", err, statuses)
	}
	err = c.Chat(ctx, &api.ChatRequest{Model: "e2e-folder", Stream: &no, Think: &api.ThinkValue{Value: false},
		Messages: []api.Message{{Role: "user", Content: "Weather?"}}}, func(r api.ChatResponse) error { reply = r; return nil })
	if err != nil || reply.Message.Content != "The weather in " {
		t.Fatalf("chat with the model created from a folder: %v %+v", err, reply)
	}

	for mf, msg := range map[string]string{
		"FROM " + model + "\nTEMPLATE {{ .Prompt }}\n":     "TEMPLATE is not supported",
		"FROM " + model + "\nADAPTER ./ckpt/config.json\n": "ADAPTER is not supported",
		"FROM " + model + "\nPARAMETER num_ctx 0\n":        "num_ctx",
		"FROM no-such-model\n":                             "no-such-model",
	} {
		_, err := createLikeOllamaCLI(t, c, "e2e-bad", mf, dir)
		var se api.StatusError
		if !errors.As(err, &se) || se.StatusCode/100 != 4 || !strings.Contains(se.ErrorMessage, msg) {
			t.Errorf("%q: %v, want a 4xx saying %q", mf, err, msg)
		}
	}
	for _, name := range []string{"e2e-derived", "e2e-folder"} {
		if err := c.Delete(ctx, &api.DeleteRequest{Model: name}); err != nil {
			t.Error(err)
		}
	}
	if _, err := c.Show(ctx, &api.ShowRequest{Model: model}); err != nil {
		t.Errorf("the FROM model after deleting what was made from it: %v", err)
	}
}
