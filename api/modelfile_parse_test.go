package api

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
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
PARAMETER draft_model qwen3:0.6b
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
		Parameters: map[string]any{"num_ctx": 8192, "temperature": 0.7, "stop": []string{"<|im_end|>", "User:"}, "use_mmap": false, "seed": 42, "draft_model": "qwen3:0.6b"},
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
