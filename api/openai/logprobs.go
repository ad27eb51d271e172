package openai

// ChoiceLogprobs is a chat choice's (or chunk choice's) logprobs.
type ChoiceLogprobs struct {
	Content []TokenLogprob `json:"content"`
	Refusal []TokenLogprob `json:"refusal"` // always null: mlxg does not refuse
}

// TokenLogprob is one generated token: its text, log-probability, UTF-8 bytes and the most
// likely tokens at its position.
type TokenLogprob struct {
	Token       string       `json:"token"`
	Logprob     float64      `json:"logprob"`
	Bytes       []int        `json:"bytes"`
	TopLogprobs []TopLogprob `json:"top_logprobs"`
}

// TopLogprob is one of the most likely tokens at a position.
type TopLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes"`
}

// CompletionLogprobs is a /v1/completions choice's logprobs: OpenAI's legacy fields, and
// Content as Ollama's /v1/completions sends it.
type CompletionLogprobs struct {
	Tokens        []string             `json:"tokens"`
	TokenLogprobs []float64            `json:"token_logprobs"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
	TextOffset    []int                `json:"text_offset"`
	Content       []TokenLogprob       `json:"content"`
}
