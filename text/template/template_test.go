package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/internal/testdata"
)

func render(t *testing.T, src string, vars map[string]any) string {
	t.Helper()
	tmpl, err := Parse("test", src)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.Render(vars)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestErrorsNameTemplateAndLine(t *testing.T) {
	cases := []struct {
		src      string
		line     int
		raised   bool
		contains string
	}{
		{"a\n{% if true %}\n  {{ raise_exception('bad roles') }}\n{% endif %}", 3, true, "bad roles"},
		{"a\nb\n{{ x|nosuchfilter }}", 3, false, "no filter named 'nosuchfilter'"},
		{"{% for m in messages %}\n{% endfor %}\n{{ 1 +\n 'a' }}", 3, false, "unsupported operand"},
		{"line1\n{% for x in y %}\nno end", 3, false, "expected 'else' or 'endfor'"},
		{"{{ 'unterminated }}", 1, false, "never closed"},
		{"{% set x = {'a': 1} %}\n\n{{ x.a.b.c }}", 3, false, "'int object' has no attribute 'b'"},
		{"{% for x in y %}{% endfor %}\n{% break %}", 2, false, "'break' outside of a loop"},
		{"{% for x in y %}{% macro m() %}\n{% continue %}{% endmacro %}{% endfor %}", 2, false, "'continue' outside of a loop"},
	}
	for _, c := range cases {
		tmpl, err := Parse("models/demo", c.src)
		if err == nil {
			_, err = tmpl.Render(nil)
		}
		var te *Error
		if !errors.As(err, &te) {
			t.Fatalf("%q: want *Error, got %v", c.src, err)
		}
		if te.Line != c.line || te.Raised != c.raised || te.Template != "models/demo" || !strings.Contains(te.Msg, c.contains) {
			t.Errorf("%q: got line %d raised %v template %q msg %q; want line %d raised %v msg containing %q",
				c.src, te.Line, te.Raised, te.Template, te.Msg, c.line, c.raised, c.contains)
		}
		if !strings.Contains(err.Error(), "models/demo") || !strings.Contains(err.Error(), fmt.Sprintf("line %d", c.line)) {
			t.Errorf("%q: message %q does not name the template and line", c.src, err)
		}
	}
}

func TestChatTemplateSelectionAndOptions(t *testing.T) {
	ct, err := NewChatTemplate("demo", map[string]string{
		"default":  "D:{{ messages|length }}{{ tools }}{{ documents }}{{ bos_token }}{{ flag|default('-') }}",
		"tool_use": "T:{{ tools|tojson }}{{ add_generation_prompt }}",
	}, map[string]string{"bos_token": "<s>"})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{"role": "user", "content": "hi"}}
	got, err := ct.Apply(msgs, Options{})
	if err != nil || got != "D:1NoneNone<s>-" {
		t.Fatalf("default template: %q, %v", got, err)
	}
	got, err = ct.Apply(msgs, Options{Kwargs: map[string]any{"flag": 7, "bos_token": "[override]"}})
	if err != nil || got != "D:1NoneNone[override]7" {
		t.Fatalf("kwargs: %q, %v", got, err)
	}
	tool := json.RawMessage(`{"type":"function","function":{"name":"f","parameters":{"z":1,"a":2.0}}}`)
	got, err = ct.Apply(msgs, Options{Tools: []any{tool}, AddGenerationPrompt: true})
	want := `T:[{"type": "function", "function": {"name": "f", "parameters": {"z": 1, "a": 2.0}}}]True`
	if err != nil || got != want {
		t.Fatalf("tool_use template:\n got %q, %v\nwant %q", got, err, want)
	}
	if _, err := ct.Apply(msgs, Options{Kwargs: map[string]any{"messages": 1}}); err == nil {
		t.Fatal("a kwarg named messages must be refused")
	}
	if _, err := ct.Apply(msgs, Options{Documents: []any{"not an object"}}); err == nil {
		t.Fatal("a document that is not an object must be refused")
	}
	if ct.BOS() != "<s>" || ct.EOS() != "" {
		t.Fatalf("BOS/EOS: %q %q", ct.BOS(), ct.EOS())
	}
}

func TestLoadChatTemplateSources(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LoadChatTemplate(dir); err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a directory without a template must fail naming it, got %v", err)
	}
	write("tokenizer_config.json", `{"bos_token": {"content": "<b>", "__type": "AddedToken"}, "eos_token": "<e>",
		"chat_template": [{"name": "default", "template": "cfg {{ bos_token }}{{ eos_token }}"}]}`)
	ct, err := LoadChatTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ct.Apply(nil, Options{}); got != "cfg <b><e>" {
		t.Fatalf("tokenizer_config template: %q", got)
	}
	write("chat_template.jinja", "jinja {{ eos_token }}\n")
	ct, err = LoadChatTemplate(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := ct.Apply(nil, Options{}); got != "jinja <e>" {
		t.Fatalf("chat_template.jinja must win: %q", got)
	}
	write("chat_template.jinja", "{% if %}")
	if _, err := LoadChatTemplate(dir); err == nil || !strings.Contains(err.Error(), "chat_template.jinja, line 1") {
		t.Fatalf("a broken template must fail naming its file and line, got %v", err)
	}
}

