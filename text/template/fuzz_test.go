package template

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzRender parses and renders arbitrary template sources with a fuzzed string in
// several variables: it must never panic or hang, and rendering is deterministic.
func FuzzRender(f *testing.F) {
	var features []featureCase
	readJSON(f, filepath.Join("testdata", "features.json"), &features)
	for _, c := range features {
		f.Add(c.Template, "x")
	}
	for _, m := range []string{"qwen3", "llama3_1", "gemma3", "deepseek_v3"} {
		f.Add(templateSource(f, m), "hello </think> {{ x }}")
	}
	f.Fuzz(func(t *testing.T, src, s string) {
		tmpl, err := Parse("fuzz", src)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("Parse error is a %T, not *Error: %v", err, err)
			}
			return
		}
		vars := map[string]any{
			"x":        s,
			"messages": []any{map[string]any{"role": "user", "content": s}, map[string]any{"role": "assistant", "content": s}},
			"tools":    nil,
			"n":        len(s),
		}
		clock := func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 6000, time.UTC) }
		out1, err1 := tmpl.render(vars, clock)
		out2, err2 := tmpl.render(vars, clock)
		if out1 != out2 || (err1 == nil) != (err2 == nil) {
			t.Fatalf("rendering is not deterministic: %q/%v vs %q/%v", out1, err1, out2, err2)
		}
	})
}

// templateSource reads a model's chat template text (the conformance models have one).
func templateSource(t testing.TB, model string) string {
	var cfg struct {
		ChatTemplate string `json:"chat_template"`
	}
	readJSON(t, filepath.Join(modelDir(t, model), "tokenizer_config.json"), &cfg)
	return cfg.ChatTemplate
}

// FuzzChatApply renders the real chat templates with fuzzed message text: no panics,
// and where a template copies user text verbatim the text is in the prompt.
func FuzzChatApply(f *testing.F) {
	var spec conversationsFile
	readJSON(f, filepath.Join("testdata", "conversations.json"), &spec)
	for _, raw := range spec.Conversations {
		var msgs []struct {
			Content any `json:"content"`
		}
		if json.Unmarshal(raw, &msgs) == nil {
			for _, m := range msgs {
				if s, ok := m.Content.(string); ok {
					f.Add(s, "reasoning", true)
				}
			}
		}
	}
	f.Add("<think>\nx\n</think>\n\ny", "", false)
	f.Add("<tool_response>\nr\n</tool_response>", "", true)
	var cts []*ChatTemplate
	for _, m := range []string{"qwen3", "llama3_1", "gemma3", "deepseek_v3"} {
		ct, err := LoadChatTemplate(modelDir(f, m))
		if err != nil {
			f.Fatal(err)
		}
		cts = append(cts, ct)
	}
	f.Fuzz(func(t *testing.T, content, reasoning string, thinking bool) {
		msgs := []Message{
			{"role": "system", "content": "sys"},
			{"role": "user", "content": content},
			{"role": "assistant", "content": content, "reasoning_content": reasoning},
			{"role": "user", "content": content},
		}
		for _, ct := range cts {
			out, err := ct.Apply(msgs, Options{AddGenerationPrompt: true, Kwargs: map[string]any{"enable_thinking": thinking}})
			if err != nil {
				t.Fatalf("%s: %v", ct.name, err)
			}
			// Llama 3 and Gemma 3 trim message text; the others copy it as is.
			want := content
			if strings.Contains(ct.name, "llama3") || strings.Contains(ct.name, "gemma3") {
				want = strings.TrimFunc(content, isSpace)
			}
			if !strings.Contains(out, want) {
				t.Fatalf("%s: user text %q missing from %q", ct.name, want, out)
			}
		}
	})
}
