package model_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/runner/cpu"
	"github.com/mlxg/mlxg/runner/model"
)

// CheckConfig reads model_type where Load reads it, and its refusal names that type (and a multimodal
// wrapper's text model) and lists what the architecture registry holds.
func TestCheckConfig(t *testing.T) {
	supported := strings.Join(model.Supported(), ", ")
	for _, tc := range []struct {
		config string
		ok     bool
		want   string // in the refusal
	}{
		{`{"model_type":"qwen3","num_hidden_layers":2}`, true, ""},
		// A multimodal wrapper with no model_type of its own runs as its text model.
		{`{"text_config":{"model_type":"qwen3"}}`, true, ""},
		{`{"model_type":"falcon_mamba","architectures":["FalconMambaForCausalLM"]}`, false,
			`model_type "falcon_mamba" (architectures FalconMambaForCausalLM) is not supported`},
		{`{"model_type":"gemma4_fake","architectures":["Gemma4ForConditionalGeneration"],"text_config":{"model_type":"gemma4_fake_text"}}`, false,
			`model_type "gemma4_fake" (text_config's model_type "gemma4_fake_text"; architectures Gemma4ForConditionalGeneration) is not supported`},
		{`{"text_config":{"model_type":"gemma4_fake_text","architectures":["Gemma4ForCausalLM"]}}`, false,
			`model_type "gemma4_fake_text" (architectures Gemma4ForCausalLM) is not supported`},
		{`{"num_hidden_layers":2}`, false, "a config.json that names no model_type is not supported"},
	} {
		err := model.CheckConfig([]byte(tc.config))
		if tc.ok {
			if err != nil {
				t.Errorf("%s: %v", tc.config, err)
			}
			continue
		}
		var ue *model.UnsupportedError
		if !errors.As(err, &ue) || !errors.Is(err, registry.ErrUnsupported) ||
			!strings.Contains(err.Error(), tc.want) || !strings.HasSuffix(err.Error(), "supported model types: "+supported) {
			t.Errorf("%s: err = %v\nwant %q and the registry's list %s", tc.config, err, tc.want, supported)
		}
	}
	if !strings.Contains(supported, "qwen3") || !strings.Contains(supported, "llama") {
		t.Fatalf("Supported() = %s: the architectures did not register", supported)
	}
}

// Load refuses an unregistered model_type with the same error, which the server tells from other load
// failures by registry.ErrUnsupported.
func TestLoadUnsupported(t *testing.T) {
	dir := generate(t, randmodel.Tiny("qwen3", 64))
	rewriteModelType(t, dir, "qwen3", "falcon_mamba")
	_, err := model.Load(dir, cpu.New(1))
	if !errors.Is(err, registry.ErrUnsupported) || !strings.Contains(err.Error(), `model_type "falcon_mamba"`) {
		t.Fatalf("Load: %v", err)
	}
}

// With CheckConfig installed, as api/server installs it, mlxg create refuses an unregistered model_type
// (top level, or nested in text_config) before converting anything: the output folder is never made.
func TestCreateUnsupported(t *testing.T) {
	registry.SetArchitectureCheck(model.CheckConfig)
	t.Cleanup(func() { registry.SetArchitectureCheck(nil) })
	for _, tc := range []struct{ from, to string }{
		{`"model_type": "qwen3"`, `"model_type": "falcon_mamba"`},
		{`"model_type": "qwen3"`, `"text_config": {"model_type": "gemma4_fake_text"}`},
	} {
		src := generate(t, randmodel.Tiny("qwen3", 64))
		rewriteModelType(t, src, tc.from, tc.to)
		out := filepath.Join(t.TempDir(), "out")
		_, err := create.Convert(context.Background(), src, out, create.Options{Bits: 4})
		if !errors.Is(err, registry.ErrUnsupported) || !strings.Contains(err.Error(), "supported model types: ") {
			t.Fatalf("%s: Convert: %v", tc.to, err)
		}
		if _, serr := os.Stat(out); !os.IsNotExist(serr) {
			t.Fatalf("%s: the conversion started (%v) before the refusal: %v", tc.to, serr, err)
		}
	}
	// A supported checkpoint still converts with the check installed.
	src := generate(t, randmodel.Tiny("qwen3", 64))
	if _, err := create.Convert(context.Background(), src, filepath.Join(t.TempDir(), "out"), create.Options{Bits: 4}); err != nil {
		t.Fatal(err)
	}
}

// rewriteModelType replaces from with to in dir's config.json (failing when from is not there).
func rewriteModelType(t *testing.T, dir, from, to string) {
	t.Helper()
	p := filepath.Join(dir, "config.json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), from) {
		t.Fatalf("config.json has no %s: %s", from, b)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}