func TestStrftimeNowUsesOptionsClock(t *testing.T) {
	ct, err := NewChatTemplate("clock", map[string]string{"default": `{{ strftime_now("%d %b %Y %-H:%M") }}`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2024, 3, 5, 7, 8, 9, 0, time.UTC)
	got, err := ct.Apply(nil, Options{Now: func() time.Time { return now }})
	if err != nil || got != "05 Mar 2024 7:08" {
		t.Fatalf("got %q, %v", got, err)
	}
}

type toolSchema struct {
	Name   string  `json:"name"`
	Weight float64 `json:"weight"`
	Count  int     `json:"count"`
}

func TestGoValuesConvertAsPython(t *testing.T) {
	vars := map[string]any{
		"m":      map[string]any{"b": 1, "a": []string{"x", "y"}},
		"s":      toolSchema{Name: "n", Weight: 0.5, Count: 3},
		"f":      float32(2),
		"u":      uint8(7),
		"raw":    json.RawMessage(`{"z": 1, "a": 1.0, "n": null}`),
		"nilmap": map[string]int(nil),
	}
	got := render(t, "{{ m|tojson }}|{{ s|tojson }}|{{ f }}|{{ u }}|{{ raw|tojson }}|{{ nilmap }}", vars)
	want := `{"a": ["x", "y"], "b": 1}|{"name": "n", "weight": 0.5, "count": 3}|2.0|7|{"z": 1, "a": 1.0, "n": null}|None`
	if got != want {
		t.Fatalf("\n got %q\nwant %q", got, want)
	}
}

func TestDecodeJSON(t *testing.T) {
	v, err := DecodeJSON([]byte(`{"b": [1, 2.5, 1e2, -0, "s", true, null], "a": {}}`))
	if err != nil {
		t.Fatal(err)
	}
	d := v.(*Dict)
	if strings.Join(d.Keys(), ",") != "b,a" {
		t.Fatalf("key order: %v", d.Keys())
	}
	if got := pyRepr(v); got != "{'b': [1, 2.5, 100.0, 0, 's', True, None], 'a': {}}" {
		t.Fatalf("values: %s", got)
	}
	for _, bad := range []string{`{"a": }`, `[1] 2`, ``, `{1: 2}`} {
		if _, err := DecodeJSON([]byte(bad)); err == nil {
			t.Errorf("DecodeJSON(%q) must fail", bad)
		}
	}
}

func TestFloatRepr(t *testing.T) {
	for f, want := range map[float64]string{
		1: "1.0", 0.1: "0.1", 1e16: "1e+16", 1e15: "1000000000000000.0", 1e-4: "0.0001", 1e-5: "1e-05",
		-2.5e-7: "-2.5e-07", 123456789.125: "123456789.125", 1.7976931348623157e308: "1.7976931348623157e+308",
		5e-324: "5e-324", 0.30000000000000004: "0.30000000000000004",
	} {
		if got := floatRepr(f); got != want {
			t.Errorf("floatRepr(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestLimits(t *testing.T) {
	if _, err := Parse("deep", "{{ "+strings.Repeat("(", 5000)+"1"+strings.Repeat(")", 5000)+" }}"); err == nil {
		t.Error("deeply nested parentheses must be refused")
	}
	if _, err := Parse("deep", strings.Repeat("{% if x %}", 1000)+strings.Repeat("{% endif %}", 1000)); err == nil {
		t.Error("deeply nested blocks must be refused")
	}
	for _, src := range []string{
		"{{ 'x' * 100000000 }}",
		"{{ [1, 2] * 4611686018427387904 }}",
		"{{ 'x'|center(1000000000) }}",
		"{{ 'x'.zfill(1000000000) }}",
		"{{ '{:>1000000000}'.format(1) }}",
		"{{ '%1000000000d'|format(1) }}",
		"{{ [1]|batch(1000000000, 0)|list }}",
		"{{ [1]|slice(1000000000)|list }}",
		"{{ 'a\nb'|indent(1000000000) }}",
		"{{ 1|tojson(indent=1000000000) }}",
		"{{ 'ab' * 4611686018427387904 }}",
		"{% macro r() %}{{ r() }}{% endmacro %}{{ r() }}",
		"{% for i in range(1000000) %}{% endfor %}",
		"{% set s = 'x' * 1000000 %}{% for i in range(100) %}{{ s }}{% endfor %}",
	} {
		tmpl, err := Parse("limits", src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tmpl.Render(nil); err == nil {
			t.Errorf("%q: want an error from a limit", src)
		}
	}
}

// benchConversation is the 50-message conversation of testdata/conversations.json.
func benchConversation(b *testing.B) []Message {
	var spec conversationsFile
	readJSON(b, filepath.Join("testdata", "conversations.json"), &spec)
	return toMessages(b, decode(b, spec.Conversations["fifty-messages"]))
}

func BenchmarkApplyQwen3FiftyMessages(b *testing.B) {
	ct, err := LoadChatTemplate(testdata.Tokenizer(b, "qwen3"))
	if err != nil {
		b.Fatal(err)
	}
	msgs := benchConversation(b)
	out, err := ct.Apply(msgs, Options{AddGenerationPrompt: true})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ct.Apply(msgs, Options{AddGenerationPrompt: true}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseQwen3(b *testing.B) {
	dir := testdata.Tokenizer(b, "qwen3")
	for b.Loop() {
		if _, err := LoadChatTemplate(dir); err != nil {
			b.Fatal(err)
		}
	}
}

// TestConcurrentApply renders one parsed template from several goroutines (run with
// -race): a ChatTemplate is shared by all requests for its model.
func TestConcurrentApply(t *testing.T) {
	ct, err := LoadChatTemplate(testdata.Tokenizer(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	msgs := []Message{{"role": "system", "content": "s"}, {"role": "user", "content": "u"}}
	want, err := ct.Apply(msgs, Options{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		go func() {
			for i := 0; i < 20; i++ {
				got, err := ct.Apply(msgs, Options{AddGenerationPrompt: true})
				if err == nil && got != want {
					err = fmt.Errorf("concurrent render differs: %q", got)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for g := 0; g < 8; g++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
