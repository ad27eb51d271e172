package parser

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
)

// Gemma 4's output format (the chat template of google/gemma-4-*, described in Google's
// function-calling guide for Gemma 4). A model turn is
//
//	<|channel>thought
//	…reasoning…<channel|>the answer
//
// with the reasoning channel only when thinking is on (the template's generation prompt
// closes an empty one itself when it is off), and tool calls written as
//
//	<|tool_call>call:get_weather{location:<|"|>London<|"|>,days:3}<tool_call|>
//
// that is a function name and its arguments in Gemma's own notation, not JSON: keys
// bare, strings between <|"|> markers, numbers, booleans and null bare, objects in
// braces and lists in brackets. The markers are special tokens, which the engine
// decodes for Gemma 4 models (runner.Request.SpecialTokens) so that they reach this
// parser.

// The Gemma 4 markers.
const (
	gemma4Turn      = "<|turn>"
	gemma4ChanOpen  = "<|channel>"
	gemma4ChanClose = "<channel|>"
	gemma4CallOpen  = "<|tool_call>"
	gemma4CallClose = "<tool_call|>"
	gemma4Quote     = `<|"|>`
	gemma4Think     = "<|think|>"
)

// Gemma4ThoughtOpen and Gemma4ThoughtClose bracket Gemma 4's reasoning, as <think> and
// </think> do other models' (a constraint on the answer starts after them).
const (
	Gemma4ThoughtOpen  = gemma4ChanOpen + "thought\n"
	Gemma4ThoughtClose = gemma4ChanClose
)

// IsGemma4 reports whether a chat template writes Gemma 4's format.
func IsGemma4(chatTemplate string) bool {
	return strings.Contains(chatTemplate, gemma4Turn) &&
		(strings.Contains(chatTemplate, gemma4ChanOpen) || strings.Contains(chatTemplate, gemma4CallOpen))
}

type gemma4State int

const (
	g4Content      gemma4State = iota
	g4Channel                  // after <|channel>: its name, up to the end of the line
	g4ThoughtStart             // the whitespace that starts the reasoning is layout
	g4Thought                  // inside the reasoning channel
	g4AfterChan                // after <channel|>: the whitespace before the answer is layout
	g4Call                     // inside <|tool_call>…<tool_call|>
)

// gemma4Stage splits Gemma 4 output. It replaces both the thinking and the tool stage:
// the reasoning channel is thinking whatever Config.Thinking says (its text is never the
// answer), and tool calls are recognised when the request gave tools.
type gemma4Stage struct {
	tools bool
	state gemma4State
	buf   string
}

func newGemma4Stage(tools, inThought bool) *gemma4Stage {
	g := &gemma4Stage{tools: tools}
	if inThought {
		g.state = g4ThoughtStart
	}
	return g
}

