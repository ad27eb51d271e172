package template

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
)

// The reference renderings in testdata/ come from transformers itself (scripts/tmplref):
// chat_reference.json from tokenizer.apply_chat_template on the real tokenizers,
// features_reference.json from transformers' Jinja2 environment on hand-written
// templates that exercise the engine's features one by one. MLXG_TMPLREF_DIR points the
// tests at another directory of reference files (scripts/tmplref/run.sh emulate).

type refError struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

type refCase struct {
	Model        string    `json:"model"`
	Conversation string    `json:"conversation"`
	Options      string    `json:"options"`
	Name         string    `json:"name"`
	Output       *string   `json:"output"`
	Error        *refError `json:"error"`
}

type refFile struct {
	Engine map[string]string `json:"engine"`
	Models map[string]struct {
		SpecialTokens map[string]string `json:"special_tokens"`
	} `json:"models"`
	Cases []refCase `json:"cases"`
}

func refDir() string {
	if d := os.Getenv("MLXG_TMPLREF_DIR"); d != "" {
		return d
	}
	return "testdata"
}

func readJSON(t testing.TB, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// decode reads JSON with the template package's own decoder (ordered dicts, Python
// numbers), the way the reference side's json.load sees it.
func decode(t testing.TB, raw json.RawMessage) any {
	t.Helper()
	v, err := DecodeJSON(raw)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func toMessages(t testing.TB, v any) []Message {
	t.Helper()
	var out []Message
	for _, m := range v.([]any) {
		d := m.(*Dict)
		msg := Message{}
		for _, k := range d.keys {
			msg[k.(string)] = d.m[k]
		}
		out = append(out, msg)
	}
	return out
}

func modelDir(t testing.TB, model string) string {
	if model == "qwen3-tiny" {
		return testdata.SharedModel(t, model)
	}
	return testdata.Tokenizer(t, model)
}

type conversationsFile struct {
	Conversations map[string]json.RawMessage `json:"conversations"`
	Tools         json.RawMessage            `json:"tools"`
	Documents     json.RawMessage            `json:"documents"`
	Options       []struct {
		Name                string          `json:"name"`
		AddGenerationPrompt bool            `json:"add_generation_prompt"`
		Tools               bool            `json:"tools"`
		Documents           bool            `json:"documents"`
		Kwargs              json.RawMessage `json:"kwargs"`
	} `json:"options"`
	Models []string `json:"models"`
}

func refNow(t testing.TB, ref refFile) func() time.Time {
	now, err := time.ParseInLocation("2006-01-02T15:04:05", ref.Engine["now"], time.Local)
	if err != nil {
		t.Fatalf("reference file's engine.now: %v", err)
	}
	return func() time.Time { return now }
}

// checkResult compares a rendering with the reference: the same bytes, or an error
// where the reference failed (with raise_exception's message where it raised).
func checkResult(t *testing.T, want refCase, got string, err error) {
	t.Helper()
	if want.Error != nil {
		if err == nil {
			t.Fatalf("reference failed with %s: %s\nbut Go rendered:\n%q", want.Error.Type, want.Error.Message, got)
		}
		var te *Error
		if want.Error.Type == "TemplateError" && errors.As(err, &te) && te.Raised && te.Msg != want.Error.Message {
			t.Fatalf("raise_exception message: got %q, want %q", te.Msg, want.Error.Message)
		}
		t.Logf("both fail: reference %s: %s; Go: %v", want.Error.Type, want.Error.Message, err)
		return
	}
	if err != nil {
		t.Fatalf("Go failed: %v\nreference rendered:\n%q", err, *want.Output)
	}
	if got != *want.Output {
		t.Fatalf("rendering differs at byte %d\n got: %q\nwant: %q", firstDiff(got, *want.Output), got, *want.Output)
	}
}

func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func TestChatTemplateConformance(t *testing.T) {
	var spec conversationsFile
	readJSON(t, filepath.Join("testdata", "conversations.json"), &spec)
	var ref refFile
	readJSON(t, filepath.Join(refDir(), "chat_reference.json"), &ref)
	if len(ref.Cases) == 0 {
		t.Fatal("no reference cases")
	}
	now := refNow(t, ref)
	tools := decode(t, spec.Tools).([]any)
	docs := decode(t, spec.Documents).([]any)
	templates := map[string]*ChatTemplate{}
	loadErrs := map[string]error{}
	for _, c := range ref.Cases {
		t.Run(c.Model+"/"+c.Conversation+"/"+c.Options, func(t *testing.T) {
			ct, ok := templates[c.Model]
			if !ok && loadErrs[c.Model] == nil {
				ct, loadErrs[c.Model] = LoadChatTemplate(modelDir(t, c.Model))
				templates[c.Model] = ct
				if ct != nil {
					checkSpecialTokens(t, c.Model, ct.special, ref.Models[c.Model].SpecialTokens)
				}
			}
			if err := loadErrs[c.Model]; err != nil {
				checkResult(t, c, "", err)
				return
			}
			var opts Options
			found := false
			for _, o := range spec.Options {
				if o.Name != c.Options {
					continue
				}
				found = true
				opts.AddGenerationPrompt = o.AddGenerationPrompt
				if o.Tools {
					opts.Tools = tools
				}
				if o.Documents {
					opts.Documents = docs
				}
				if o.Kwargs != nil {
					kw := decode(t, o.Kwargs).(*Dict)
					opts.Kwargs = map[string]any{}
					for _, k := range kw.keys {
						opts.Kwargs[k.(string)] = kw.m[k]
					}
				}
			}
			if !found {
				t.Fatalf("options %q not in conversations.json", c.Options)
			}
			opts.Now = now
			msgs := toMessages(t, decode(t, spec.Conversations[c.Conversation]))
			got, err := ct.Apply(msgs, opts)
			checkResult(t, c, got, err)
		})
	}
}

type featureCase struct {
	Name     string          `json:"name"`
	Template string          `json:"template"`
	Vars     json.RawMessage `json:"vars"`
}

// TestFeatureConformance checks the feature templates: features.json against
// transformers' own rendering, features_extra.json (cases added after that device run,
// many found by scripts/tmplref/fuzzdiff.py) against Jinja2 3.1.6, the version that
// transformers run used, in render.py's copy of transformers' environment.
func TestFeatureConformance(t *testing.T) {
	for _, base := range []string{"features", "features_extra"} {
		t.Run(base, func(t *testing.T) { testFeatures(t, base) })
	}
}

func testFeatures(t *testing.T, base string) {
	var features []featureCase
	readJSON(t, filepath.Join("testdata", base+".json"), &features)
	var ref refFile
	readJSON(t, filepath.Join(refDir(), base+"_reference.json"), &ref)
	now := refNow(t, ref)
	want := map[string]refCase{}
	for _, c := range ref.Cases {
		want[c.Name] = c
	}
	for _, f := range features {
		t.Run(f.Name, func(t *testing.T) {
			w, ok := want[f.Name]
			if !ok {
				t.Fatalf("no reference for %s: rerun scripts/tmplref", f.Name)
			}
			vars := map[string]any{}
			if f.Vars != nil {
				d := decode(t, f.Vars).(*Dict)
				for _, k := range d.keys {
					vars[k.(string)] = d.m[k]
				}
			}
			tmpl, err := Parse(f.Name, f.Template)
			if err != nil {
				checkResult(t, w, "", err)
				if !strings.Contains(err.Error(), f.Name) {
					t.Errorf("error %q does not name the template", err)
				}
				return
			}
			got, err := tmpl.render(vars, now)
			checkResult(t, w, got, err)
		})
	}
}

// classDefaults are special tokens transformers takes from a tokenizer class's defaults
// rather than from tokenizer_config.json; LoadChatTemplate cannot know them.
var classDefaults = map[string]map[string]bool{"gemma3": {"mask_token": true}}

func checkSpecialTokens(t *testing.T, model string, got, want map[string]string) {
	t.Helper()
	if want == nil {
		return
	}
	for name, w := range want {
		if g, ok := got[name]; ok || !classDefaults[model][name] {
			if g != w {
				t.Errorf("special token %s: got %q, transformers has %q", name, g, w)
			}
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("special token %s=%q is not in transformers' special_tokens_map", name, g)
		}
	}
}
