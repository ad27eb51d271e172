package parser

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
)

// hermesStage finds <tool_call>{json}</tool_call> in the content, and the XML form of the call inside the same
// tags (xmlcall.go). Whitespace next to a parsed call is layout and is dropped; a call that does not parse is
// given back as content together with the whitespace before it.
type hermesStage struct {
	types    map[string]map[string]string // the offered tools' parameter types (ParamTypes), for XML values
	glm      bool                         // GLM's key/value bodies (glm.go) besides JSON
	inCall   bool
	eatSpace bool   // just after a parsed call
	pending  string // whitespace held before the current call's tag
	buf      string
}

func (h *hermesStage) add(s string, done bool, r *Result) {
	h.buf += s
	var co strings.Builder
	defer func() { r.Content += co.String() }()
	for {
		if h.inCall {
			i := strings.Index(h.buf, toolClose)
			if i < 0 && !done {
				return
			}
			body, rest, raw := h.buf, "", toolOpen+h.buf
			if i >= 0 {
				body, rest, raw = h.buf[:i], h.buf[i+len(toolClose):], toolOpen+h.buf[:i+len(toolClose)]
			}
			call, ok := parseCall(body, nil)
			if !ok && h.glm {
				call, ok = parseGLMCall(body, h.types)
			} else if !ok {
				call, ok = parseXMLCall(body, h.types)
			}
			if ok {
				r.Calls = append(r.Calls, call)
				h.eatSpace = true
			} else {
				co.WriteString(h.pending)
				co.WriteString(raw)
				h.eatSpace = false
			}
			h.pending, h.buf, h.inCall = "", rest, false
			if done && rest == "" {
				return
			}
			continue
		}
		if h.eatSpace {
			h.buf = trimLeftSpace(h.buf)
			if h.buf == "" {
				return
			}
			h.eatSpace = false
		}
		if i := strings.Index(h.buf, toolOpen); i >= 0 {
			before := h.buf[:i]
			sp := trailingSpace(before)
			co.WriteString(before[:len(before)-sp])
			h.pending = before[len(before)-sp:]
			h.buf = h.buf[i+len(toolOpen):]
			h.inCall = true
			continue
		}
		if done {
			co.WriteString(h.buf)
			h.buf = ""
			return
		}
		keep := heldSuffix(h.buf, toolOpen)
		keep += trailingSpace(h.buf[:len(h.buf)-keep])
		co.WriteString(h.buf[:len(h.buf)-keep])
		h.buf = h.buf[len(h.buf)-keep:]
		return
	}
}

type llamaState int

const (
	llamaLook    llamaState = iota // leading whitespace so far
	llamaCollect                   // the reply starts with '{': hold it all until the end
	llamaText                      // plain content
)

// llamaStage recognizes Llama 3's JSON tool calls: a reply that is nothing but one or more
// {"name": …, "parameters": {…}} objects (after an optional <|python_tag|>). Such a reply can only be judged
// whole, so it is held until the end; any other reply streams as content at once.
type llamaStage struct {
	names []string
	state llamaState
	buf   string
}

func (l *llamaStage) add(s string, done bool, r *Result) {
	l.buf += s
	if l.state == llamaLook {
		trimmed := trimLeftSpace(l.buf)
		if after, ok := strings.CutPrefix(trimmed, pythonTag); ok {
			trimmed = trimLeftSpace(after)
		}
		switch {
		case strings.HasPrefix(trimmed, "{"):
			l.state = llamaCollect
		case (trimmed == "" || strings.HasPrefix(pythonTag, trimmed)) && !done:
			return
		default:
			l.state = llamaText
		}
	}
	if l.state == llamaText {
		r.Content += l.buf
		l.buf = ""
		return
	}
	if !done {
		return
	}
	if calls, ok := parseLlamaCalls(l.buf, l.names); ok {
		r.Calls = append(r.Calls, calls...)
	} else {
		r.Content += l.buf
	}
	l.buf = ""
}

// parseLlamaCalls parses a whole reply as calls separated by ';' or whitespace.
func parseLlamaCalls(s string, names []string) ([]ToolCall, bool) {
	s = trimLeftSpace(s)
	s = strings.TrimPrefix(s, pythonTag)
	dec := json.NewDecoder(strings.NewReader(s))
	var calls []ToolCall
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			break
		}
		call, ok := parseCall(string(raw), names)
		if !ok {
			return nil, false
		}
		calls = append(calls, call)
		// Skip separators between objects.
		rest := s[dec.InputOffset():]
		trimmed := strings.TrimLeft(rest, " \t\r\n;")
		if trimmed == "" {
			return calls, len(calls) > 0
		}
		if trimmed[0] != '{' {
			return nil, false
		}
		s = trimmed
		dec = json.NewDecoder(strings.NewReader(s))
	}
	return nil, false
}

// parseCall reads one {"name": …, "arguments"|"parameters": {…}} object. Arguments may also be given as a JSON
// string holding an object (some models do that); missing arguments are {}.
func parseCall(body string, names []string) (ToolCall, bool) {
	var c struct {
		Name       *string         `json:"name"`
		Arguments  json.RawMessage `json:"arguments"`
		Parameters json.RawMessage `json:"parameters"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &c); err != nil || c.Name == nil || *c.Name == "" {
		return ToolCall{}, false
	}
	if len(names) > 0 && !slices.Contains(names, *c.Name) {
		return ToolCall{}, false
	}
	args := c.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = c.Parameters
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage("{}")
	}
	if args[0] == '"' {
		var inner string
		if json.Unmarshal(args, &inner) != nil {
			return ToolCall{}, false
		}
		args = json.RawMessage(strings.TrimSpace(inner))
		if !json.Valid(args) {
			return ToolCall{}, false
		}
	}
	if len(args) == 0 || args[0] != '{' {
		return ToolCall{}, false
	}
	var out bytes.Buffer
	if json.Compact(&out, args) != nil {
		return ToolCall{}, false
	}
	return ToolCall{Name: *c.Name, Arguments: out.Bytes()}, true
}
