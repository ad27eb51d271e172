package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeCheck stands in for runner/model's CheckConfig: it runs the model types it is given and reads
// model_type where config.json puts it, text_config included.
func fakeCheck(supported ...string) func([]byte) error {
	return func(config []byte) error {
		var c struct {
			ModelType  string `json:"model_type"`
			TextConfig struct {
				ModelType string `json:"model_type"`
			} `json:"text_config"`
		}
		if err := json.Unmarshal(config, &c); err != nil {
			return err
		}
		for _, s := range supported {
			if c.ModelType == s {
				return nil
			}
		}
		return fmt.Errorf("model_type %q (text_config %q) is not supported; supported model types: %s",
			c.ModelType, c.TextConfig.ModelType, strings.Join(supported, ", "))
	}
}

func withCheck(t *testing.T, check func([]byte) error) {
	t.Helper()
	SetArchitectureCheck(check)
	t.Cleanup(func() { SetArchitectureCheck(nil) })
}

func TestCheckArchitecture(t *testing.T) {
	if err := CheckArchitecture([]byte(`{"model_type":"anything"}`)); err != nil {
		t.Fatalf("with no check installed: %v", err)
	}
	withCheck(t, fakeCheck("qwen3"))
	if err := CheckArchitecture([]byte(`{"model_type":"qwen3"}`)); err != nil {
		t.Fatal(err)
	}
	err := CheckArchitecture([]byte(`{"model_type":"falcon_mamba"}`))
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), `model_type "falcon_mamba"`) || strings.Contains(err.Error(), ErrUnsupported.Error()) {
		t.Fatalf("err = %v: want the check's own message, wrapping ErrUnsupported", err)
	}
}

// A pull of a checkpoint whose architecture this program does not run fails once config.json is read,
// top-level model_type or one nested in text_config: no weight is downloaded and no snapshot is written.
func TestPullUnsupportedArchitecture(t *testing.T) {
	for _, config := range []string{
		`{"model_type":"falcon_mamba","architectures":["FalconMambaForCausalLM"]}`,
		`{"text_config":{"model_type":"gemma4_text"},"vision_config":{}}`,
	} {
		e := newPullEnv(t)
		withCheck(t, fakeCheck("qwen3"))
		if err := os.WriteFile(filepath.Join(e.root, "org", "tiny", "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := e.pull(t, "org/tiny")
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "supported model types: qwen3") {
			t.Fatalf("%s: pull err = %v", config, err)
		}
		if n := e.hub.Served("config.json"); n != int64(len(config)) {
			t.Errorf("%s: config.json served %d bytes", config, n)
		}
		for _, f := range []string{"model.safetensors", "tokenizer.json"} {
			if n := e.hub.Served(f); n != 0 {
				t.Errorf("%s: %s served %d bytes before the architecture was checked", config, f, n)
			}
		}
		if _, err := os.Stat(filepath.Join(e.store.HubCache, "models--org--tiny", "snapshots")); !os.IsNotExist(err) {
			t.Errorf("%s: a snapshot was written (%v)", config, err)
		}
	}
	// The same repo pulls once its architecture is supported.
	e := newPullEnv(t)
	withCheck(t, fakeCheck("qwen3"))
	if _, _, err := e.pull(t, "org/tiny"); err != nil {
		t.Fatal(err)
	}
}
