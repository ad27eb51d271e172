package parser

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Mistral's tags. They are special tokens of the tokenizer (tekken's control tokens), so they are text here
// only when the decoder keeps special tokens (Capabilities.SpecialTags).
const (
	MistralThinkOpen  = "[THINK]"
	MistralThinkClose = "[/THINK]"
	mistralCalls      = "[TOOL_CALLS]"
	mistralArgs       = "[ARGS]"
	mistralCallID     = "[CALL_ID]"
)

// mistralStage finds Mistral's tool calls in the content. Each call opens with [TOOL_CALLS]:
//
//	[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]get_time[ARGS]{}
//
// as tokenizer v11 and later write them (Mistral Small 3.2, Magistral, Devstral, Ministral 3; a [CALL_ID]id
// between the name and [ARGS] is allowed and dropped), or the older JSON list of v3 to v7 (Mistral 7B v0.3,
// NeMo, Mistral Small 3.1):
//
//	[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]
//
// Content before the first [TOOL_CALLS] streams; from there a call is parsed once the next [TOOL_CALLS] or the
// end of the reply closes it. Whitespace next to a parsed call is layout and is dropped; a call that does not
// parse is given back as content, tag included, with the whitespace before it.
type mistralStage struct {
	inCall  bool   // buf is a call's body (after its [TOOL_CALLS])
	pending string // whitespace held before the current call's tag
	buf     string
}

func (m *mistralStage) add(s string, done bool, r *Result) {
	m.buf += s
	var co strings.Builder
	defer func() { r.Content += co.String() }()
	for {
		if m.inCall {
			i := strings.Index(m.buf, mistralCalls)
			if i < 0 && !done {
				return
			}
			body, rest := m.buf, ""
			if i >= 0 {
				body, rest = m.buf[:i], m.buf[i:]
			}
			if calls, ok := parseMistralCalls(body); ok {
				r.Calls = append(r.Calls, calls...)
			} else {
				co.WriteString(m.pending)
				co.WriteString(mistralCalls + body)
			}
			m.pending, m.inCall = "", false
			m.buf = rest
			if rest == "" {
				return
			}
			continue
		}
		if i := strings.Index(m.buf, mistralCalls); i >= 0 {
			before := m.buf[:i]
			sp := trailingSpace(before)
			co.WriteString(before[:len(before)-sp])
			m.pending = before[len(before)-sp:]
			m.buf = m.buf[i+len(mistralCalls):]
			m.inCall = true
			continue
		}
		if done {
			co.WriteString(m.buf)
			m.buf = ""
			return
		}
		keep := heldSuffix(m.buf, mistralCalls)
		keep += trailingSpace(m.buf[:len(m.buf)-keep])
		co.WriteString(m.buf[:len(m.buf)-keep])
		m.buf = m.buf[len(m.buf)-keep:]
		return
	}
}

// parseMistralCalls reads the body of one [TOOL_CALLS]: name[ARGS]{…} (possibly several, back to back), or a
// JSON list of {"name", "arguments"} objects, or one such object.
func parseMistralCalls(body string) ([]ToolCall, bool) {
	s := strings.TrimSpace(body)
	if strings.HasPrefix(s, "[") || strings.HasPrefix(s, "{") {
		var list []json.RawMessage
		if s[0] == '{' {
			list = []json.RawMessage{json.RawMessage(s)}
		} else if json.Unmarshal([]byte(s), &list) != nil || len(list) == 0 {
			return nil, false
		}
		calls := make([]ToolCall, 0, len(list))
		for _, raw := range list {
			c, ok := parseCall(string(raw), nil)
			if !ok {
				return nil, false
			}
			calls = append(calls, c)
		}
		return calls, true
	}
	var calls []ToolCall
	for s != "" {
		name, args, ok := strings.Cut(s, mistralArgs)
		if !ok {
			return nil, false
		}
		name, _, _ = strings.Cut(name, mistralCallID)
		name = strings.TrimSpace(name)
		if name == "" || strings.ContainsAny(name, " \t\r\n{}[]\"") {
			return nil, false
		}
		dec := json.NewDecoder(strings.NewReader(args))
		var raw json.RawMessage
		if dec.Decode(&raw) != nil {
			return nil, false
		}
		raw = bytes.TrimSpace(raw)
		if len(raw) == 0 || raw[0] != '{' {
			return nil, false
		}
		var out bytes.Buffer
		if json.Compact(&out, raw) != nil {
			return nil, false
		}
		calls = append(calls, ToolCall{Name: name, Arguments: out.Bytes()})
		s = strings.TrimSpace(args[dec.InputOffset():])
	}
	return calls, len(calls) > 0
}

// MistralCallIDs rewrites the tool-call ids of messages (the maps a chat template reads) into what
// Mistral's templates require: nine letters and digits, raising otherwise (Mistral 7B v0.3, NeMo, Small 3.1
// write them into the prompt beside each call and its result). An id becomes a hash of itself, so a
// conversation renders the same way on every turn (the prefix cache keeps hitting) whatever form the client
// gave its ids in; a call without one gets one from its place in the conversation, and a tool result
// without a tool_call_id takes the id of the next unanswered call before it.
func MistralCallIDs(messages []map[string]any) {
	var open []string // the latest assistant turn's calls not yet answered
	for i, m := range messages {
		if calls, ok := m["tool_calls"].([]any); ok {
			open = open[:0]
			for j, c := range calls {
				call, ok := c.(map[string]any)
				if !ok {
					continue
				}
				id, _ := call["id"].(string)
				if id == "" {
					id = fmt.Sprintf("message %d call %d", i, j)
				}
				call["id"] = mistralID(id)
				open = append(open, call["id"].(string))
			}
		}
		if m["role"] != "tool" && m["role"] != "tool_results" {
			continue
		}
		if id, _ := m["tool_call_id"].(string); id != "" {
			m["tool_call_id"] = mistralID(id)
			if k := slices.Index(open, m["tool_call_id"].(string)); k >= 0 {
				open = slices.Delete(open, k, k+1)
			}
		} else if len(open) > 0 {
			m["tool_call_id"], open = open[0], open[1:]
		}
	}
}

// mistralID is nine base-62 digits of the SHA-256 of id.
func mistralID(id string) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	sum := sha256.Sum256([]byte(id))
	out := make([]byte, 9)
	for i := range out {
		out[i] = digits[int(sum[i])%len(digits)]
	}
	return string(out)
}
