// Package parser splits a model's streamed output into content, thinking and tool calls, incrementally:
// text arrives in pieces of any size (a token's text, or less), and each piece yields what is already
// unambiguous; text that may still turn out to be a tag is held back until the next piece or the end.
//
// Supported formats, chosen from the chat template (Detect):
//   - thinking: <think>…</think> goes to the thinking field, also when the prompt already opened <think>
//     (templates that start the assistant turn inside a thinking block);
//   - tool calls in the Hermes/Qwen format: <tool_call>{"name": …, "arguments": {…}}</tool_call>, any number,
//     or inside the same tags the XML form of Qwen3-Coder and Qwen3.5/3.6 (<function=…><parameter=…>…),
//     whose values become JSON as the offered tool's schema types them (ParamTypes);
//   - GLM's key/value form inside the same tags (GLM-4.5 to 4.7, glm.go):
//     <tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>, with or without newlines
//     between the parts, the values typed as the XML form's;
//   - OpenAI's harmony format (gpt-oss, harmony.go): the analysis channel is thinking, final and commentary
//     preambles content, and commentary to=functions.NAME a tool call;
//   - Mistral's tags (mistral.go): [THINK]…[/THINK] is thinking (Magistral), and [TOOL_CALLS]name[ARGS]{…}
//     (Mistral Small 3.2, Devstral, Magistral, Ministral 3) or the older [TOOL_CALLS][{"name": …, "arguments":
//     {…}}, …] are tool calls; these tags are special tokens, kept in the decoded text for the parser
//     (Capabilities.SpecialTags);
//   - Gemma 4's format (gemma4.go): the <|channel>thought…<channel|> reasoning is thinking, and
//     <|tool_call>call:NAME{…}<tool_call|> a tool call whose arguments, in Gemma's own notation, become JSON;
//   - tool calls in Llama 3's JSON format: the whole reply is {"name": …, "parameters": {…}} (optionally after
//     <|python_tag|>, several separated by ';' or newlines), recognized only for the tools the request gave.
//
// A tool call that does not parse (bad JSON, no name, an unknown tool, arguments that are not an object) is
// returned as content, byte for byte: output is never dropped.
package parser

import (
	"encoding/json"
	"strings"
)

// ToolFormat is how a model family writes tool calls.
type ToolFormat int

const (
	ToolsNone    ToolFormat = iota // the template has no tool-call syntax mlxg knows
	ToolsHermes                    // <tool_call>{json}</tool_call> (Qwen2.5, Qwen3, Hermes), or its XML form (Qwen3-Coder, Qwen3.5/3.6)
	ToolsLlama3                    // a bare JSON object {"name":…, "parameters":…} (Llama 3.1+)
	ToolsHarmony                   // <|channel|>commentary to=functions.NAME …<|message|>{json} (gpt-oss)
	ToolsGLM                       // <tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value></tool_call> (GLM-4.5 to 4.7)
	ToolsMistral                   // [TOOL_CALLS]name[ARGS]{json}, or [TOOL_CALLS][{json}, …] (Mistral)
	ToolsGemma4                    // <|tool_call>call:NAME{key:<|"|>value<|"|>}<tool_call|> (Gemma 4)
)

func (f ToolFormat) String() string {
	switch f {
	case ToolsHermes:
		return "hermes"
	case ToolsLlama3:
		return "llama3-json"
	case ToolsHarmony:
		return "harmony"
	case ToolsGLM:
		return "glm"
	case ToolsMistral:
		return "mistral"
	case ToolsGemma4:
		return "gemma4"
	}
	return "none"
}

// Capabilities is what a chat template says about the model's output syntax.
type Capabilities struct {
	Thinking bool       // the template knows <think>…</think> ([THINK]…[/THINK]), or the harmony format's analysis channel
	Tools    ToolFormat // the tool-call syntax the template teaches
	Harmony  bool       // the template writes OpenAI's harmony format (gpt-oss): see harmony.go
	// ThinkOpen and ThinkClose are the thinking block's tags when they are not <think> and </think>
	// (Mistral's); ThinkTags gives them either way.
	ThinkOpen, ThinkClose string
	// SpecialTags: the syntax's tags are special tokens (Mistral's [TOOL_CALLS], [ARGS], [THINK]), which the
	// text decoder must keep for the parser to see them.
	SpecialTags bool
	Gemma4      bool // the template writes Gemma 4's format: see gemma4.go
}