func (g *gemma4Stage) add(s string, done bool, r *Result) {
	g.buf += s
	var th, co strings.Builder
	defer func() { r.Thinking += th.String(); r.Content += co.String() }()
	for {
		switch g.state {
		case g4Content:
			i, marker := g.next()
			if i < 0 {
				keep := 0
				if !done {
					keep = max(heldSuffix(g.buf, gemma4ChanOpen), heldSuffix(g.buf, gemma4CallOpen))
				}
				co.WriteString(g.buf[:len(g.buf)-keep])
				g.buf = g.buf[len(g.buf)-keep:]
				return
			}
			co.WriteString(g.buf[:i])
			g.buf = g.buf[i+len(marker):]
			if marker == gemma4ChanOpen {
				g.state = g4Channel
			} else {
				g.state = g4Call
			}
		case g4Channel:
			// The channel's name ("thought") and its line end are layout.
			j := strings.IndexByte(g.buf, '\n')
			if k := strings.Index(g.buf, gemma4ChanClose); k >= 0 && (j < 0 || k < j) {
				g.state = g4ThoughtStart // a channel closed on its first line: no name
				continue
			}
			if j < 0 {
				if done {
					g.state = g4ThoughtStart
					continue
				}
				return
			}
			if name := g.buf[:j]; strings.ContainsAny(strings.TrimSpace(name), " \t<") {
				g.state = g4ThoughtStart // no name line: all of it is reasoning
				continue
			}
			g.buf, g.state = g.buf[j+1:], g4ThoughtStart
		case g4ThoughtStart:
			g.buf = trimLeftSpace(g.buf)
			if g.buf == "" && !done {
				return
			}
			g.state = g4Thought
		case g4Thought:
			if i := strings.Index(g.buf, gemma4ChanClose); i >= 0 {
				before := g.buf[:i]
				th.WriteString(before[:len(before)-trailingSpace(before)])
				g.buf, g.state = g.buf[i+len(gemma4ChanClose):], g4AfterChan
				continue
			}
			if done {
				th.WriteString(g.buf[:len(g.buf)-trailingSpace(g.buf)])
				g.buf = ""
				return
			}
			keep := heldSuffix(g.buf, gemma4ChanClose)
			keep += trailingSpace(g.buf[:len(g.buf)-keep])
			th.WriteString(g.buf[:len(g.buf)-keep])
			g.buf = g.buf[len(g.buf)-keep:]
			return
		case g4AfterChan:
			g.buf = trimLeftSpace(g.buf)
			if g.buf == "" && !done {
				return
			}
			g.state = g4Content
		case g4Call:
			i := strings.Index(g.buf, gemma4CallClose)
			if i < 0 {
				if done {
					co.WriteString(gemma4CallOpen + g.buf) // an unfinished call: given back as it was
					g.buf = ""
				}
				return
			}
			body := g.buf[:i]
			g.buf, g.state = g.buf[i+len(gemma4CallClose):], g4Content
			if call, err := parseGemma4Call(body); err == nil {
				r.Calls = append(r.Calls, call)
			} else {
				co.WriteString(gemma4CallOpen + body + gemma4CallClose)
			}
		}
	}
}

// next finds the first marker that changes the state in content: the reasoning channel,
// or with tools a call.
func (g *gemma4Stage) next() (int, string) {
	i, marker := strings.Index(g.buf, gemma4ChanOpen), gemma4ChanOpen
	if g.tools {
		if j := strings.Index(g.buf, gemma4CallOpen); j >= 0 && (i < 0 || j < i) {
			i, marker = j, gemma4CallOpen
		}
	}
	return i, marker
}

// parseGemma4Call reads "call:NAME{arguments}" into a call with JSON arguments.
func parseGemma4Call(body string) (ToolCall, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(body), "call:")
	if !ok {
		return ToolCall{}, errors.New("parser: a Gemma 4 call that does not start with call:")
	}
	brace := strings.IndexByte(rest, '{')
	if brace < 0 {
		return ToolCall{}, errors.New("parser: a Gemma 4 call without arguments")
	}
	name := strings.TrimSpace(rest[:brace])
	if name == "" || strings.ContainsAny(name, " \t\n{}<>\"") {
		return ToolCall{}, errors.New("parser: a Gemma 4 call without a valid function name")
	}
	args, err := Gemma4Value(rest[brace:])
	if err != nil {
		return ToolCall{}, err
	}
	if args[0] != '{' {
		return ToolCall{}, errors.New("parser: a Gemma 4 call whose arguments are not an object")
	}
	return ToolCall{Name: name, Arguments: args}, nil
}

// Gemma4Value converts one value in Gemma 4's notation (the whole of s) to compact JSON,
// keeping the keys' order.
func Gemma4Value(s string) (json.RawMessage, error) {
	p := &gemma4Reader{s: s}
	var out bytes.Buffer
	if err := p.value(&out); err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, errors.New("parser: text after a Gemma 4 value")
	}
	return out.Bytes(), nil
}

