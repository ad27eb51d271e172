package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// OllamaVersion is the peer's version: the newest tag the Go module proxy serves here.
const OllamaVersion = "0.17.4"

// miniaudioStub stands in for miniaudio, which Debian does not package and Go module zips
// drop from llama.cpp's vendor folder: audio decoding fails, text models are unaffected.
const miniaudioStub = `/* mlxg bench: stub miniaudio for building Ollama's llama.cpp text path. Audio always fails. */
#ifndef MLXG_MINIAUDIO_STUB_H
#define MLXG_MINIAUDIO_STUB_H
#include <stddef.h>
#include <stdint.h>
typedef int ma_result;
typedef uint32_t ma_uint32;
typedef uint64_t ma_uint64;
#define MA_SUCCESS 0
#define MA_ERROR (-1)
typedef enum { ma_format_unknown = 0, ma_format_f32 = 5 } ma_format;
typedef enum { ma_encoding_format_unknown = 0, ma_encoding_format_wav } ma_encoding_format;
typedef struct { ma_format format; ma_uint32 channels; ma_uint32 sampleRate; } ma_decoder_config;
typedef struct { int unused; } ma_decoder;
typedef struct { int unused; } ma_encoder_config;
typedef struct { int unused; } ma_encoder;
static inline ma_decoder_config ma_decoder_config_init(ma_format f, ma_uint32 ch, ma_uint32 rate) {
	ma_decoder_config c = { f, ch, rate }; return c;
}
static inline ma_result ma_decoder_init_memory(const void *p, size_t n, const ma_decoder_config *c, ma_decoder *d) {
	(void)p; (void)n; (void)c; (void)d; return MA_ERROR;
}
static inline ma_result ma_decoder_get_length_in_pcm_frames(ma_decoder *d, ma_uint64 *n) { (void)d; *n = 0; return MA_ERROR; }
static inline ma_result ma_decoder_read_pcm_frames(ma_decoder *d, void *out, ma_uint64 n, ma_uint64 *got) {
	(void)d; (void)out; (void)n; *got = 0; return MA_ERROR;
}
static inline ma_result ma_decoder_uninit(ma_decoder *d) { (void)d; return MA_SUCCESS; }
#endif
`

// findOllama returns the peer binary: the one given, else the cached build, else a fresh build
// from the Go module proxy with native CPU flags into the cache (minutes).
func findOllama(ctx context.Context, given, cache string, logf func(string, ...any)) (string, error) {
	if given != "" {
		return given, nil
	}
	dir := filepath.Join(cache, "ollama-v"+OllamaVersion)
	bin := filepath.Join(dir, "bin", "ollama")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := ensureBuildDeps(ctx, logf); err != nil {
		return "", err
	}
	stub := filepath.Join(dir, "stubinc", "miniaudio", "miniaudio.h")
	if err := os.MkdirAll(filepath.Dir(stub), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(stub, []byte(miniaudioStub), 0o644); err != nil {
		return "", err
	}
	logf("building Ollama v%s with -O3 -march=native into %s (a few minutes; cached afterwards)", OllamaVersion, dir)
	cmd := exec.CommandContext(ctx, "go", "install",
		"-ldflags", "-X github.com/ollama/ollama/version.Version="+OllamaVersion,
		"github.com/ollama/ollama@v"+OllamaVersion)
	cmd.Dir = dir // outside the mlxg module: the install resolves ollama's own go.mod
	cmd.Env = append(os.Environ(),
		"CGO_ENABLED=1",
		"CGO_CPPFLAGS=-I"+filepath.Join(dir, "stubinc"),
		"CGO_CFLAGS=-O3 -march=native", "CGO_CXXFLAGS=-O3 -march=native",
		"GOBIN="+filepath.Join(dir, "bin"), "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building Ollama v%s: %w\n%s", OllamaVersion, err, tail(string(out), 3000))
	}
	return bin, nil
}

// ensureBuildDeps checks the C++ headers Ollama's build needs, installing them through
// apt-get when they are missing and this is a Debian-like system run as root.
func ensureBuildDeps(ctx context.Context, logf func(string, ...any)) error {
	have := func() bool {
		for _, h := range []string{"/usr/include/nlohmann/json.hpp", "/usr/include/stb/stb_image.h"} {
			if _, err := os.Stat(h); err != nil {
				return false
			}
		}
		return true
	}
	if have() {
		return nil
	}
	if _, err := exec.LookPath("apt-get"); err != nil || os.Geteuid() != 0 {
		return errors.New("building Ollama needs nlohmann-json and stb headers (Debian: apt-get install nlohmann-json3-dev libstb-dev); install them, or pass --ollama PATH to an Ollama binary")
	}
	logf("installing nlohmann-json3-dev and libstb-dev with apt-get")
	for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", "nlohmann-json3-dev", "libstb-dev"}} {
		if out, err := exec.CommandContext(ctx, "apt-get", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 2000))
		}
	}
	if !have() {
		return errors.New("apt-get installed nlohmann-json3-dev and libstb-dev but their headers are still missing from /usr/include")
	}
	return nil
}

// ollamaQuant is the Ollama quantization compared with mlxg's bits: Ollama v0.17.4 quantizes
// to q4_K_M, q4_K_S and q8_0 only, so 4-bit MLX meets q4_K_M.
var ollamaQuant = map[int]string{4: "q4_K_M", 8: "q8_0"}

// ensureOllamaModel imports the Hugging Face checkpoint src into the running Ollama as name,
// quantized to quant, unless it is there already; created says it was made now.
func ensureOllamaModel(ctx context.Context, s *Server, bin, name, src, quant string, logf func(string, ...any)) (created bool, err error) {
	err = s.postJSON(ctx, "/api/show", map[string]any{"model": name}, nil)
	if err == nil {
		return false, nil
	}
	if !errors.Is(err, errNotFound) {
		return false, err
	}
	logf("ollama create %s -q %s (from %s)", name, quant, src)
	mf := filepath.Join(filepath.Dir(src), name+".Modelfile")
	if err := os.WriteFile(mf, []byte("FROM "+src+"\n"), 0o644); err != nil {
		return false, err
	}
	cmd := exec.CommandContext(ctx, bin, "create", name, "-q", quant, "-f", mf)
	cmd.Env = append(os.Environ(), "OLLAMA_HOST="+strings.TrimPrefix(s.URL, "http://"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return false, fmt.Errorf("ollama create %s: %w\n%s", name, err, tail(string(out), 2000))
	}
	return true, nil
}

// ollamaTensors lists the model's tensors through /api/show (verbose).
func ollamaTensors(ctx context.Context, s *Server, name string) ([]TensorBytes, bool, error) {
	var show struct {
		Tensors []GGMLTensor `json:"tensors"`
	}
	if err := s.postJSON(ctx, "/api/show", map[string]any{"model": name, "verbose": true}, &show); err != nil {
		return nil, false, err
	}
	if len(show.Tensors) == 0 {
		return nil, false, fmt.Errorf("ollama /api/show %s listed no tensors", name)
	}
	ts, err := GGUFTensors(show.Tensors)
	if err != nil {
		return nil, false, err
	}
	tied := true
	for _, t := range show.Tensors {
		if t.Name == "output.weight" {
			tied = false
		}
	}
	return ts, tied, nil
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
