// Package anthropic holds the wire types of Anthropic's Messages API (POST /v1/messages) as mlxg serves it,
// the parsing of its content blocks, and Anthropic's error shape.
//
// Requests are read strictly where a wrong guess would change the conversation (block types, roles,
// tool inputs) and leniently where Anthropic's own API ignores or merely annotates (cache_control,
// citations, metadata).
package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/mlxg/mlxg/api/openai"
)

// ErrorResponse is Anthropic's error body: {"type":"error","error":{"type":…,"message":…}}.
type ErrorResponse struct {
	Type  string `json:"type"` // "error"
	Error Error  `json:"error"`
}

// Error is one error.
type Error struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// ErrorType is Anthropic's error type for an HTTP status.
func ErrorType(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusMethodNotAllowed:
		return "invalid_request_error"
	case http.StatusUnauthorized:
		return "authentication_error"
	case http.StatusForbidden:
		return "permission_error"
	case http.StatusNotFound:
		return "not_found_error"
	case http.StatusRequestEntityTooLarge:
		return "request_too_large"
	case http.StatusTooManyRequests:
		return "rate_limit_error"
	case http.StatusServiceUnavailable, 529:
		return "overloaded_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// NewError builds the error body for an HTTP status.
func NewError(status int, message string) ErrorResponse {
	return ErrorResponse{Type: "error", Error: Error{Type: ErrorType(status), Message: message}}
}

// MessagesRequest is the body of POST /v1/messages.
type MessagesRequest struct {
	Model         string          `json:"model"`
	MaxTokens     *int            `json:"max_tokens"`
	Messages      []MessageParam  `json:"messages"`
	System        json.RawMessage `json:"system,omitempty"` // a string or a list of text blocks
	StopSequences []string        `json:"stop_sequences,omitempty"`
	Stream        bool            `json:"stream,omitempty"`
	Temperature   *float64        `json:"temperature,omitempty"`
	TopP          *float64        `json:"top_p,omitempty"`
	TopK          *int            `json:"top_k,omitempty"`
	Tools         []Tool          `json:"tools,omitempty"`
	ToolChoice    *ToolChoice     `json:"tool_choice,omitempty"`
	Thinking      *Thinking       `json:"thinking,omitempty"`
	Metadata      json.RawMessage `json:"metadata,omitempty"`
	NumDraft      *int            `json:"num_draft,omitempty"` // mlxg's extension: options.num_draft
	// Truncate true (mlxg's extension) cuts a prompt over the context as Ollama does; absent or false,
	// such a prompt is Anthropic's 400 "prompt is too long".
	Truncate *bool `json:"truncate,omitempty"`
}

// MessageParam is one input message; Content is a string or a list of content blocks.
type MessageParam struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// Tool is a client tool the model may call.
type Tool struct {
	Type        string          `json:"type,omitempty"` // "" or "custom"; Anthropic's server tools are refused
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// ToolChoice is tool_choice: {"type": "auto" | "any" | "tool" | "none", "name": …}.
type ToolChoice struct {
	Type                   string `json:"type"`
	Name                   string `json:"name,omitempty"`
	DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
}

// Thinking is the thinking config: {"type": "enabled", "budget_tokens": N}, {"type": "disabled"} or
// {"type": "adaptive"}.
type Thinking struct {
	Type         string `json:"type"`
	BudgetTokens *int   `json:"budget_tokens,omitempty"`
}

// Block is one content block of a request or a reply. Which fields are set depends on Type.
type Block struct {
	Type string `json:"type"`

	Text string `json:"text,omitempty"` // text

	Thinking  string `json:"thinking,omitempty"`  // thinking
	Signature string `json:"signature,omitempty"` // thinking
	Data      string `json:"data,omitempty"`      // redacted_thinking

	ID    string          `json:"id,omitempty"`    // tool_use
	Name  string          `json:"name,omitempty"`  // tool_use
	Input json.RawMessage `json:"input,omitempty"` // tool_use: a JSON object

	ToolUseID string          `json:"tool_use_id,omitempty"` // tool_result
	Content   json.RawMessage `json:"content,omitempty"`     // tool_result: a string or a list of text blocks
	IsError   bool            `json:"is_error,omitempty"`    // tool_result

	Source *Source `json:"source,omitempty"` // image
}

// Source is an image block's source: {"type":"base64","media_type":…,"data":…}; a "url" source is
// refused (mlxg fetches nothing).
type Source struct {
	Type      string `json:"type"`
	MediaType string `json:"media_type,omitempty"`
	Data      string `json:"data,omitempty"`
	URL       string `json:"url,omitempty"`
}

// Image returns an image block's bytes.
func (b Block) Image() ([]byte, error) {
	if b.Source == nil {
		return nil, fmt.Errorf("an image block needs a source")
	}
	switch b.Source.Type {
	case "base64":
		return openai.Base64(b.Source.Data)
	case "url":
		return nil, fmt.Errorf("image URLs are not fetched (mlxg reads no network for a request): send the image as a base64 source")
	}
	return nil, fmt.Errorf("image source type %q is not supported (use base64)", b.Source.Type)
}

// Blocks reads a message's content: a string is one text block.
func Blocks(raw json.RawMessage) ([]Block, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("content is required: a string or a list of content blocks")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("content: %v", err)
		}
		return []Block{{Type: "text", Text: s}}, nil
	}
	if raw[0] != '[' {
		return nil, fmt.Errorf("content must be a string or a list of content blocks")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("content must be a string or a list of content blocks: %v", err)
	}
	out := make([]Block, 0, len(items))
	for i, item := range items {
		var b Block
		if err := json.Unmarshal(item, &b); err != nil {
			return nil, fmt.Errorf("content[%d] must be a content block object: %v", i, err)
		}
		if err := b.check(); err != nil {
			return nil, fmt.Errorf("content[%d]: %v", i, err)
		}
		out = append(out, b)
	}
	return out, nil
}

