package api

// Wire types of Ollama's generate, chat, embed, embeddings and ps endpoints. Field names, JSON names and
// encodings follow Ollama's api/types.go, so Ollama clients read and write them unchanged.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"time"
)

// ImageData is an image's bytes (base64 on the wire).
type ImageData []byte

// UnmarshalJSON reads the base64 string, with an error that says what is wrong with it.
func (d *ImageData) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("an image must be a base64 string")
	}
	if rest, ok := strings.CutPrefix(s, "data:"); ok { // a data URL where Ollama takes bare base64
		if _, data, found := strings.Cut(rest, ";base64,"); found {
			s = data
		}
	}
	v, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if v, err2 := base64.RawStdEncoding.DecodeString(s); err2 == nil {
			*d = v
			return nil
		}
		return fmt.Errorf("an image is not valid base64: %v", err)
	}
	*d = v
	return nil
}

// GenerateRequest is the body of POST /api/generate.
type GenerateRequest struct {
	Model     string          `json:"model"`
	Prompt    string          `json:"prompt"`
	Suffix    string          `json:"suffix"`
	System    string          `json:"system"`
	Template  string          `json:"template"`
	Context   []int           `json:"context,omitempty"`
	Stream    *bool           `json:"stream,omitempty"`
	Raw       bool            `json:"raw,omitempty"`
	Format    json.RawMessage `json:"format,omitempty"`
	KeepAlive *Duration       `json:"keep_alive,omitempty"`
	Images    []ImageData     `json:"images,omitempty"`
	Options   map[string]any  `json:"options"`
	Think     *ThinkValue     `json:"think,omitempty"`
	Truncate  *bool           `json:"truncate,omitempty"`
	Shift     *bool           `json:"shift,omitempty"`
	// Logprobs asks for the generated tokens' log-probabilities, with the TopLogprobs (0 to 20)
	// most likely tokens at each position.
	Logprobs    bool `json:"logprobs,omitempty"`
	TopLogprobs int  `json:"top_logprobs,omitempty"`
}

// ChatRequest is the body of POST /api/chat.
type ChatRequest struct {
	Model     string          `json:"model"`
	Messages  []Message       `json:"messages"`
	Stream    *bool           `json:"stream,omitempty"`
	Format    json.RawMessage `json:"format,omitempty"`
	KeepAlive *Duration       `json:"keep_alive,omitempty"`
	Tools     `json:"tools,omitempty"`
	Options   map[string]any `json:"options"`
	Think     *ThinkValue    `json:"think,omitempty"`
	Truncate  *bool          `json:"truncate,omitempty"`
	Shift     *bool          `json:"shift,omitempty"`
	// Logprobs and TopLogprobs: as GenerateRequest's.
	Logprobs    bool `json:"logprobs,omitempty"`
	TopLogprobs int  `json:"top_logprobs,omitempty"`
}

// Message is one chat message.
type Message struct {
	Role       string      `json:"role"`
	Content    string      `json:"content"`
	Thinking   string      `json:"thinking,omitempty"`
	Images     []ImageData `json:"images,omitempty"`
	ToolCalls  []ToolCall  `json:"tool_calls,omitempty"`
	ToolName   string      `json:"tool_name,omitempty"`
	ToolCallID string      `json:"tool_call_id,omitempty"`
	// ImageAt is where each image stands in Content (byte offsets, in order), for the OpenAI and
	// Anthropic routes whose parts interleave text and images; nil: the images come before the text,
	// as Ollama places them.
	ImageAt []int `json:"-"`
}

// UnmarshalJSON lower-cases the role, as Ollama does.
func (m *Message) UnmarshalJSON(b []byte) error {
	type plain Message
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*m = Message(p)
	m.Role = strings.ToLower(m.Role)
	return nil
}

// ToolCall is a call the model made.
type ToolCall struct {
	ID       string           `json:"id,omitempty"`
	Function ToolCallFunction `json:"function"`
}

// ToolCallFunction names the function and its arguments.
type ToolCallFunction struct {
	Index     int                       `json:"index"`
	Name      string                    `json:"name"`
	Arguments ToolCallFunctionArguments `json:"arguments"`
}

// ToolCallFunctionArguments is a JSON object of arguments that keeps its keys in order.
// Decoded from JSON, it also keeps that JSON (compacted) and marshals to it until Set
// changes it, so nested objects and number kinds (1.0 vs 1) reach the chat template as sent.
type ToolCallFunctionArguments struct {
	obj orderedObject
	raw json.RawMessage
}

