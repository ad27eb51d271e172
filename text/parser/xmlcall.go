package parser

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// The XML form of a call inside <tool_call>…</tool_call>, which the chat templates of Qwen3-Coder and
// Qwen3.5/3.6 teach instead of Hermes' JSON:
//
//	<tool_call>
//	<function=get_weather>
//	<parameter=city>
//	Paris
//	</parameter>
//	</function>
//	</tool_call>
//
// Every value is text; the tool's JSON schema says what it becomes (ParamTypes).
const (
	xmlFunctionOpen   = "<function="
	xmlFunctionClose  = "</function>"
	xmlParameterOpen  = "<parameter="
	xmlParameterClose = "</parameter>"
)

// ParamTypes reads the parameters' JSON-schema types of each tool a request offers (OpenAI's and Ollama's
// {"type": "function", "function": {"name", "parameters": {"properties": …}}}), for the values of XML
// calls: tool name -> parameter -> its type ("" when the schema gives none, the first non-null type of a
// list).
func ParamTypes(tools []json.RawMessage) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, raw := range tools {
		var t struct {
			Function struct {
				Name       string `json:"name"`
				Parameters struct {
					Properties map[string]struct {
						Type json.RawMessage `json:"type"`
					} `json:"properties"`
				} `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &t) != nil || t.Function.Name == "" {
			continue
		}
		types := map[string]string{}
		for name, p := range t.Function.Parameters.Properties {
			var one string
			var list []string
			if json.Unmarshal(p.Type, &one) == nil {
				types[name] = one
			} else if json.Unmarshal(p.Type, &list) == nil {
				for _, s := range list {
					if s != "null" {
						types[name] = s
						break
					}
				}
			}
		}
		out[t.Function.Name] = types
	}
	return out
}

// parseXMLCall reads the body of a <tool_call> in the XML form. Anything else in the body, or a tag left
// open, fails it (and the call is given back as content).
func parseXMLCall(body string, types map[string]map[string]string) (ToolCall, bool) {
	s := strings.TrimSpace(body)
	rest, ok := strings.CutPrefix(s, xmlFunctionOpen)
	if !ok {
		return ToolCall{}, false
	}
	name, rest, ok := strings.Cut(rest, ">")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, "<\n") {
		return ToolCall{}, false
	}
	var args bytes.Buffer
	args.WriteByte('{')
	seen := map[string]bool{}
	for {
		rest = trimLeftSpace(rest)
		if after, ok := strings.CutPrefix(rest, xmlFunctionClose); ok {
			if trimLeftSpace(after) != "" {
				return ToolCall{}, false
			}
			break
		}
		after, ok := strings.CutPrefix(rest, xmlParameterOpen)
		if !ok {
			return ToolCall{}, false
		}
		param, after, ok := strings.Cut(after, ">")
		param = strings.TrimSpace(param)
		if !ok || param == "" || strings.ContainsAny(param, "<\n") || seen[param] {
			return ToolCall{}, false
		}
		value, after, ok := strings.Cut(after, xmlParameterClose)
		if !ok {
			return ToolCall{}, false
		}
		// The template puts the value on lines of its own: those two newlines are layout.
		value = strings.TrimPrefix(value, "\n")
		value = strings.TrimSuffix(value, "\n")
		if len(seen) > 0 {
			args.WriteByte(',')
		}
		seen[param] = true
		key, _ := json.Marshal(param)
		args.Write(key)
		args.WriteByte(':')
		args.Write(xmlValue(value, types[name][param]))
		rest = after
	}
	args.WriteByte('}')
	return ToolCall{Name: name, Arguments: args.Bytes()}, true
}

// xmlValue is the JSON of an XML parameter's text, as the parameter's schema type wants it: a string
// parameter keeps the text as it is; a number, integer or boolean is read as one when it parses; an object
// or array when the text is that JSON. With no type the text is taken as JSON when it is a JSON value other
// than a string, else as a string. A value that does not fit its type stays a string (the tool sees what
// the model wrote).
func xmlValue(text, typ string) json.RawMessage {
	str := func() json.RawMessage { b, _ := json.Marshal(text); return b }
	t := strings.TrimSpace(text)
	switch typ {
	case "string":
		return str()
	case "integer":
		if _, err := strconv.ParseInt(t, 10, 64); err == nil {
			return json.RawMessage(t)
		}
	case "number":
		if _, err := strconv.ParseFloat(t, 64); err == nil && json.Valid([]byte(t)) {
			return json.RawMessage(t) // JSON's spelling of a number: not "NaN", "+1" or "1."
		}
	case "boolean":
		switch strings.ToLower(t) {
		case "true":
			return json.RawMessage("true")
		case "false":
			return json.RawMessage("false")
		}
	case "object", "array":
		var out bytes.Buffer
		if (strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[")) && json.Compact(&out, []byte(t)) == nil {
			return out.Bytes()
		}
	default:
		var out bytes.Buffer
		if t != "" && t[0] != '"' && json.Compact(&out, []byte(t)) == nil {
			return out.Bytes()
		}
	}
	return str()
}