// check validates a request block's fields for its type.
func (b *Block) check() error {
	switch b.Type {
	case "text", "thinking", "redacted_thinking":
	case "tool_use":
		if b.ID == "" || b.Name == "" {
			return fmt.Errorf("tool_use blocks need an id and a name")
		}
		in := bytes.TrimSpace(b.Input)
		if len(in) == 0 || string(in) == "null" {
			b.Input = json.RawMessage("{}")
		} else if in[0] != '{' {
			return fmt.Errorf("tool_use.input must be a JSON object")
		}
	case "tool_result":
		if b.ToolUseID == "" {
			return fmt.Errorf("tool_result blocks need a tool_use_id")
		}
		if _, _, err := b.ResultContent(); err != nil {
			return err
		}
	case "image":
		if _, err := b.Image(); err != nil {
			return err
		}
	case "document":
		return fmt.Errorf("document blocks are not supported: mlxg reads text and images")
	case "":
		return fmt.Errorf("a content block needs a type")
	default:
		return fmt.Errorf("content block type %q is not supported (use text, tool_use, tool_result or thinking)", b.Type)
	}
	return nil
}

// ResultText is a tool_result's content as text: the string, or its text blocks joined; an image is an
// error (ResultContent takes them).
func (b Block) ResultText() (string, error) {
	text, images, err := b.ResultContent()
	if err == nil && len(images) > 0 {
		err = fmt.Errorf("tool_result.content: image blocks are not supported here")
	}
	return text, err
}