type gemma4Reader struct {
	s string
	i int
}

var errGemma4Syntax = errors.New("parser: not Gemma 4's argument notation")

func (p *gemma4Reader) space() {
	for p.i < len(p.s) && isSpace(p.s[p.i]) {
		p.i++
	}
}

func (p *gemma4Reader) value(out *bytes.Buffer) error {
	p.space()
	if p.i >= len(p.s) {
		return errGemma4Syntax
	}
	switch {
	case p.s[p.i] == '{':
		return p.object(out)
	case p.s[p.i] == '[':
		return p.list(out)
	case strings.HasPrefix(p.s[p.i:], gemma4Quote):
		str, err := p.quoted()
		if err != nil {
			return err
		}
		b, _ := json.Marshal(str)
		out.Write(b)
		return nil
	case p.s[p.i] == '"': // a JSON string, as some models write now and then
		dec := json.NewDecoder(strings.NewReader(p.s[p.i:]))
		var str string
		if err := dec.Decode(&str); err != nil {
			return errGemma4Syntax
		}
		p.i += int(dec.InputOffset())
		b, _ := json.Marshal(str)
		out.Write(b)
		return nil
	}
	// A bare scalar, up to the next separator.
	j := p.i
	for j < len(p.s) && !strings.ContainsRune(",}]", rune(p.s[j])) {
		j++
	}
	tok := strings.TrimSpace(p.s[p.i:j])
	p.i = j
	switch {
	case tok == "":
		return errGemma4Syntax
	case tok == "true" || tok == "false" || tok == "null":
		out.WriteString(tok)
	case json.Valid([]byte(tok)) && isNumber(tok):
		out.WriteString(tok)
	default: // an unquoted word: a string
		b, _ := json.Marshal(tok)
		out.Write(b)
	}
	return nil
}

func isNumber(tok string) bool {
	_, err := strconv.ParseFloat(tok, 64)
	return err == nil
}

// quoted reads a <|"|>…<|"|> string.
func (p *gemma4Reader) quoted() (string, error) {
	start := p.i + len(gemma4Quote)
	end := strings.Index(p.s[start:], gemma4Quote)
	if end < 0 {
		return "", errGemma4Syntax
	}
	p.i = start + end + len(gemma4Quote)
	return p.s[start : start+end], nil
}

func (p *gemma4Reader) object(out *bytes.Buffer) error {
	p.i++ // {
	out.WriteByte('{')
	for first := true; ; first = false {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			out.WriteByte('}')
			return nil
		}
		if !first {
			if p.i >= len(p.s) || p.s[p.i] != ',' {
				return errGemma4Syntax
			}
			p.i++
			p.space()
			out.WriteByte(',')
		}
		var key string
		switch {
		case strings.HasPrefix(p.s[p.i:], gemma4Quote):
			k, err := p.quoted()
			if err != nil {
				return err
			}
			key = k
		default:
			j := strings.IndexByte(p.s[p.i:], ':')
			if j < 0 {
				return errGemma4Syntax
			}
			key = strings.TrimSpace(p.s[p.i : p.i+j])
			key = strings.Trim(key, `"`)
			p.i += j
		}
		p.space()
		if key == "" || p.i >= len(p.s) || p.s[p.i] != ':' {
			return errGemma4Syntax
		}
		p.i++
		b, _ := json.Marshal(key)
		out.Write(b)
		out.WriteByte(':')
		if err := p.value(out); err != nil {
			return err
		}
	}
}

func (p *gemma4Reader) list(out *bytes.Buffer) error {
	p.i++ // [
	out.WriteByte('[')
	for first := true; ; first = false {
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			out.WriteByte(']')
			return nil
		}
		if !first {
			if p.i >= len(p.s) || p.s[p.i] != ',' {
				return errGemma4Syntax
			}
			p.i++
			out.WriteByte(',')
		}
		if err := p.value(out); err != nil {
			return err
		}
	}
}
