package parser

import (
	"reflect"
	"strings"
	"testing"
)

// Transcripts of Gemma 4 model turns written from Google's guide to function calling
// with Gemma 4 (ai.google.dev, "Function calling with Gemma 4"): the reasoning channel
// <|channel>thought … <channel|>, calls <|tool_call>call:NAME{…}<tool_call|> with keys bare
// and strings between <|"|> markers, numbers and booleans bare. <turn|> ends the turn and
// the generation, so the parser sees what comes before it.
var gemma4Cases = []struct {
	name string
	mode string // "tools": the request gave tools; "thought": the prompt opened the reasoning channel
	out  string
	want Result
}{
	{"the guide's call", "tools",
		`<|tool_call>call:get_current_temperature{location:<|"|>London<|"|>}<tool_call|>`,
		Result{Calls: []ToolCall{{Name: "get_current_temperature", Arguments: []byte(`{"location":"London"}`)}}}},
	{"reasoning, then a call with a number, a boolean and an enum string", "tools",
		"<|channel>thought\nThe user wants the temperature in Paris in celsius. I should call get_current_temperature.<channel|>" +
			`<|tool_call>call:get_current_temperature{location:<|"|>Paris, France<|"|>,unit:<|"|>celsius<|"|>,days:3,detailed:true}<tool_call|>`,
		Result{Thinking: "The user wants the temperature in Paris in celsius. I should call get_current_temperature.",
			Calls: []ToolCall{{Name: "get_current_temperature", Arguments: []byte(`{"location":"Paris, France","unit":"celsius","days":3,"detailed":true}`)}}}},
	{"two calls, nested object and list", "tools",
		`<|tool_call>call:search{query:<|"|>mlx, "fast"<|"|>,filters:{lang:<|"|>en<|"|>,year:2026},tags:[<|"|>a<|"|>,<|"|>b<|"|>],limit:-1.5,cursor:null}<tool_call|>` +
			`<|tool_call>call:noop{}<tool_call|>`,
		Result{Calls: []ToolCall{
			{Name: "search", Arguments: []byte(`{"query":"mlx, \"fast\"","filters":{"lang":"en","year":2026},"tags":["a","b"],"limit":-1.5,"cursor":null}`)},
			{Name: "noop", Arguments: []byte(`{}`)}}}},
	{"answer after reasoning", "",
		"<|channel>thought\nSimple arithmetic.\n<channel|>\n\n2 + 2 = 4.",
		Result{Thinking: "Simple arithmetic.", Content: "2 + 2 = 4."}},
	{"answer only (thinking off)", "", "Hello <b>there</b> <| not a marker", Result{Content: "Hello <b>there</b> <| not a marker"}},
	{"text before a call", "tools",
		`Let me check.<|tool_call>call:get_weather{city:<|"|>Tokyo<|"|>}<tool_call|>`,
		Result{Content: "Let me check.", Calls: []ToolCall{{Name: "get_weather", Arguments: []byte(`{"city":"Tokyo"}`)}}}},
	{"a prompt that opened the reasoning channel", "thought",
		"Still thinking.<channel|>Done.", Result{Thinking: "Still thinking.", Content: "Done."}},
	{"a call that does not parse is content", "tools",
		`<|tool_call>call:get_weather{city:<|"|>Tokyo}<tool_call|>`,
		Result{Content: `<|tool_call>call:get_weather{city:<|"|>Tokyo}<tool_call|>`}},
	{"an unfinished call is content", "tools",
		`<|tool_call>call:get_weather{city:`, Result{Content: `<|tool_call>call:get_weather{city:`}},
	{"calls without tools in the request are content", "",
		`<|tool_call>call:f{a:1}<tool_call|>`, Result{Content: `<|tool_call>call:f{a:1}<tool_call|>`}},
	{"unfinished reasoning", "",
		"<|channel>thought\nHmm, let me", Result{Thinking: "Hmm, let me"}},
}

