package parser

import (
	"reflect"
	"testing"
)

// Transcripts of assistant output in OpenAI's harmony format as its public documentation
// defines it (the rendered prompt ends with "<|start|>assistant"; <|return|> and <|call|>
// end the generation, so the parser sees what comes before them).
var harmonyCases = []struct {
	name  string
	tools bool
	out   string
	want  Result
}{
	{"reasoning then answer", false,
		"<|channel|>analysis<|message|>User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.<|end|>" +
			"<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.",
		Result{Thinking: "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.", Content: "2 + 2 = 4."}},
	{"tool call, recipient in the channel header", true,
		"<|channel|>analysis<|message|>Need to use function get_current_weather.<|end|>" +
			"<|start|>assistant<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>{\"location\":\"San Francisco\"}",
		Result{Thinking: "Need to use function get_current_weather.",
			Calls: []ToolCall{{Name: "get_current_weather", Arguments: []byte(`{"location":"San Francisco"}`)}}}},
	{"tool call, recipient in the role header", true,
		"<|channel|>analysis<|message|>Look it up.<|end|>" +
			"<|start|>assistant to=functions.lookup<|channel|>commentary json<|message|>{\"q\": \"mlx\", \"n\": 3}",
		Result{Thinking: "Look it up.", Calls: []ToolCall{{Name: "lookup", Arguments: []byte(`{"q":"mlx","n":3}`)}}}},
	{"preamble before a call", true,
		"<|channel|>analysis<|message|>Plan.<|end|><|start|>assistant<|channel|>commentary<|message|>**Action plan**: check the weather.<|end|>" +
			"<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}",
		Result{Thinking: "Plan.", Content: "**Action plan**: check the weather.", Calls: []ToolCall{{Name: "get_weather", Arguments: []byte(`{}`)}}}},
	{"arguments that are not JSON are content", true,
		"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops",
		Result{Content: "<|channel|>commentary to=functions.f <|constrain|>json<|message|>{oops"}},
	{"calls without tools in the request are content", false,
		"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}",
		Result{Content: "{\"a\":1}"}},
	{"final only", false, "<|channel|>final<|message|>Hello <there> <| not a marker", Result{Content: "Hello <there> <| not a marker"}},
	{"no header", false, "Just text.", Result{Content: "Just text."}},
}

// TestHarmony parses each transcript whole and in every split into two pieces, and one
// byte at a time: the same thinking, content and calls, nothing dropped or repeated.
func TestHarmony(t *testing.T) {
	for _, c := range harmonyCases {
		cfg := Config{Harmony: true, Thinking: true}
		if c.tools {
			cfg.Tools = ToolsHarmony
		}
		check := func(how string, pieces []string) {
			t.Helper()
			p := New(cfg)
			var got Result
			for i, s := range pieces {
				r := p.Add(s, i == len(pieces)-1)
				got.Thinking += r.Thinking
				got.Content += r.Content
				got.Calls = append(got.Calls, r.Calls...)
			}
			if got.Thinking != c.want.Thinking || got.Content != c.want.Content || !callsEqual(got.Calls, c.want.Calls) {
				t.Errorf("%s (%s): got thinking %q content %q calls %s; want %q %q %s", c.name, how, got.Thinking, got.Content, fmtCalls(got.Calls),
					c.want.Thinking, c.want.Content, fmtCalls(c.want.Calls))
			}
		}
		check("whole", []string{c.out})
		check("whole, then end", []string{c.out, ""})
		for i := 1; i < len(c.out); i++ {
			check("split", []string{c.out[:i], c.out[i:]})
		}
		bytes := make([]string, 0, len(c.out)+1)
		for i := range c.out {
			bytes = append(bytes, c.out[i:i+1])
		}
		check("bytes", append(bytes, ""))
	}
}

// TestHarmonyStreamsIncrementally: thinking and content come out as they are written,
// before their message ends, holding back only what may be a marker.
func TestHarmonyStreamsIncrementally(t *testing.T) {
	p := New(Config{Harmony: true, Thinking: true})
	if r := p.Add("<|channel|>analysis<|message|>Let me think", false); r.Thinking != "Let me think" {
		t.Fatalf("thinking so far %q", r.Thinking)
	}
	if r := p.Add(" more<|e", false); r.Thinking != " more" {
		t.Fatalf("thinking before a partial marker: %q", r.Thinking)
	}
	if r := p.Add("nd|><|start|>assistant<|channel|>final<|message|>Hi", false); r.Thinking != "" || r.Content != "Hi" {
		t.Fatalf("after the analysis message: %+v", r)
	}
	if r := p.Add("", true); !reflect.DeepEqual(r, Result{}) {
		t.Fatalf("at the end: %+v", r)
	}
}

func TestDetectHarmony(t *testing.T) {
	tmpl := `{{- "<|start|>assistant<|channel|>final<|message|>" }}`
	if c := Detect(tmpl); !c.Harmony || !c.Thinking || c.Tools != ToolsHarmony {
		t.Fatalf("Detect: %+v", c)
	}
}

func callsEqual(a, b []ToolCall) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || string(a[i].Arguments) != string(b[i].Arguments) {
			return false
		}
	}
	return true
}
