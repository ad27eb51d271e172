package openai

// Wire types of OpenAI's Responses API (POST /v1/responses) as mlxg serves it: input as a string or a list
// of items (messages, function_call, function_call_output, reasoning), function tools, and the response
// object with its output items (reasoning, message, function_call) and streaming events.

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// ResponsesRequest is the body of POST /v1/responses.
type ResponsesRequest struct {
	Model              string           `json:"model"`
	Input              json.RawMessage  `json:"input"`
	Instructions       json.RawMessage  `json:"instructions,omitempty"`
	Tools              []ResponsesTool  `json:"tools,omitempty"`
	ToolChoice         json.RawMessage  `json:"tool_choice,omitempty"`
	MaxOutputTokens    *int             `json:"max_output_tokens,omitempty"`
	Temperature        *float64         `json:"temperature,omitempty"`
	TopP               *float64         `json:"top_p,omitempty"`
	Stream             bool             `json:"stream,omitempty"`
	Reasoning          *Reasoning       `json:"reasoning,omitempty"`
	Text               *ResponsesText   `json:"text,omitempty"`
	PreviousResponseID string           `json:"previous_response_id,omitempty"`
	Store              *bool            `json:"store,omitempty"`
	Metadata           map[string]any   `json:"metadata,omitempty"`
	ParallelToolCalls  *bool            `json:"parallel_tool_calls,omitempty"`
	Truncation         string           `json:"truncation,omitempty"`
	Background         bool             `json:"background,omitempty"`
	Conversation       json.RawMessage  `json:"conversation,omitempty"`
	Prompt             json.RawMessage  `json:"prompt,omitempty"`
	StreamOptions      *json.RawMessage `json:"stream_options,omitempty"`
	NumDraft           *int             `json:"num_draft,omitempty"` // mlxg's extension: options.num_draft
}

// ResponsesTool is a tool of a Responses request: a "function", or a "namespace" whose Tools are
// functions (Codex declares each MCP server and tool family so); the model runs no other kind.
type ResponsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
	Tools       []ResponsesTool `json:"tools,omitempty"` // namespace: its members
}

// ResponsesText is the text config; Format is {"type": "text" | "json_object" | "json_schema", ...}.
type ResponsesText struct {
	Format    *ResponsesFormat `json:"format,omitempty"`
	Verbosity string           `json:"verbosity,omitempty"`
}

// ResponsesFormat is text.format.
type ResponsesFormat struct {
	Type        string          `json:"type"`
	Name        string          `json:"name,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	Strict      *bool           `json:"strict,omitempty"`
}

// InputItem is one item of input (and of what a stored response keeps). Which fields are set depends on
// Type; a message may leave Type empty ({"role": …, "content": …}).
type InputItem struct {
	Type    string          `json:"type,omitempty"`
	ID      string          `json:"id,omitempty"`
	Role    string          `json:"role,omitempty"`
	Content json.RawMessage `json:"content,omitempty"` // message: string or parts; reasoning: reasoning_text parts
	Status  string          `json:"status,omitempty"`

	CallID    string          `json:"call_id,omitempty"`   // function_call, function_call_output
	Name      string          `json:"name,omitempty"`      // function_call
	Namespace string          `json:"namespace,omitempty"` // function_call of a namespace's member
	Arguments string          `json:"arguments,omitempty"` // function_call: a JSON object in a string
	Output    json.RawMessage `json:"output,omitempty"`    // function_call_output: string or parts

	Summary []TextPart `json:"summary,omitempty"` // reasoning
}

// TextPart is a typed text part: input_text, output_text, summary_text, reasoning_text...
type TextPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// InputItems reads input: a string is one user message.
func InputItems(raw json.RawMessage) ([]InputItem, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, fmt.Errorf("input is required: a string or a list of input items")
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("input: %v", err)
		}
		content, _ := json.Marshal(s)
		return []InputItem{{Type: "message", Role: "user", Content: content}}, nil
	}
	var raws []json.RawMessage
	if raw[0] != '[' || json.Unmarshal(raw, &raws) != nil {
		return nil, fmt.Errorf("input must be a string or a list of input items")
	}
	out := make([]InputItem, len(raws))
	for i, r := range raws {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, fmt.Errorf("input[%d] must be an input item object: %v", i, err)
		}
		if out[i].Type == "" && out[i].Role != "" {
			out[i].Type = "message"
		}
	}
	return out, nil
}

// PartsText reads a message's content (a string, or a list of text parts) as text; an image is an
// error (PartsImages takes them).
func PartsText(raw json.RawMessage) (string, error) {
	text, images, err := PartsImages(raw)
	if err == nil && len(images) > 0 {
		err = fmt.Errorf("input_image is not supported here")
	}
	return text, err
}

// PartsImages reads a message's content (a string, or a list of parts) as its text and its images:
// input_image parts whose image_url is a data URL. Files and audio are refused.
func PartsImages(raw json.RawMessage) (string, []Image, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", nil, err
		}
		return s, nil, nil
	}
	var parts []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		Refusal  string          `json:"refusal"`
		ImageURL json.RawMessage `json:"image_url"`
		FileID   string          `json:"file_id"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, fmt.Errorf("content must be a string or a list of content parts")
	}
	var out string
	var images []Image
	for i, p := range parts {
		switch p.Type {
		case "input_text", "output_text", "text", "summary_text", "reasoning_text":
			out += p.Text
		case "refusal":
			out += p.Refusal
		case "input_image":
			if p.FileID != "" && len(p.ImageURL) == 0 {
				return "", nil, fmt.Errorf("content[%d]: input_image by file_id is not supported: send image_url as a data URL", i)
			}
			url, err := imageURLField(p.ImageURL)
			if err != nil {
				return "", nil, fmt.Errorf("content[%d].image_url: %v", i, err)
			}
			data, err := DataURL(url)
			if err != nil {
				return "", nil, fmt.Errorf("content[%d].image_url: %v", i, err)
			}
			images = append(images, Image{Data: data, At: len(out)})
		case "input_file", "input_audio":
			return "", nil, fmt.Errorf("content[%d]: %s is not supported: mlxg reads text and images", i, p.Type)
		default:
			return "", nil, fmt.Errorf("content[%d]: part type %q is not supported (use input_text or input_image)", i, p.Type)
		}
	}
	return out, images, nil
}