// Get returns an argument.
func (a *ToolCallFunctionArguments) Get(key string) (any, bool) {
	v, ok := a.obj.vals[key]
	return v, ok
}

// Set sets an argument, appending new keys at the end.
func (a *ToolCallFunctionArguments) Set(key string, v any) {
	a.obj.set(key, v)
	a.raw = nil
}

// Len is the number of arguments.
func (a *ToolCallFunctionArguments) Len() int { return len(a.obj.keys) }

// Keys lists the argument names in order.
func (a *ToolCallFunctionArguments) Keys() []string { return append([]string(nil), a.obj.keys...) }

// ToMap returns the arguments as a plain map.
func (a *ToolCallFunctionArguments) ToMap() map[string]any {
	m := make(map[string]any, len(a.obj.keys))
	for _, k := range a.obj.keys {
		m[k] = a.obj.vals[k]
	}
	return m
}

func (a *ToolCallFunctionArguments) String() string {
	b, _ := a.MarshalJSON()
	return string(b)
}

func (a *ToolCallFunctionArguments) UnmarshalJSON(b []byte) error {
	a.raw = nil
	if err := a.obj.UnmarshalJSON(b); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	a.raw = buf.Bytes()
	return nil
}

func (a ToolCallFunctionArguments) MarshalJSON() ([]byte, error) {
	if a.raw != nil {
		return a.raw, nil
	}
	return a.obj.MarshalJSON()
}

// Tools is the list of tools a chat request offers.
type Tools []Tool

// Tool is one tool. A decoded Tool keeps the JSON it came from, which the server gives the
// chat template: a schema's key order, number kinds and keys these types do not know reach it as sent.
type Tool struct {
	Type     string       `json:"type"`
	Items    any          `json:"items,omitempty"`
	Function ToolFunction `json:"function"`

	raw json.RawMessage
}

func (t *Tool) UnmarshalJSON(b []byte) error {
	type plain Tool
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*t = Tool(p)
	t.raw = append(json.RawMessage(nil), b...)
	return nil
}

// Raw is the JSON the tool was decoded from (nil for a Tool built in code).
func (t *Tool) Raw() json.RawMessage { return t.raw }

// ToolFunction describes a function the model may call.
type ToolFunction struct {
	Name        string                 `json:"name"`
	Description string                 `json:"description,omitempty"`
	Parameters  ToolFunctionParameters `json:"parameters"`
}

// ToolFunctionParameters is the JSON schema of a function's parameters.
type ToolFunctionParameters struct {
	Type       string             `json:"type"`
	Defs       any                `json:"$defs,omitempty"`
	Items      any                `json:"items,omitempty"`
	Required   []string           `json:"required,omitempty"`
	Properties *ToolPropertiesMap `json:"properties"`
}

// ToolProperty is one parameter's schema.
type ToolProperty struct {
	AnyOf       []ToolProperty     `json:"anyOf,omitempty"`
	Type        PropertyType       `json:"type,omitempty"`
	Items       any                `json:"items,omitempty"`
	Description string             `json:"description,omitempty"`
	Enum        []any              `json:"enum,omitempty"`
	Properties  *ToolPropertiesMap `json:"properties,omitempty"`
	Required    []string           `json:"required,omitempty"`
}

// PropertyType is a JSON schema type: one string or a list.
type PropertyType []string

func (pt *PropertyType) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*pt = []string{s}
		return nil
	}
	var a []string
	if err := json.Unmarshal(data, &a); err != nil {
		return err
	}
	*pt = a
	return nil
}

func (pt PropertyType) MarshalJSON() ([]byte, error) {
	if len(pt) == 1 {
		return json.Marshal(pt[0])
	}
	return json.Marshal([]string(pt))
}

// ToolPropertiesMap maps parameter names to schemas, in order.
type ToolPropertiesMap struct {
	m orderedMap[ToolProperty]
}

// NewToolPropertiesMap makes an empty map.
func NewToolPropertiesMap() *ToolPropertiesMap {
	return &ToolPropertiesMap{m: orderedMap[ToolProperty]{vals: map[string]ToolProperty{}}}
}

// Get returns a property.
func (t *ToolPropertiesMap) Get(key string) (ToolProperty, bool) {
	if t == nil {
		return ToolProperty{}, false
	}
	v, ok := t.m.vals[key]
	return v, ok
}