// ResultContent is a tool_result's content: the string, or its text blocks joined by newlines, and its
// image blocks' bytes with the byte offset in that text where each stands.
func (b Block) ResultContent() (string, []openai.Image, error) {
	raw := bytes.TrimSpace(b.Content)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, fmt.Errorf("tool_result.content: %v", err)
		}
		return s, nil, nil
	}
	var parts []Block
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, fmt.Errorf("tool_result.content must be a string or a list of text and image blocks")
	}
	var out string
	var images []openai.Image
	for i, p := range parts {
		switch p.Type {
		case "text":
			if out != "" {
				out += "\n"
			}
			out += p.Text
		case "image":
			data, err := p.Image()
			if err != nil {
				return "", nil, fmt.Errorf("tool_result.content[%d]: %v", i, err)
			}
			images = append(images, openai.Image{Data: data, At: len(out)})
		case "document":
			return "", nil, fmt.Errorf("tool_result.content[%d]: document blocks are not supported: mlxg reads text and images", i)
		default:
			return "", nil, fmt.Errorf("tool_result.content[%d]: block type %q is not supported (use text or image)", i, p.Type)
		}
	}
	return out, images, nil
}

// SystemText reads system: a string or a list of text blocks, joined by blank lines.
func SystemText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("system: %v", err)
		}
		return s, nil
	}
	var parts []Block
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("system must be a string or a list of text blocks")
	}
	var out string
	for i, p := range parts {
		if p.Type != "text" {
			return "", fmt.Errorf("system[%d]: block type %q is not supported (system takes text blocks)", i, p.Type)
		}
		if out != "" {
			out += "\n\n"
		}
		out += p.Text
	}
	return out, nil
}

// Usage counts tokens.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

// ReplyBlock is a content block of a reply: unlike Block, it always writes the fields its type has
// (an empty text, a thinking block's signature, a tool_use's input).
type ReplyBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature *string         `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// TextBlock, ThinkingBlock and ToolUseBlock build reply blocks.
func TextBlock(text string) ReplyBlock { return ReplyBlock{Type: "text", Text: &text} }

func ThinkingBlock(thinking string) ReplyBlock {
	sig := ""
	return ReplyBlock{Type: "thinking", Thinking: &thinking, Signature: &sig}
}

func ToolUseBlock(id, name string, input json.RawMessage) ReplyBlock {
	return ReplyBlock{Type: "tool_use", ID: id, Name: name, Input: input}
}

// Reply is a non-streamed reply.
type Reply struct {
	ID           string       `json:"id"`
	Type         string       `json:"type"` // "message"
	Role         string       `json:"role"` // "assistant"
	Model        string       `json:"model"`
	Content      []ReplyBlock `json:"content"`
	StopReason   *string      `json:"stop_reason"`
	StopSequence *string      `json:"stop_sequence"`
	Usage        Usage        `json:"usage"`
}

// Stream events.

// MessageStart is the first event.
type MessageStart struct {
	Type    string `json:"type"` // "message_start"
	Message Reply  `json:"message"`
}

// ContentBlockStart opens block Index.
type ContentBlockStart struct {
	Type         string     `json:"type"` // "content_block_start"
	Index        int        `json:"index"`
	ContentBlock ReplyBlock `json:"content_block"`
}

// Delta is a content_block_delta's change: text_delta, thinking_delta or input_json_delta.
type Delta struct {
	Type        string  `json:"type"`
	Text        *string `json:"text,omitempty"`
	Thinking    *string `json:"thinking,omitempty"`
	PartialJSON *string `json:"partial_json,omitempty"`
}

// ContentBlockDelta adds to block Index.
type ContentBlockDelta struct {
	Type  string `json:"type"` // "content_block_delta"
	Index int    `json:"index"`
	Delta Delta  `json:"delta"`
}

// ContentBlockStop closes block Index.
type ContentBlockStop struct {
	Type  string `json:"type"` // "content_block_stop"
	Index int    `json:"index"`
}

// MessageDeltaBody is message_delta's delta.
type MessageDeltaBody struct {
	StopReason   *string `json:"stop_reason"`
	StopSequence *string `json:"stop_sequence"`
}

// MessageDelta ends the message: why, and the final token counts (cumulative).
type MessageDelta struct {
	Type  string           `json:"type"` // "message_delta"
	Delta MessageDeltaBody `json:"delta"`
	Usage Usage            `json:"usage"`
}

// Event is an event with nothing but its type (message_stop, ping).
type Event struct {
	Type string `json:"type"`
}
