package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/runner/sched"
)

func TestParseModelfile(t *testing.T) {
	req, uploads, err := ParseModelfile(strings.NewReader(`# comment
from qwen3:8b
PARAMETER num_ctx 8192
PARAMETER temperature 0.7
PARAMETER stop "<|im_end|>"
PARAMETER stop """User:"""
PARAMETER use_mmap false
PARAMETER	seed	42
SYSTEM """
You are
Mario."""
MESSAGE user "Is it a tomato?"
MESSAGE assistant """Yes,
it is."""
LICENSE first
LICENSE """second
license"""
TEMPLATE {{ .Prompt }}
ADAPTER ./lora.safetensors
`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	want := &CreateRequest{From: "qwen3:8b", Template: "{{ .Prompt }}", System: "\nYou are\nMario.",
		Parameters: map[string]any{"num_ctx": 8192, "temperature": 0.7, "stop": []string{"<|im_end|>", "User:"}, "use_mmap": false, "seed": 42},
		Messages:   []Message{{Role: "user", Content: "Is it a tomato?"}, {Role: "assistant", Content: "Yes,\nit is."}},
		License:    []any{"first", "second\nlicense"}, Adapters: map[string]string{"./lora.safetensors": ""}}
	if !reflect.DeepEqual(req, want) || len(uploads) != 0 {
		t.Fatalf("parsed %+v\nwant   %+v (uploads %v)", req, want, uploads)
	}

	// FROM a folder (relative to the Modelfile's): its checkpoint files, with their sha256, to upload.
	dir := t.TempDir()
	ckpt := filepath.Join(dir, "ckpt")
	os.MkdirAll(filepath.Join(ckpt, "sub"), 0o755)
	files := map[string]string{"config.json": "{}", "model.safetensors": "w", "tokenizer.json": "{}", "chat_template.jinja": "t",
		"README.md": "r", "model.gguf": "g", ".hidden.json": "h"}
	for n, b := range files {
		os.WriteFile(filepath.Join(ckpt, n), []byte(b), 0o644)
	}
	req, uploads, err = ParseModelfile(strings.NewReader("FROM ./ckpt\n"), dir)
	if err != nil {
		t.Fatal(err)
	}
	if req.From != "" || len(req.Files) != 4 || len(uploads) != 4 {
		t.Fatalf("FROM a folder: %+v, %v", req, uploads)
	}
	for _, n := range []string{"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} {
		s := sha256.Sum256([]byte(files[n]))
		if req.Files[n] != "sha256:"+hex.EncodeToString(s[:]) {
			t.Errorf("%s: digest %q", n, req.Files[n])
		}
	}
	os.Remove(filepath.Join(ckpt, "model.safetensors"))
	if _, _, err := ParseModelfile(strings.NewReader("FROM ./ckpt\n"), dir); err == nil || !strings.Contains(err.Error(), "no *.safetensors") {
		t.Errorf("a folder without weights: %v", err)
	}
	for body, msg := range map[string]string{
		"FROM x\nPARAMETER stop\n":         "needs a value",
		"FROM x\nPARAMETER top_k 0.5\n":    "want an integer",
		"FROM x\nPARAMETER seeds 1\n":      "unknown parameter",
		"FROM x\nSYSTEM\n":                 "needs an argument",
		"FROM x\nSYSTEM \"\"\"a\"\"\" b\n": "after the closing",
	} {
		if _, _, err := ParseModelfile(strings.NewReader(body), dir); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%q: %v, want %q", body, err, msg)
		}
	}
}

// Client.CreateBlob and Client.Create against a server: what mlxg create -f sends.
func TestClientCreate(t *testing.T) {
	ts := newTestServer(t, sched.Config{})
	u, _ := url.Parse(ts.URL)
	c := NewClient(u, nil)
	ctx := context.Background()
	data := []byte("blob")
	if err := c.CreateBlob(ctx, blobDigest(data), bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	var se StatusError
	if err := c.CreateBlob(ctx, blobDigest([]byte("x")), bytes.NewReader(data)); !errors.As(err, &se) || se.StatusCode != 400 || !strings.Contains(se.ErrorMessage, "digest mismatch") {
		t.Errorf("a mismatched blob: %v", err)
	}
	req, _, err := ParseModelfile(strings.NewReader("FROM scripted\nPARAMETER stop Paris\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	req.Model = "viaclient"
	var last ProgressResponse
	if err := c.Create(ctx, req, func(p ProgressResponse) error { last = p; return nil }); err != nil || last.Status != "success" {
		t.Fatalf("create: %v, last %+v", err, last)
	}
	show, err := c.Show(ctx, &ShowRequest{Model: "viaclient"})
	if err != nil || !strings.Contains(show.Parameters, `"Paris"`) {
		t.Errorf("show: %+v, %v", show, err)
	}
}

// linkOrCopy copies where a hard link cannot be made (another filesystem: /dev/shm is tmpfs on Linux).
func TestLinkOrCopyAcrossDisks(t *testing.T) {
	src := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(src, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := os.MkdirTemp("/dev/shm", "mlxg-link-")
	if err != nil {
		t.Skip("no /dev/shm here to stand for another disk")
	}
	defer os.RemoveAll(other)
	dst := filepath.Join(other, "model.safetensors")
	if err := linkOrCopy(src, dst); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(dst); err != nil || string(b) != "weights" {
		t.Fatalf("copy: %q, %v", b, err)
	}
	same := filepath.Join(filepath.Dir(src), "linked")
	if err := linkOrCopy(src, same); err != nil {
		t.Fatal(err)
	}
	a, _ := os.Stat(src)
	b, _ := os.Stat(same)
	if !os.SameFile(a, b) {
		t.Error("on one disk the blob was copied, not linked")
	}
}
