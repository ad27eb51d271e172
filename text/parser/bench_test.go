package parser

import (
	"strings"
	"testing"
)

// BenchmarkParser feeds a long reply with thinking and tool calls in 4-byte pieces (about a token each).
func BenchmarkParser(b *testing.B) {
	reply := "<think>\n" + strings.Repeat("Let me think about the weather in Paris. ", 200) + "</think>\n\n" +
		strings.Repeat("It is sunny today, with a light breeze. ", 200) +
		`<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}</tool_call>`
	var pieces []string
	for i := 0; i < len(reply); i += 4 {
		pieces = append(pieces, reply[i:min(i+4, len(reply))])
	}
	b.SetBytes(int64(len(reply)))
	for b.Loop() {
		p := New(Config{Thinking: true, Tools: ToolsHermes})
		calls := 0
		for _, s := range pieces {
			calls += len(p.Add(s, false).Calls)
		}
		calls += len(p.Add("", true).Calls)
		if calls != 1 {
			b.Fatalf("%d calls", calls)
		}
	}
}