// Set sets a property, appending new keys at the end.
func (t *ToolPropertiesMap) Set(key string, v ToolProperty) { t.m.set(key, v) }

// Len is the number of properties.
func (t *ToolPropertiesMap) Len() int {
	if t == nil {
		return 0
	}
	return len(t.m.keys)
}

func (t ToolPropertiesMap) MarshalJSON() ([]byte, error) {
	if t.m.vals == nil {
		return []byte("null"), nil
	}
	return t.m.MarshalJSON()
}

func (t *ToolPropertiesMap) UnmarshalJSON(data []byte) error {
	var raw orderedObject
	raw.rawValues = true
	if err := raw.UnmarshalJSON(data); err != nil {
		return err
	}
	*t = *NewToolPropertiesMap()
	for _, k := range raw.keys {
		var p ToolProperty
		if err := json.Unmarshal(raw.vals[k].(json.RawMessage), &p); err != nil {
			return fmt.Errorf("tool parameter %q: %w", k, err)
		}
		t.Set(k, p)
	}
	return nil
}

// GenerateResponse is one line of /api/generate's reply.
type GenerateResponse struct {
	Model      string     `json:"model"`
	CreatedAt  time.Time  `json:"created_at"`
	Response   string     `json:"response"`
	Thinking   string     `json:"thinking,omitempty"`
	Done       bool       `json:"done"`
	DoneReason string     `json:"done_reason,omitempty"`
	Context    []int      `json:"context,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	Metrics
	Logprobs []Logprob `json:"logprobs,omitempty"` // the tokens of this piece (streaming) or of the whole reply
}

// ChatResponse is one line of /api/chat's reply.
type ChatResponse struct {
	Model      string    `json:"model"`
	CreatedAt  time.Time `json:"created_at"`
	Message    Message   `json:"message"`
	Done       bool      `json:"done"`
	DoneReason string    `json:"done_reason,omitempty"`
	Metrics
	Logprobs []Logprob `json:"logprobs,omitempty"` // as GenerateResponse's
}

// TokenLogprob is a token and its log-probability, as Ollama's api.TokenLogprob: the
// token's text, and its raw bytes (a byte-level token may hold part of a UTF-8 character,
// which the text shows as U+FFFD).
type TokenLogprob struct {
	Token   string  `json:"token"`
	Logprob float64 `json:"logprob"`
	Bytes   []int   `json:"bytes,omitempty"`
}

// Logprob is a generated token's log-probability and, when top_logprobs asked for them, the
// most likely tokens at its position (Ollama's api.Logprob).
type Logprob struct {
	TokenLogprob
	TopLogprobs []TokenLogprob `json:"top_logprobs,omitempty"`
}

// Metrics are the counts and durations of a finished request (nanoseconds on the wire).
type Metrics struct {
	TotalDuration      time.Duration `json:"total_duration,omitempty"`
	LoadDuration       time.Duration `json:"load_duration,omitempty"`
	PromptEvalCount    int           `json:"prompt_eval_count,omitempty"`
	PromptEvalDuration time.Duration `json:"prompt_eval_duration,omitempty"`
	EvalCount          int           `json:"eval_count,omitempty"`
	EvalDuration       time.Duration `json:"eval_duration,omitempty"`
	// mlxg's speculative decoding (options.num_draft): tokens drafted, and how many of them
	// the model kept (part of eval_count).
	DraftCount         int `json:"draft_count,omitempty"`
	DraftAcceptedCount int `json:"draft_accepted_count,omitempty"`
}

// EmbedRequest is the body of POST /api/embed; Input is a string or a list of strings.
type EmbedRequest struct {
	Model      string         `json:"model"`
	Input      any            `json:"input"`
	KeepAlive  *Duration      `json:"keep_alive,omitempty"`
	Truncate   *bool          `json:"truncate,omitempty"`
	Dimensions int            `json:"dimensions,omitempty"`
	Options    map[string]any `json:"options"`
}

// EmbedResponse is /api/embed's reply. Its counts are always sent, as Ollama's always are (its load
// duration is never 0): clients such as the AI SDK's Ollama provider require them.
type EmbedResponse struct {
	Model           string        `json:"model"`
	Embeddings      [][]float32   `json:"embeddings"`
	TotalDuration   time.Duration `json:"total_duration"`
	LoadDuration    time.Duration `json:"load_duration"`
	PromptEvalCount int           `json:"prompt_eval_count"`
}

// EmbeddingRequest is the body of the older POST /api/embeddings.
type EmbeddingRequest struct {
	Model     string         `json:"model"`
	Prompt    string         `json:"prompt"`
	KeepAlive *Duration      `json:"keep_alive,omitempty"`
	Options   map[string]any `json:"options"`
}

// EmbeddingResponse is /api/embeddings' reply.
type EmbeddingResponse struct {
	Embedding []float64 `json:"embedding"`
}

// Options are the generation options of a request ("options" holds them by these JSON names).
type Options struct {
	Runner
	NumKeep          int      `json:"num_keep,omitempty"`
	Seed             int      `json:"seed,omitempty"`
	NumPredict       int      `json:"num_predict,omitempty"`
	TopK             int      `json:"top_k,omitempty"`
	TopP             float32  `json:"top_p,omitempty"`
	MinP             float32  `json:"min_p,omitempty"`
	TypicalP         float32  `json:"typical_p,omitempty"`
	RepeatLastN      int      `json:"repeat_last_n,omitempty"`
	Temperature      float32  `json:"temperature,omitempty"`
	RepeatPenalty    float32  `json:"repeat_penalty,omitempty"`
	PresencePenalty  float32  `json:"presence_penalty,omitempty"`
	FrequencyPenalty float32  `json:"frequency_penalty,omitempty"`
	Stop             []string `json:"stop,omitempty"`
	// NumDraft is the most tokens speculative decoding drafts a step (0: none); the server's
	// default (MLXG_NUM_DRAFT) unless a Modelfile or the request sets it.
	NumDraft int `json:"num_draft,omitempty"`
}

// Runner holds the options fixed when a model loads.
type Runner struct {
	NumCtx    int   `json:"num_ctx,omitempty"`
	NumBatch  int   `json:"num_batch,omitempty"`
	NumGPU    int   `json:"num_gpu,omitempty"`
	MainGPU   *int  `json:"main_gpu,omitempty"`
	UseMMap   *bool `json:"use_mmap,omitempty"`
	NumThread int   `json:"num_thread,omitempty"`
}

// DefaultOptions are Ollama's defaults (num_ctx is the server's, see OLLAMA_CONTEXT_LENGTH / MLXG_CONTEXT_LENGTH).
func DefaultOptions() Options {
	return Options{
		NumPredict:    -1,
		NumKeep:       4,
		Temperature:   0.8,
		TopK:          40,
		TopP:          0.9,
		TypicalP:      1.0,
		RepeatLastN:   64,
		RepeatPenalty: 1.0,
		Seed:          -1,
		Runner:        Runner{NumCtx: 4096, NumBatch: 512, NumGPU: -1},
	}
}

// UnknownOptionError is returned by FromMap for a key that is no option; Ollama only logs these, so servers
// may choose to ignore it.
type UnknownOptionError struct{ Key string }

func (e *UnknownOptionError) Error() string { return fmt.Sprintf("unknown option %q", e.Key) }

// FromMap sets the options named in m, checking each value's type with Ollama's messages
// (`option "top_k" must be of type integer`). Unknown keys are skipped and reported with errors.Join of
// UnknownOptionError after every known key was applied.
func (o *Options) FromMap(m map[string]any) error {
	fields := map[string]reflect.Value{}
	v := reflect.ValueOf(o).Elem()
	for _, f := range reflect.VisibleFields(v.Type()) {
		if tag := strings.Split(f.Tag.Get("json"), ",")[0]; tag != "" && tag != "-" {
			fields[tag] = v.FieldByIndex(f.Index)
		}
	}
	var unknown []error
	for key, val := range m {
		field, ok := fields[key]
		if !ok {
			unknown = append(unknown, &UnknownOptionError{Key: key})
			continue
		}
		if val == nil || !field.CanSet() {
			continue
		}
		switch field.Kind() {
		case reflect.Int:
			n, ok := val.(float64)
			if !ok || n != math.Trunc(n) {
				return fmt.Errorf("option %q must be of type integer", key)
			}
			if math.Abs(n) > 1<<53 { // beyond float64's exact integers (and int64's range: 1e30)
				return fmt.Errorf("option %q is %g: out of range", key, n)
			}
			field.SetInt(int64(n))
		case reflect.Float32:
			n, ok := val.(float64)
			if !ok {
				return fmt.Errorf("option %q must be of type float32", key)
			}
			field.SetFloat(n)
		case reflect.Slice:
			list, ok := val.([]any)
			if !ok {
				if s, isStr := val.(string); isStr && key == "stop" {
					list = []any{s} // as OpenAI allows
				} else {
					return fmt.Errorf("option %q must be of type array", key)
				}
			}
			strs := make([]string, len(list))
			for i, item := range list {
				s, ok := item.(string)
				if !ok {
					return fmt.Errorf("option %q must be of an array of strings", key)
				}
				strs[i] = s
			}
			field.Set(reflect.ValueOf(strs))
		case reflect.Pointer:
			switch field.Type().Elem().Kind() {
			case reflect.Bool:
				b, ok := val.(bool)
				if !ok {
					return fmt.Errorf("option %q must be of type boolean", key)
				}
				field.Set(reflect.ValueOf(&b))
			case reflect.Int:
				n, ok := val.(float64)
				if !ok {
					return fmt.Errorf("option %q must be of type integer", key)
				}
				i := int(n)
				field.Set(reflect.ValueOf(&i))
			}
		}
	}
	return errors.Join(unknown...)
}

// ThinkValue is the think field: true/false, or a level "high", "medium", "low", "max".
type ThinkValue struct {
	Value any
}

// Bool reports whether thinking is on in any form.
func (t *ThinkValue) Bool() bool {
	if t == nil {
		return false
	}
	switch v := t.Value.(type) {
	case bool:
		return v
	case string:
		return v != ""
	}
	return false
}

func (t *ThinkValue) UnmarshalJSON(data []byte) error {
	var b bool
	if err := json.Unmarshal(data, &b); err == nil {
		t.Value = b
		return nil
	}
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		switch s {
		case "high", "medium", "low", "max":
			t.Value = s
			return nil
		}
		return fmt.Errorf("invalid think value: %q (must be \"high\", \"medium\", \"low\", \"max\", true, or false)", s)
	}
	return errors.New(`think must be a boolean or string ("high", "medium", "low", "max", true, or false)`)
}

func (t *ThinkValue) MarshalJSON() ([]byte, error) {
	if t == nil || t.Value == nil {
		return []byte("null"), nil
	}
	return json.Marshal(t.Value)
}

// Duration is keep_alive: a Go duration string or a number of seconds; negative means forever.
type Duration struct {
	time.Duration
}

func (d Duration) MarshalJSON() ([]byte, error) {
	if d.Duration < 0 {
		return []byte("-1"), nil
	}
	return []byte(`"` + d.Duration.String() + `"`), nil
}

func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	switch t := v.(type) {
	case float64:
		if t < 0 || t*float64(time.Second) > math.MaxInt64 {
			d.Duration = time.Duration(math.MaxInt64)
		} else {
			d.Duration = time.Duration(t * float64(time.Second))
		}
	case string:
		dur, err := time.ParseDuration(t)
		if err != nil {
			return fmt.Errorf("keep_alive %q: %w (write a duration such as \"5m\" or a number of seconds)", t, err)
		}
		if dur < 0 {
			dur = time.Duration(math.MaxInt64)
		}
		d.Duration = dur
	default:
		return fmt.Errorf("keep_alive must be a duration string such as \"5m\" or a number of seconds, not %s", string(b))
	}
	return nil
}

// orderedMap is a JSON object's members in the order they came (or were set), which tool schemas and call
// arguments keep for the chat template.
type orderedMap[V any] struct {
	keys []string
	vals map[string]V
}

func (m *orderedMap[V]) set(key string, v V) {
	if m.vals == nil {
		m.vals = map[string]V{}
	}
	if _, ok := m.vals[key]; !ok {
		m.keys = append(m.keys, key)
	}
	m.vals[key] = v
}

func (m orderedMap[V]) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range m.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		vb, err := json.Marshal(m.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// orderedObject is a JSON object that remembers its key order (top level only: nested objects decode to maps,
// or stay raw with rawValues).
type orderedObject struct {
	orderedMap[any]
	rawValues bool
}

func (o *orderedObject) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return fmt.Errorf("want a JSON object, got %s", string(data))
	}
	o.keys, o.vals = nil, map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return err
		}
		if o.rawValues {
			o.set(key, raw)
			continue
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return err
		}
		o.set(key, v)
	}
	_, err = dec.Token()
	return err
}