// Response is the response object: the reply of a whole request, and the snapshot lifecycle events carry.
type Response struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"` // "response"
	CreatedAt          int64             `json:"created_at"`
	CompletedAt        *int64            `json:"completed_at"`
	Status             string            `json:"status"` // "in_progress", "completed", "incomplete", "failed"
	Error              *ResponseError    `json:"error"`
	IncompleteDetails  *IncompleteReason `json:"incomplete_details"`
	Instructions       *string           `json:"instructions"`
	MaxOutputTokens    *int              `json:"max_output_tokens"`
	Model              string            `json:"model"`
	Output             []OutputItem      `json:"output"`
	OutputText         string            `json:"output_text"`
	ParallelToolCalls  bool              `json:"parallel_tool_calls"`
	PreviousResponseID *string           `json:"previous_response_id"`
	Reasoning          Reasoning         `json:"reasoning"`
	Store              bool              `json:"store"`
	Temperature        *float64          `json:"temperature"`
	Text               ResponsesText     `json:"text"`
	ToolChoice         json.RawMessage   `json:"tool_choice"`
	Tools              []ResponsesTool   `json:"tools"`
	TopP               *float64          `json:"top_p"`
	Truncation         string            `json:"truncation"`
	Usage              *ResponsesUsage   `json:"usage"`
	Metadata           map[string]any    `json:"metadata"`
}

// ResponseError is a failed response's error.
type ResponseError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// IncompleteReason says why a response is incomplete ("max_output_tokens").
type IncompleteReason struct {
	Reason string `json:"reason"`
}

// ResponsesUsage counts tokens.
type ResponsesUsage struct {
	InputTokens         int                `json:"input_tokens"`
	InputTokensDetails  InputTokenDetails  `json:"input_tokens_details"`
	OutputTokens        int                `json:"output_tokens"`
	OutputTokensDetails OutputTokenDetails `json:"output_tokens_details"`
	TotalTokens         int                `json:"total_tokens"`
}

// InputTokenDetails are the details of the input tokens.
type InputTokenDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// OutputTokenDetails are the details of the output tokens.
type OutputTokenDetails struct {
	ReasoningTokens int `json:"reasoning_tokens"`
}

// OutputItem is one output item: a reasoning item, a message or a function call.
type OutputItem struct {
	Type   string `json:"type"`
	ID     string `json:"id"`
	Status string `json:"status"`

	Role    string        `json:"role,omitempty"`    // message: "assistant"
	Content *[]OutputPart `json:"content,omitempty"` // message: output_text parts; reasoning: reasoning_text parts
	Summary *[]OutputPart `json:"summary,omitempty"` // reasoning (always a list, maybe empty)

	CallID    string  `json:"call_id,omitempty"`   // function_call
	Name      string  `json:"name,omitempty"`      // function_call
	Namespace string  `json:"namespace,omitempty"` // function_call of a namespace's member
	Arguments *string `json:"arguments,omitempty"` // function_call
}

// OutputPart is a part of an output item: {"type":"output_text","text","annotations":[],"logprobs":[]} or
// {"type":"reasoning_text","text"}.
type OutputPart struct {
	Type        string `json:"type"`
	Text        string `json:"text"`
	Annotations *[]any `json:"annotations,omitempty"`
	Logprobs    *[]any `json:"logprobs,omitempty"`
}

// StreamEvent is one event of a streamed response; the fields used depend on Type.
type StreamEvent struct {
	Type           string      `json:"type"`
	SequenceNumber int         `json:"sequence_number"`
	Response       *Response   `json:"response,omitempty"`
	OutputIndex    *int        `json:"output_index,omitempty"`
	ContentIndex   *int        `json:"content_index,omitempty"`
	ItemID         string      `json:"item_id,omitempty"`
	Item           *OutputItem `json:"item,omitempty"`
	Part           *OutputPart `json:"part,omitempty"`
	Delta          *string     `json:"delta,omitempty"`
	Text           *string     `json:"text,omitempty"`
	Arguments      *string     `json:"arguments,omitempty"`
	Name           string      `json:"name,omitempty"`
	Logprobs       *[]any      `json:"logprobs,omitempty"`
	// error events
	Code    *string `json:"code,omitempty"`
	Message string  `json:"message,omitempty"`
	Param   *string `json:"param,omitempty"`
}
