package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// NodeLlamaCppVersion is the npm node-llama-cpp the --llamacpp peer runs: llama.cpp as prebuilt
// binaries (npm packages @node-llama-cpp/<platform>), so nothing is compiled or downloaded at
// run time.
const NodeLlamaCppVersion = "3.22.1"

//go:embed llamacpp-server.mjs
var llamacppServer []byte

// llamacppPlatforms maps GOOS/GOARCH to node-llama-cpp's CPU prebuilt package.
var llamacppPlatforms = map[string]string{
	"linux/amd64": "linux-x64", "linux/arm64": "linux-arm64",
	"darwin/arm64": "mac-arm64-metal", "darwin/amd64": "mac-x64",
}

// ensureLlamaCpp installs node-llama-cpp into the cache once, checks that its prebuilt binary
// for this platform is there, writes the bench's server script beside it and returns the
// script's path (to run with node).
func ensureLlamaCpp(ctx context.Context, cache string, logf func(string, ...any)) (string, error) {
	plat := llamacppPlatforms[runtime.GOOS+"/"+runtime.GOARCH]
	if plat == "" {
		return "", fmt.Errorf("--llamacpp: node-llama-cpp has no prebuilt llama.cpp for %s/%s in this bench; leave out --llamacpp", runtime.GOOS, runtime.GOARCH)
	}
	for _, tool := range []string{"node", "npm"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("--llamacpp needs Node.js 20 or later with npm (%s is not on PATH): install them, or leave out --llamacpp", tool)
		}
	}
	dir := filepath.Join(cache, "llamacpp-v"+NodeLlamaCppVersion)
	prebuilt := filepath.Join(dir, "node_modules", "@node-llama-cpp", plat, "package.json")
	if _, err := os.Stat(prebuilt); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"private": true}`+"\n"), 0o644); err != nil {
			return "", err
		}
		pkg := "node-llama-cpp@" + NodeLlamaCppVersion
		logf("installing %s with npm into %s", pkg, dir)
		// --ignore-scripts: its postinstall would try to build llama.cpp from source when it
		// finds no prebuilt binary; the bench wants the prebuilt one or a clear error.
		cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--ignore-scripts", pkg)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("npm install %s: %w\n%s", pkg, err, tail(string(out), 2000))
		}
		if _, err := os.Stat(prebuilt); err != nil {
			return "", fmt.Errorf("npm installed node-llama-cpp but not its prebuilt llama.cpp @node-llama-cpp/%s (npm skips optional packages whose os/cpu/libc do not match): the --llamacpp peer cannot run on this machine", plat)
		}
	}
	script := filepath.Join(dir, "llamacpp-server.mjs") // beside node_modules: ES modules resolve from there
	return script, os.WriteFile(script, llamacppServer, 0o644)
}

// ollamaGGUF returns the GGUF file Ollama stored for model name (the blob of its manifest's
// model layer) under its models directory.
func ollamaGGUF(modelsDir, name string) (string, error) {
	manifest := filepath.Join(modelsDir, "manifests", "registry.ollama.ai", "library", name, "latest")
	raw, err := os.ReadFile(manifest)
	if err != nil {
		return "", fmt.Errorf("the GGUF of Ollama's %s: %w", name, err)
	}
	var m struct {
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("Ollama manifest %s: %w", manifest, err)
	}
	for _, l := range m.Layers {
		if l.MediaType != "application/vnd.ollama.image.model" {
			continue
		}
		algo, hex, ok := strings.Cut(l.Digest, ":")
		if !ok || algo != "sha256" || hex == "" || strings.ContainsAny(hex, `/\.`) {
			return "", fmt.Errorf("Ollama manifest %s: model layer digest %q is not sha256:HEX", manifest, l.Digest)
		}
		blob := filepath.Join(modelsDir, "blobs", "sha256-"+hex)
		if _, err := os.Stat(blob); err != nil {
			return "", fmt.Errorf("Ollama manifest %s names %s: %w", manifest, l.Digest, err)
		}
		return blob, nil
	}
	return "", fmt.Errorf("Ollama manifest %s has no model layer (application/vnd.ollama.image.model)", manifest)
}
