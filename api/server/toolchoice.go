package server

// tool_choice, enforced: "auto" leaves the choice to the model, "none" takes the tools away, and
// "required" (Anthropic's "any") or a named function forces a tool call. A forced call is constrained
// decoding (text/constrain, as structured outputs are): the answer, after any thinking block, is the
// model's tool-call syntax around a JSON object {"name": one of the tools, "arguments": a value valid
// against that tool's parameter schema}, so the tool-call parser (text/parser) reads one call from it
// (gpt-oss writes the name in a header of its own and the arguments alone, Gemma 4 the name and arguments in
// a notation of its own: harmonyToolFormat, gemma4ToolFormat).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/anthropic"
	"github.com/mlxg/mlxg/runner"
	"github.com/mlxg/mlxg/text/constrain"
	"github.com/mlxg/mlxg/text/parser"
)

// toolChoice is a request's tool_choice in one form.
type toolChoice struct {
	mode string // "auto", "none", "required" or "function"
	name string // mode "function": the function, as the chat template names it
}

// forced reports whether the choice forces a tool call.
func (tc toolChoice) forced() bool { return tc.mode == "required" || tc.mode == "function" }

// modeChoice reads "auto", "none" or "required"; field names the request's field in errors.
func modeChoice(mode, field string) (toolChoice, error) {
	switch mode {
	case "auto", "none", "required":
		return toolChoice{mode: mode}, nil
	}
	return toolChoice{}, errorf(http.StatusBadRequest, "%s must be \"none\", \"auto\" or \"required\", not %q", field, mode)
}

// plainChoice reads the forms of tool_choice both OpenAI APIs share: absent or null ("auto") and a
// mode string; done is false for an object, which each API reads its own way.
func plainChoice(raw json.RawMessage) (tc toolChoice, done bool, err error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return toolChoice{mode: "auto"}, true, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		tc, err = modeChoice(s, "tool_choice")
		return tc, true, err
	}
	return toolChoice{}, false, nil
}

