// Package openai holds the wire types of the OpenAI endpoints mlxg serves: /v1/chat/completions,
// /v1/completions, /v1/models, /v1/models/{id} and /v1/embeddings, and the OpenAI error shape.
//
// Thinking is sent as "reasoning_content" (the field DeepSeek's API, vLLM and Open WebUI use) and as
// "reasoning" (Ollama's field); both are read on input.
package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// ErrorResponse is OpenAI's error body.
type ErrorResponse struct {
	Error Error `json:"error"`
}

// Error is one error.
type Error struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   any     `json:"param"`
	Code    *string `json:"code"`
}

// NewError builds the error for an HTTP status.
func NewError(status int, message string) ErrorResponse {
	t := "api_error"
	switch {
	case status == http.StatusNotFound:
		t = "not_found_error"
	case status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable:
		t = "server_overloaded"
	case status >= 400 && status < 500:
		t = "invalid_request_error"
	}
	return ErrorResponse{Error{Type: t, Message: message}}
}

// Message is a chat message. Content is a string, a list of parts ({"type":"text","text":…}), or null.
type Message struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content,omitempty"`
	Name             string          `json:"name,omitempty"`
	ToolCalls        []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID       string          `json:"tool_call_id,omitempty"`
	Reasoning        string          `json:"reasoning,omitempty"`
	ReasoningContent string          `json:"reasoning_content,omitempty"`
}

// Image is an image a message carries: its bytes, and the byte offset in the message's text where it
// stands (its parts' order).
type Image struct {
	Data []byte
	At   int
}

// Text returns the message's text: the string, or the text parts joined. An image part is an error; a
// route that takes images reads Content.
func (m Message) Text() (string, error) {
	text, images, err := m.TextImages()
	if err == nil && len(images) > 0 {
		err = fmt.Errorf("image content is not supported here")
	}
	return text, err
}

// Content returns the message's text (the string, or the text parts joined) and its images, read from
// image_url parts whose url is a data URL.
func (m Message) TextImages() (string, []Image, error) {
	if len(m.Content) == 0 || string(m.Content) == "null" {
		return "", nil, nil
	}
	var s string
	if json.Unmarshal(m.Content, &s) == nil {
		return s, nil, nil
	}
	var parts []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		ImageURL json.RawMessage `json:"image_url"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", nil, fmt.Errorf("message content must be a string or a list of content parts")
	}
	var out string
	var images []Image
	for i, p := range parts {
		switch p.Type {
		case "text", "input_text":
			out += p.Text
		case "image_url", "input_image":
			url, err := imageURLField(p.ImageURL)
			if err != nil {
				return "", nil, fmt.Errorf("content[%d].image_url: %v", i, err)
			}
			data, err := DataURL(url)
			if err != nil {
				return "", nil, fmt.Errorf("content[%d].image_url: %v", i, err)
			}
			images = append(images, Image{Data: data, At: len(out)})
		default:
			return "", nil, fmt.Errorf("unsupported content part type %q (want \"text\" or \"image_url\")", p.Type)
		}
	}
	return out, images, nil
}

// imageURLField reads image_url: {"url": …, "detail": …} as chat completions send it, or a bare string
// as /v1/responses' input_image does.
func imageURLField(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", fmt.Errorf("an image part needs an image_url")
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var o struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal(raw, &o); err != nil || o.URL == "" {
		return "", fmt.Errorf("must be a string or an object with a url")
	}
	return o.URL, nil
}

// DataURL returns the bytes of a data URL (data:image/png;base64,…). mlxg fetches nothing: an http(s)
// URL is an error that says to send the bytes instead.
func DataURL(url string) ([]byte, error) {
	switch {
	case strings.HasPrefix(url, "http://"), strings.HasPrefix(url, "https://"):
		return nil, fmt.Errorf("image URLs are not fetched (mlxg reads no network for a request): send the image as a data URL, data:image/png;base64,…")
	case !strings.HasPrefix(url, "data:"):
		return nil, fmt.Errorf("the image must be a data URL (data:image/png;base64,…)")
	}
	meta, payload, ok := strings.Cut(url[len("data:"):], ",")
	if !ok {
		return nil, fmt.Errorf("the data URL has no comma before its data")
	}
	if !strings.HasSuffix(meta, ";base64") {
		return nil, fmt.Errorf("the data URL must be base64 (data:image/png;base64,…)")
	}
	return Base64(payload)
}

// Base64 decodes an image's base64 text (standard or URL alphabet, padded or not, line breaks ignored).
func Base64(s string) ([]byte, error) {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == ' ' {
			return -1
		}
		return r
	}, s)
	if s == "" {
		return nil, fmt.Errorf("the image data is empty")
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	_, err := base64.StdEncoding.DecodeString(s)
	return nil, fmt.Errorf("the image data is not valid base64: %v", err)
}

// ToolCall is a call in a message or a streamed delta. Arguments is a JSON string.
type ToolCall struct {
	Index    *int         `json:"index,omitempty"`
	ID       string       `json:"id,omitempty"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall is the function a ToolCall calls.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is an offered tool; Function keeps its JSON as sent (name, description, parameters).
type Tool struct {
	Type     string          `json:"type"`
	Function json.RawMessage `json:"function"`
}

// StreamOptions asks for a final usage chunk.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// ResponseFormat is response_format: type "text", "json_object" or "json_schema" (with
// json_schema: {"name", "schema", "strict", "description"}).
type ResponseFormat struct {
	Type       string          `json:"type"`
	JSONSchema json.RawMessage `json:"json_schema,omitempty"`
}

// Reasoning is the reasoning object ({"effort": …}).
type Reasoning struct {
	Effort string `json:"effort,omitempty"`
}

// ChatCompletionRequest is the body of POST /v1/chat/completions.
type ChatCompletionRequest struct {
	Model               string          `json:"model"`
	Messages            []Message       `json:"messages"`
	Stream              bool            `json:"stream"`
	StreamOptions       *StreamOptions  `json:"stream_options"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	N                   *int            `json:"n"`
	Seed                *int            `json:"seed"`
	Stop                json.RawMessage `json:"stop"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	ResponseFormat      *ResponseFormat `json:"response_format"`
	Tools               []Tool          `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	Reasoning           *Reasoning      `json:"reasoning"`
	ReasoningEffort     *string         `json:"reasoning_effort"`
	Logprobs            *bool           `json:"logprobs"`
	NumDraft            *int            `json:"num_draft"` // mlxg's extension: options.num_draft
	TopLogprobs         *int            `json:"top_logprobs"`
	// Truncate true (mlxg's extension) cuts a prompt over the context as Ollama does; absent or false,
	// such a prompt is OpenAI's 400 context_length_exceeded.
	Truncate *bool `json:"truncate,omitempty"`
}

// Stops reads stop: a string or a list of strings.
func Stops(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("stop must be a string or a list of strings")
	}
	return list, nil
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// Choice is one non-streamed answer.
type Choice struct {
	Index        int             `json:"index"`
	Message      Message         `json:"message"`
	Logprobs     *ChoiceLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// ChatCompletion is a non-streamed reply.
type ChatCompletion struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"` // "chat.completion"
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	SystemFingerprint string   `json:"system_fingerprint"`
	Choices           []Choice `json:"choices"`
	Usage             Usage    `json:"usage"`
}

// Delta is the change a chunk carries.
type Delta struct {
	Role             string     `json:"role,omitempty"`
	Content          *string    `json:"content,omitempty"`
	Reasoning        string     `json:"reasoning,omitempty"`
	ReasoningContent string     `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall `json:"tool_calls,omitempty"`
}

// ChunkChoice is one streamed choice.
type ChunkChoice struct {
	Index        int             `json:"index"`
	Delta        Delta           `json:"delta"`
	Logprobs     *ChoiceLogprobs `json:"logprobs"`
	FinishReason *string         `json:"finish_reason"`
}

// ChatCompletionChunk is one SSE event of a streamed reply.
type ChatCompletionChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"` // "chat.completion.chunk"
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []ChunkChoice `json:"choices"`
	Usage             *Usage        `json:"usage,omitempty"`
}

// CompletionRequest is the body of POST /v1/completions (one prompt string).
type CompletionRequest struct {
	Model            string          `json:"model"`
	Prompt           json.RawMessage `json:"prompt"`
	Suffix           string          `json:"suffix"`
	MaxTokens        *int            `json:"max_tokens"`
	N                *int            `json:"n"`
	Seed             *int            `json:"seed"`
	Stop             json.RawMessage `json:"stop"`
	Stream           bool            `json:"stream"`
	StreamOptions    *StreamOptions  `json:"stream_options"`
	Temperature      *float64        `json:"temperature"`
	TopP             *float64        `json:"top_p"`
	FrequencyPenalty *float64        `json:"frequency_penalty"`
	PresencePenalty  *float64        `json:"presence_penalty"`
	Echo             bool            `json:"echo"`
	Logprobs         *int            `json:"logprobs"`           // how many alternatives per token (0 to 20); null: no logprobs
	NumDraft         *int            `json:"num_draft"`          // mlxg's extension: options.num_draft
	Truncate         *bool           `json:"truncate,omitempty"` // mlxg's extension, as on chat completions
}

// CompletionChoice is one completion.
type CompletionChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     any     `json:"logprobs"` // *CompletionLogprobs or nil
	FinishReason *string `json:"finish_reason"`
}