// ThinkTags is the thinking block's opening and closing tags.
func (c Capabilities) ThinkTags() (open, close string) {
	if c.ThinkOpen == "" || c.ThinkClose == "" {
		return ThinkOpen, ThinkClose
	}
	return c.ThinkOpen, c.ThinkClose
}

// Detect reads a chat template's source for the syntax its model writes.
func Detect(chatTemplate string) Capabilities {
	var c Capabilities
	if IsHarmony(chatTemplate) {
		return Capabilities{Thinking: true, Tools: ToolsHarmony, Harmony: true}
	}
	if IsGemma4(chatTemplate) {
		c := Capabilities{Gemma4: true, ThinkOpen: Gemma4ThoughtOpen, ThinkClose: Gemma4ThoughtClose, SpecialTags: true}
		c.Thinking = strings.Contains(chatTemplate, gemma4ChanOpen) || strings.Contains(chatTemplate, gemma4Think)
		if strings.Contains(chatTemplate, gemma4CallOpen) {
			c.Tools = ToolsGemma4
		}
		return c
	}
	c.Thinking = strings.Contains(chatTemplate, ThinkOpen) || strings.Contains(chatTemplate, ThinkClose)
	if strings.Contains(chatTemplate, MistralThinkOpen) {
		c.Thinking, c.ThinkOpen, c.ThinkClose, c.SpecialTags = true, MistralThinkOpen, MistralThinkClose, true
	}
	switch {
	case strings.Contains(chatTemplate, glmKeyOpen): // GLM's templates contain <tool_call> too
		c.Tools = ToolsGLM
	case strings.Contains(chatTemplate, "<tool_call>"):
		c.Tools = ToolsHermes
	case strings.Contains(chatTemplate, mistralCalls):
		c.Tools, c.SpecialTags = ToolsMistral, true
	case strings.Contains(chatTemplate, "<|python_tag|>") ||
		(strings.Contains(chatTemplate, "ipython") && strings.Contains(chatTemplate, `"parameters"`)):
		c.Tools = ToolsLlama3
	}
	return c
}

// The tags this package knows.
const (
	ThinkOpen  = "<think>"
	ThinkClose = "</think>"
	toolOpen   = "<tool_call>"
	toolClose  = "</tool_call>"
	pythonTag  = "<|python_tag|>"
)

// PromptOpensThinking reports whether a rendered prompt ends inside an open thinking block, so that the
// model's output starts as thinking without an opening tag.
func PromptOpensThinking(prompt string) bool {
	return PromptOpens(prompt, ThinkOpen) || PromptOpens(prompt, Gemma4ThoughtOpen)
}

// PromptOpens is PromptOpensThinking for a family's own opening tag (Capabilities.ThinkOpen).
func PromptOpens(prompt, open string) bool {
	p := strings.TrimRight(prompt, " \t\r\n")
	return strings.HasSuffix(p, strings.TrimSpace(open))
}

// ToolCall is one parsed call. Arguments is a JSON object, compacted, keys in the model's order.
type ToolCall struct {
	Name      string
	Arguments json.RawMessage
}

// Result is what one piece of output yields.
type Result struct {
	Content  string
	Thinking string
	Calls    []ToolCall
}

