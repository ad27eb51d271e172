package parser

import (
	"bytes"
	"encoding/json"
	"strings"
)

// OpenAI's harmony format (gpt-oss). The assistant writes a sequence of messages, each a
// header and a body:
//
//	<|start|>assistant<|channel|>analysis<|message|>…<|end|>
//	<|start|>assistant<|channel|>final<|message|>…<|return|>
//	<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}<|call|>
//
// The rendered prompt ends with "<|start|>assistant", so the reply begins at its first
// header's <|channel|>. The channel says where the body goes: analysis is the model's
// reasoning (thinking), final is the answer (content), and commentary is either a
// preamble to the user (content) or, with a recipient ("to=functions.NAME", written in
// the header before or after the channel), a tool call whose body is its JSON arguments.
// The markers are special tokens, which the engine decodes for harmony models
// (runner.Request.SpecialTokens) so that they reach this parser; <|return|> and <|call|>
// end the generation and are not seen.

// The harmony markers.
const (
	harmonyStart   = "<|start|>"
	harmonyChannel = "<|channel|>"
	harmonyMessage = "<|message|>"
	harmonyEnd     = "<|end|>"
	harmonyReturn  = "<|return|>"
	harmonyCall    = "<|call|>"
)

// IsHarmony reports whether a chat template writes the harmony format.
func IsHarmony(chatTemplate string) bool {
	return strings.Contains(chatTemplate, harmonyChannel) && strings.Contains(chatTemplate, harmonyMessage)
}

// harmonyStage splits harmony output. It replaces both the thinking and the tool stage.
type harmonyStage struct {
	tools   bool // recognise tool calls (the request gave tools)
	header  bool // reading a header (until <|message|>)
	channel string
	to      string // the header's recipient, "" for none
	raw     string // the current header as written, given back if a call does not parse
	args    strings.Builder
	buf     string
}

func newHarmonyStage(tools bool) *harmonyStage { return &harmonyStage{tools: tools, header: true} }

func (h *harmonyStage) add(s string, done bool, r *Result) {
	h.buf += s
	var th, co strings.Builder
	defer func() { r.Thinking += th.String(); r.Content += co.String() }()
	for {
		if h.header {
			i := strings.Index(h.buf, harmonyMessage)
			if i < 0 {
				if trimmed := trimLeftSpace(h.buf); trimmed != "" && !strings.HasPrefix(trimmed, "<|") && !strings.HasPrefix("<|", trimmed) &&
					!strings.Contains(h.buf, harmonyChannel) && !strings.Contains(h.buf, harmonyStart) {
					// Text without a header (a template that opened the final channel itself,
					// or a model that skips it): content.
					h.header, h.channel, h.to, h.raw = false, "final", "", ""
					continue
				}
				if done {
					co.WriteString(h.buf) // an unfinished header: given back as it was
					h.buf = ""
					return
				}
				return
			}
			h.raw = h.buf[:i+len(harmonyMessage)]
			h.channel, h.to = parseHarmonyHeader(h.buf[:i])
			h.buf, h.header = h.buf[i+len(harmonyMessage):], false
			h.args.Reset()
			continue
		}
		// A body: up to the marker that ends it.
		end, next := -1, 0
		for _, m := range []string{harmonyEnd, harmonyReturn, harmonyCall, harmonyStart} {
			if i := strings.Index(h.buf, m); i >= 0 && (end < 0 || i < end) {
				end, next = i, i+len(m)
				if m == harmonyStart {
					next = i // the next header starts with it
				}
			}
		}
		body := h.buf
		if end >= 0 {
			body = h.buf[:end]
		} else if !done {
			keep := heldHarmony(h.buf)
			body = h.buf[:len(h.buf)-keep]
		}
		h.route(body, &th, &co)
		if end < 0 {
			h.buf = h.buf[len(body):]
			if done {
				h.finish(&co, r)
			}
			return
		}
		h.buf = h.buf[next:]
		h.finish(&co, r)
		h.header = true
	}
}

// route sends part of a body where its channel says.
func (h *harmonyStage) route(body string, th, co *strings.Builder) {
	switch {
	case h.call():
		h.args.WriteString(body)
	case h.channel == "analysis":
		th.WriteString(body)
	default: // final, a commentary preamble, or a channel this parser does not know
		co.WriteString(body)
	}
}

// call reports whether the current message is a tool call.
func (h *harmonyStage) call() bool { return h.tools && h.to != "" }

// finish ends the current message: a tool call's arguments become a call, or, when they
// are not a JSON object, content as written (header included).
func (h *harmonyStage) finish(co *strings.Builder, r *Result) {
	if !h.call() {
		return
	}
	args := strings.TrimSpace(h.args.String())
	var out bytes.Buffer
	if args == "" {
		args = "{}"
	}
	if json.Compact(&out, []byte(args)) == nil && out.Len() > 0 && out.Bytes()[0] == '{' {
		r.Calls = append(r.Calls, ToolCall{Name: strings.TrimPrefix(h.to, "functions."), Arguments: out.Bytes()})
	} else {
		co.WriteString(h.raw)
		co.WriteString(h.args.String())
	}
	h.args.Reset()
	h.to = ""
}

// parseHarmonyHeader reads a header ("<|start|>assistant to=functions.f<|channel|>commentary
// <|constrain|>json", or part of one): its channel and recipient.
func parseHarmonyHeader(hd string) (channel, to string) {
	if i := strings.Index(hd, harmonyChannel); i >= 0 {
		rest := hd[i+len(harmonyChannel):]
		channel = rest[:fieldEnd(rest)]
	}
	if i := strings.Index(hd, "to="); i >= 0 {
		rest := hd[i+len("to="):]
		to = rest[:fieldEnd(rest)]
	}
	return channel, to
}

// fieldEnd is where a header's word ends: at a space or the next marker.
func fieldEnd(s string) int {
	for i := 0; i < len(s); i++ {
		if isSpace(s[i]) || strings.HasPrefix(s[i:], "<|") {
			return i
		}
	}
	return len(s)
}

// heldHarmony is how much of the end of a body may be the start of a marker: from a
// trailing "<|" not yet closed by "|>", or a last "<".
func heldHarmony(s string) int {
	if i := strings.LastIndex(s, "<|"); i >= 0 && !strings.Contains(s[i:], "|>") && len(s)-i <= len("<|constrain|>") {
		return len(s) - i
	}
	if strings.HasSuffix(s, "<") {
		return 1
	}
	return 0
}