// TestGemma4 parses each transcript whole, in every split into two pieces, and one byte
// at a time: the same thinking, content and calls, nothing dropped or repeated.
func TestGemma4(t *testing.T) {
	for _, c := range gemma4Cases {
		cfg := Config{Gemma4: true, Thinking: true, InThinking: c.mode == "thought"}
		if c.mode == "tools" {
			cfg.Tools = ToolsGemma4
		}
		check := func(how string, pieces []string) {
			t.Helper()
			got := feed(cfg, pieces)
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

// TestGemma4StreamsIncrementally: reasoning and content come out as they are written,
// holding back only what may be a marker.
func TestGemma4StreamsIncrementally(t *testing.T) {
	p := New(Config{Gemma4: true, Thinking: true, Tools: ToolsGemma4})
	if r := p.Add("<|channel>thought\nLet me think", false); r.Thinking != "Let me think" {
		t.Fatalf("thinking so far %q", r.Thinking)
	}
	if r := p.Add(" more<chan", false); r.Thinking != " more" {
		t.Fatalf("thinking before a partial marker: %q", r.Thinking)
	}
	if r := p.Add("nel|>It is <|tool", false); r.Thinking != "" || r.Content != "It is " {
		t.Fatalf("after the reasoning: %+v", r)
	}
	if r := p.Add(`_call>call:f{x:1}<tool_call|>`, false); r.Content != "" || len(r.Calls) != 1 || string(r.Calls[0].Arguments) != `{"x":1}` {
		t.Fatalf("the call: %+v", r)
	}
	if r := p.Add("", true); !reflect.DeepEqual(r, Result{}) {
		t.Fatalf("at the end: %+v", r)
	}
}

// A template in Gemma 4's format (its markers, as Google's chat template writes them) is
// detected with thinking and tools; the rendered prompt that opens the reasoning channel
// starts the output inside it, the one that closes an empty channel (thinking off) does not.
func TestDetectGemma4(t *testing.T) {
	tmpl := `{{- '<|turn>system\n' -}}{%- if enable_thinking -%}{{- '<|think|>' -}}{%- endif -%}` +
		`{{- '<|tool_call>call:' + function['name'] + '{' -}}{{- '<|turn>model\n' -}}` +
		`{%- if not enable_thinking -%}{{- '<|channel>thought\n<channel|>' -}}{%- endif -%}`
	if c := Detect(tmpl); !c.Gemma4 || !c.Thinking || c.Tools != ToolsGemma4 || c.Harmony {
		t.Fatalf("Detect: %+v", c)
	}
	if c := Detect(`{{ '<start_of_turn>model\n' }}`); c.Gemma4 {
		t.Fatalf("Gemma 3's template detected as Gemma 4's: %+v", c)
	}
	for s, want := range map[string]bool{
		"<|turn>model\n<|channel>thought\n":           true,
		"<|turn>model\n<|channel>thought\n<channel|>": false,
		"<|turn>model\n":                              false,
	} {
		if got := PromptOpensThinking(s); got != want {
			t.Errorf("PromptOpensThinking(%q) = %v", s, got)
		}
	}
}

func TestGemma4Value(t *testing.T) {
	for in, want := range map[string]string{
		`{a:1,b:<|"|>x<|"|>}`:                     `{"a":1,"b":"x"}`,
		`{ a : [ 1 , 2 ] , "b": "q\"" }`:          `{"a":[1,2],"b":"q\""}`,
		`{<|"|>key with space<|"|>:true}`:         `{"key with space":true}`,
		`{unit:celsius}`:                          `{"unit":"celsius"}`,
		`{text:<|"|>line1` + "\n" + `line2<|"|>}`: `{"text":"line1\nline2"}`,
	} {
		got, err := Gemma4Value(in)
		if err != nil || string(got) != want {
			t.Errorf("Gemma4Value(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{`{a:}`, `{a:1`, `{a 1}`, `{a:1}}`, `[1,,2]`, `{a:<|"|>x}`} {
		if got, err := Gemma4Value(bad); err == nil {
			t.Errorf("Gemma4Value(%q) = %s, want an error", bad, got)
		}
	}
	if strings.Contains(ToolsGemma4.String(), "none") {
		t.Error("ToolsGemma4 has no name")
	}
}