// Config chooses what a Parser separates.
type Config struct {
	// Thinking separates <think>…</think> into Result.Thinking (the request asked for thinking on a thinking model).
	Thinking bool
	// InThinking: the prompt opened <think> already (see PromptOpensThinking); needs Thinking.
	InThinking bool
	// ThinkOpen and ThinkClose are the thinking block's tags (Capabilities'); empty: <think> and </think>.
	ThinkOpen, ThinkClose string
	// Tools is the tool-call format to recognize; ToolsNone when the request gave no tools.
	Tools ToolFormat
	// Harmony: the output is in OpenAI's harmony format (Capabilities.Harmony). Its analysis channel goes to
	// Result.Thinking whatever Thinking says (gpt-oss always reasons; its text is never returned as content),
	// and tool calls are recognised when Tools is ToolsHarmony.
	Harmony bool
	// Gemma4: the output is in Gemma 4's format (Capabilities.Gemma4). Its reasoning channel goes to
	// Result.Thinking whatever Thinking says, InThinking starts inside it, and tool calls are recognised
	// when Tools is ToolsGemma4.
	Gemma4 bool
	// ToolNames, when not empty, is the set of tools the request offered: a Llama 3 JSON reply naming another
	// function is content. Hermes calls are tagged explicitly and are not filtered.
	ToolNames []string
	// ToolTypes is the offered tools' parameter types (ParamTypes): what the text values of an XML call become.
	ToolTypes map[string]map[string]string
}

// Parser is the incremental splitter. Not safe for concurrent use.
type Parser struct {
	harmony *harmonyStage // the harmony format, which does the work of both stages below
	gemma4  *gemma4Stage  // Gemma 4's format, likewise
	think   *thinkStage   // nil when thinking is not separated
	tools   toolStage     // nil when tool calls are not recognized
}

// toolStage consumes content (after thinking was taken out).
type toolStage interface {
	add(s string, done bool, r *Result)
}

// New makes a Parser.
func New(cfg Config) *Parser {
	p := &Parser{}
	if cfg.Harmony {
		p.harmony = newHarmonyStage(cfg.Tools == ToolsHarmony)
		return p
	}
	if cfg.Gemma4 {
		p.gemma4 = newGemma4Stage(cfg.Tools == ToolsGemma4, cfg.InThinking)
		return p
	}
	if cfg.Thinking {
		p.think = &thinkStage{open: cfg.ThinkOpen, close: cfg.ThinkClose}
		if p.think.open == "" || p.think.close == "" {
			p.think.open, p.think.close = ThinkOpen, ThinkClose
		}
		if cfg.InThinking {
			p.think.state = thinkEatSpace
		}
	}
	switch cfg.Tools {
	case ToolsHermes:
		p.tools = &hermesStage{types: cfg.ToolTypes}
	case ToolsGLM:
		p.tools = &hermesStage{types: cfg.ToolTypes, glm: true}
	case ToolsLlama3:
		p.tools = &llamaStage{names: cfg.ToolNames}
	case ToolsMistral:
		p.tools = &mistralStage{}
	}
	return p
}

// Add consumes the next piece of output; done marks the end of generation, when everything held back is
// released. Calling Add after done is not allowed.
func (p *Parser) Add(s string, done bool) Result {
	var r Result
	if p.harmony != nil {
		p.harmony.add(s, done, &r)
		return r
	}
	if p.gemma4 != nil {
		p.gemma4.add(s, done, &r)
		return r
	}
	content := s
	if p.think != nil {
		var thinking string
		thinking, content = p.think.add(s, done)
		r.Thinking = thinking
	}
	if p.tools != nil {
		p.tools.add(content, done, &r)
	} else {
		r.Content = content
	}
	return r
}

// heldSuffix is the length of the longest suffix of s that is a proper prefix of tag: text that may become
// the tag when more arrives.
func heldSuffix(s, tag string) int {
	n := min(len(s), len(tag)-1)
	for ; n > 0; n-- {
		if strings.HasSuffix(s, tag[:n]) {
			return n
		}
	}
	return 0
}

func isSpace(b byte) bool { return b == ' ' || b == '\t' || b == '\n' || b == '\r' }

// trailingSpace is the length of the run of ASCII whitespace ending s.
func trailingSpace(s string) int {
	n := 0
	for n < len(s) && isSpace(s[len(s)-1-n]) {
		n++
	}
	return n
}

func trimLeftSpace(s string) string {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return s[i:]
}