// Completion is a /v1/completions reply, or one chunk of a streamed one (Object "text_completion" for both).
type Completion struct {
	ID                string             `json:"id"`
	Object            string             `json:"object"`
	Created           int64              `json:"created"`
	Model             string             `json:"model"`
	SystemFingerprint string             `json:"system_fingerprint"`
	Choices           []CompletionChoice `json:"choices"`
	Usage             *Usage             `json:"usage,omitempty"`
}

// Model is one entry of /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

// ModelList is /v1/models.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}

// EmbeddingRequest is the body of POST /v1/embeddings. Input is a string or a list of strings.
type EmbeddingRequest struct {
	Model          string          `json:"model"`
	Input          json.RawMessage `json:"input"`
	Dimensions     int             `json:"dimensions,omitempty"`
	EncodingFormat string          `json:"encoding_format,omitempty"` // "float" (default) or "base64"
}

// Inputs reads input: a string or a non-empty list of strings. Token arrays are refused with a clear error.
func Inputs(raw json.RawMessage) ([]string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []string{s}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err == nil && len(list) > 0 {
		return list, nil
	}
	return nil, fmt.Errorf("input must be a string or a non-empty list of strings (token arrays are not supported)")
}

// Embedding is one vector: []float32, or a base64 string of little-endian float32s.
type Embedding struct {
	Object    string `json:"object"` // "embedding"
	Embedding any    `json:"embedding"`
	Index     int    `json:"index"`
}

// EmbeddingList is /v1/embeddings' reply.
type EmbeddingList struct {
	Object string         `json:"object"` // "list"
	Data   []Embedding    `json:"data"`
	Model  string         `json:"model"`
	Usage  EmbeddingUsage `json:"usage"`
}

// EmbeddingUsage counts the input tokens.
type EmbeddingUsage struct {
	PromptTokens int `json:"prompt_tokens"`
	TotalTokens  int `json:"total_tokens"`
}
