package parser

import (
	"bytes"
	"encoding/json"
	"strings"
)

// GLM's tool calls (the chat templates of GLM-4.5, 4.6, 4.7 and 4.7-Flash): the function's name right after
// <tool_call>, then each argument as a key and a value, with newlines between the parts (4.5, 4.6) or none
// (4.7):
//
//	<tool_call>get_weather
//	<arg_key>city</arg_key>
//	<arg_value>Paris</arg_value>
//	</tool_call>
//
// The template writes a string value as it is and any other value as JSON, so a value becomes what the
// tool's schema types it as (xmlValue, as the XML form's).
const (
	glmKeyOpen    = "<arg_key>"
	glmKeyClose   = "</arg_key>"
	glmValueOpen  = "<arg_value>"
	glmValueClose = "</arg_value>"
)

// parseGLMCall reads the body of a <tool_call> in GLM's form. Anything else in the body, or a tag left
// open, fails it (and the call is given back as content).
func parseGLMCall(body string, types map[string]map[string]string) (ToolCall, bool) {
	name, rest, _ := strings.Cut(body, glmKeyOpen)
	if strings.Contains(body, glmKeyOpen) {
		rest = glmKeyOpen + rest
	}
	name = strings.TrimSpace(name)
	if name == "" || strings.ContainsAny(name, "<>\n{") {
		return ToolCall{}, false
	}
	var args bytes.Buffer
	args.WriteByte('{')
	seen := map[string]bool{}
	for {
		rest = trimLeftSpace(rest)
		if rest == "" {
			break
		}
		after, ok := strings.CutPrefix(rest, glmKeyOpen)
		if !ok {
			return ToolCall{}, false
		}
		key, after, ok := strings.Cut(after, glmKeyClose)
		key = strings.TrimSpace(key)
		if !ok || key == "" || strings.Contains(key, "<") || seen[key] {
			return ToolCall{}, false
		}
		after, ok = strings.CutPrefix(trimLeftSpace(after), glmValueOpen)
		if !ok {
			return ToolCall{}, false
		}
		value, after, ok := strings.Cut(after, glmValueClose)
		if !ok {
			return ToolCall{}, false
		}
		if len(seen) > 0 {
			args.WriteByte(',')
		}
		seen[key] = true
		k, _ := json.Marshal(key)
		args.Write(k)
		args.WriteByte(':')
		args.Write(xmlValue(value, types[name][key]))
		rest = after
	}
	args.WriteByte('}')
	return ToolCall{Name: name, Arguments: args.Bytes()}, true
}