// oaiToolChoice reads Chat Completions' tool_choice: "none", "auto", "required",
// {"type":"function","function":{"name":…}} or {"type":"allowed_tools","allowed_tools":{"mode":…}}.
// Other object types (custom tools) choose tools no model here runs: they leave the choice to the model.
func oaiToolChoice(raw json.RawMessage) (toolChoice, error) {
	if tc, done, err := plainChoice(raw); done {
		return tc, err
	}
	var o struct {
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
		AllowedTools struct {
			Mode string `json:"mode"`
		} `json:"allowed_tools"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return toolChoice{}, errorf(http.StatusBadRequest, "tool_choice must be a string or an object: %v", err)
	}
	switch o.Type {
	case "function":
		if o.Function.Name == "" {
			return toolChoice{}, errorf(http.StatusBadRequest, "tool_choice.function.name is required")
		}
		return toolChoice{mode: "function", name: o.Function.Name}, nil
	case "allowed_tools":
		return modeChoice(o.AllowedTools.Mode, "tool_choice.allowed_tools.mode")
	}
	return toolChoice{mode: "auto"}, nil
}

// responsesToolChoice reads the Responses API's tool_choice: "none", "auto", "required",
// {"type":"function","name":…} (with "namespace" for a namespace's member) or
// {"type":"allowed_tools","mode":…}. A hosted tool's type (web_search...) chooses a tool no model here
// runs: it leaves the choice to the model.
func responsesToolChoice(raw json.RawMessage) (toolChoice, error) {
	if tc, done, err := plainChoice(raw); done {
		return tc, err
	}
	var o struct {
		Type      string `json:"type"`
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		Mode      string `json:"mode"`
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return toolChoice{}, errorf(http.StatusBadRequest, "tool_choice must be a string or an object: %v", err)
	}
	switch o.Type {
	case "function":
		if o.Name == "" {
			return toolChoice{}, errorf(http.StatusBadRequest, "tool_choice.name is required")
		}
		return toolChoice{mode: "function", name: qualify(o.Namespace, o.Name)}, nil
	case "allowed_tools":
		return modeChoice(o.Mode, "tool_choice.mode")
	}
	return toolChoice{mode: "auto"}, nil
}

// anthropicToolChoice reads Anthropic's tool_choice: auto, any (a call to any tool), tool (that one) or
// none.
func anthropicToolChoice(tc *anthropic.ToolChoice) (toolChoice, error) {
	if tc == nil {
		return toolChoice{mode: "auto"}, nil
	}
	switch tc.Type {
	case "auto", "none":
		return toolChoice{mode: tc.Type}, nil
	case "any":
		return toolChoice{mode: "required"}, nil
	case "tool":
		if tc.Name == "" {
			return toolChoice{}, errorf(http.StatusBadRequest, "tool_choice.name is required when tool_choice.type is \"tool\"")
		}
		return toolChoice{mode: "function", name: tc.Name}, nil
	}
	return toolChoice{}, errorf(http.StatusBadRequest, "tool_choice.type must be \"auto\", \"any\", \"tool\" or \"none\", not %q", tc.Type)
}

// applyToolChoice gives the tools the model is offered under tc ("none": none) and the choice the job
// forces (nil when the model chooses). A named function must be one of the tools; a forced choice
// without tools forces nothing.
func applyToolChoice(tc toolChoice, tools api.Tools) (api.Tools, *toolChoice, error) {
	switch {
	case tc.mode == "none":
		return nil, nil, nil
	case tc.mode == "function":
		for _, t := range tools {
			if t.Function.Name == tc.name {
				return tools, &tc, nil
			}
		}
		return nil, nil, errorf(http.StatusBadRequest, "tool_choice names the function %q, which is not among the tools", tc.name)
	case tc.forced() && len(tools) > 0:
		return tools, &tc, nil
	}
	return tools, nil, nil
}

// toolCallFormat is the constraint a forced call runs under, in the tool-call syntax the model's chat
// template teaches: Hermes/Qwen's <tool_call>{"name": …, "arguments": {…}}</tool_call>, or Llama 3's
// bare {"name": …, "parameters": {…}}. The value is one of the chosen tools (all of them for
// "required") as an object of the function's name and arguments valid against its parameter schema.
// A parameter schema the constraint cannot enforce (a keyword constrain does not support) is relaxed to
// any JSON object for that tool, rather than refusing a request the model could still answer.
//
// Gemma 4's calls are not JSON (gemma4ToolFormat).
func toolCallFormat(tools api.Tools, tc toolChoice, syntax parser.ToolFormat) (*runner.Format, error) {
	f := &runner.Format{Required: true}
	if syntax == parser.ToolsHarmony {
		return harmonyToolFormat(tools, tc)
	}
	if syntax == parser.ToolsGemma4 {
		return gemma4ToolFormat(tools, tc)
	}
	argsKey := "arguments"
	switch syntax {
	case parser.ToolsHermes, parser.ToolsGLM: // GLM's parser reads a JSON body inside the tags too
		f.Prefix, f.Suffix = "<tool_call>\n", "\n</tool_call>"
	case parser.ToolsLlama3:
		argsKey = "parameters"
	case parser.ToolsMistral:
		f.Prefix = "[TOOL_CALLS]" // then one {"name", "arguments"} object, which the parser also reads
	default:
		return nil, errorf(http.StatusBadRequest, "tool_choice %q needs a tool-call syntax mlxg knows in the model's chat template", tc.mode)
	}
	var chosen api.Tools
	for _, t := range tools {
		if tc.mode != "function" || t.Function.Name == tc.name {
			chosen = append(chosen, t)
		}
	}
	build := func(relax bool) (*constrain.Schema, error) {
		var alts []string
		for i, t := range chosen {
			params := toolParameters(t)
			if _, err := constrain.Compile(params); err != nil || relax {
				params = json.RawMessage(`{"type":"object"}`)
			}
			base := "#/properties/" + argsKey
			if len(chosen) > 1 {
				base = fmt.Sprintf("#/anyOf/%d/properties/%s", i, argsKey)
			}
			params, err := rebaseRefs(params, base)
			if err != nil {
				params = json.RawMessage(`{"type":"object"}`)
			}
			name, _ := json.Marshal(t.Function.Name)
			alts = append(alts, fmt.Sprintf(`{"type":"object","properties":{"name":{"const":%s},%q:%s},"required":["name",%q]}`,
				name, argsKey, params, argsKey))
		}
		schema := alts[0]
		if len(alts) > 1 {
			schema = `{"anyOf":[` + strings.Join(alts, ",") + `]}`
		}
		return constrain.Compile(json.RawMessage(schema))
	}
	sch, err := build(false)
	if err != nil {
		if sch, err = build(true); err != nil {
			return nil, fmt.Errorf("tool_choice: the tool-call schema does not compile: %w", err)
		}
	}
	f.Schema = sch
	return f, nil
}

// harmonyToolFormat is a forced call in the harmony format (gpt-oss): the reasoning message is left
// free (harmonyFormat), then the header of a call to the one chosen tool is forced and its arguments
// constrained to the tool's parameter schema. A choice among several tools ("required" with more than
// one) would need a header per tool, which one forced prefix cannot give: it is refused.
func harmonyToolFormat(tools api.Tools, tc toolChoice) (*runner.Format, error) {
	var chosen api.Tools
	for _, t := range tools {
		if tc.mode != "function" || t.Function.Name == tc.name {
			chosen = append(chosen, t)
		}
	}
	if len(chosen) != 1 {
		return nil, errorf(http.StatusBadRequest, "tool_choice %q among %d tools: a harmony model (gpt-oss) can be made to call one named tool only", tc.mode, len(chosen))
	}
	sch, err := constrain.Compile(toolParameters(chosen[0]))
	if err != nil {
		if sch, err = constrain.Compile(json.RawMessage(`{"type":"object"}`)); err != nil {
			return nil, fmt.Errorf("tool_choice: the tool-call schema does not compile: %w", err)
		}
	}
	return &runner.Format{Schema: sch, Required: true,
		Prefix: "<|start|>assistant<|channel|>commentary to=functions." + chosen[0].Function.Name + " <|constrain|>json<|message|>"}, nil
}

// gemma4ToolFormat is a forced call in Gemma 4's syntax,
// <|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|>, its arguments constrained to the tool's
// parameter schema in Gemma's notation (constrain.Schema.Gemma4). For one chosen tool the header
// with its name is forced; for several ("required"), the header up to the name, and the name and
// arguments are constrained as one object of a property per tool, written without its braces
// (constrain.Schema.Gemma4Call). A parameter schema the constraint cannot enforce is relaxed to any
// object, as for the JSON formats.
func gemma4ToolFormat(tools api.Tools, tc toolChoice) (*runner.Format, error) {
	var chosen api.Tools
	for _, t := range tools {
		if tc.mode != "function" || t.Function.Name == tc.name {
			chosen = append(chosen, t)
		}
	}
	if len(chosen) == 0 {
		return nil, nil
	}
	params := func(t api.Tool, base string) json.RawMessage {
		p := toolParameters(t)
		if _, err := constrain.Compile(p); err != nil {
			return json.RawMessage(`{"type":"object"}`)
		}
		if p, err := rebaseRefs(p, base); err == nil {
			return p
		}
		return json.RawMessage(`{"type":"object"}`)
	}
	f := &runner.Format{Required: true, Suffix: "<tool_call|>"}
	if len(chosen) == 1 {
		sch, err := constrain.Compile(params(chosen[0], "#"))
		if err != nil {
			return nil, fmt.Errorf("tool_choice: the tool-call schema does not compile: %w", err)
		}
		f.Schema, f.Prefix = sch.Gemma4(), "<|tool_call>call:"+chosen[0].Function.Name
		return f, nil
	}
	pointer := strings.NewReplacer("~", "~0", "/", "~1")
	var props []string
	for _, t := range chosen {
		name, _ := json.Marshal(t.Function.Name)
		props = append(props, fmt.Sprintf("%s:%s", name, params(t, "#/properties/"+pointer.Replace(t.Function.Name))))
	}
	sch, err := constrain.Compile(json.RawMessage(`{"type":"object","properties":{` + strings.Join(props, ",") + `},"additionalProperties":false}`))
	if err != nil {
		return nil, fmt.Errorf("tool_choice: the tool-call schema does not compile: %w", err)
	}
	f.Schema, f.Prefix = sch.Gemma4Call(), "<|tool_call>call:"
	return f, nil
}

// harmonyFormat fits a constraint to the harmony format: the analysis message (from its <|channel|>
// to <|end|>) is left free, as a thinking block, and the answer starts with the final channel's header
// unless the constraint forces a header of its own (a tool call).
func harmonyFormat(f *runner.Format) {
	f.ThinkOpen, f.ThinkClose = "<|channel|>", "<|end|>"
	if f.Prefix == "" {
		f.Prefix = "<|start|>assistant<|channel|>final<|message|>"
	}
}

// toolParameters is a tool's parameter schema as the client sent it (key order kept), an object
// schema without properties when it has none.
func toolParameters(t api.Tool) json.RawMessage {
	var params json.RawMessage
	if raw := t.Raw(); raw != nil {
		var fn struct {
			Function struct {
				Parameters json.RawMessage `json:"parameters"`
			} `json:"function"`
		}
		if json.Unmarshal(raw, &fn) == nil {
			params = bytes.TrimSpace(fn.Function.Parameters)
		}
	} else if b, err := json.Marshal(t.Function.Parameters); err == nil {
		params = b
	}
	if len(params) == 0 || params[0] != '{' {
		return json.RawMessage(`{"type":"object","properties":{}}`)
	}
	return params
}

// rebaseRefs rewrites the local references ($ref "#…") of schema, a JSON schema placed at base (a
// JSON pointer, "#/…") inside another, so that they point where they did; key order is kept.
func rebaseRefs(schema json.RawMessage, base string) (json.RawMessage, error) {
	if !bytes.Contains(schema, []byte(`"$ref"`)) {
		return schema, nil
	}
	dec := json.NewDecoder(bytes.NewReader(schema))
	dec.UseNumber()
	var out bytes.Buffer
	var value func(ref bool) error
	value = func(ref bool) error {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch t := tok.(type) {
		case json.Delim:
			open, close := byte(t), byte('}')
			if t == '[' {
				close = ']'
			}
			out.WriteByte(open)
			for i := 0; dec.More(); i++ {
				if i > 0 {
					out.WriteByte(',')
				}
				isRef := false
				if open == '{' {
					k, err := dec.Token()
					if err != nil {
						return err
					}
					key, _ := json.Marshal(k)
					out.Write(key)
					out.WriteByte(':')
					isRef = k == "$ref"
				}
				if err := value(isRef); err != nil {
					return err
				}
			}
			if _, err := dec.Token(); err != nil {
				return err
			}
			out.WriteByte(close)
		case string:
			if ref && strings.HasPrefix(t, "#") {
				t = base + t[1:]
			}
			b, _ := json.Marshal(t)
			out.Write(b)
		default:
			b, _ := json.Marshal(t)
			out.Write(b)
		}
		return nil
	}
	if err := value(false); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
