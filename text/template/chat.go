package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// Message is one chat message: role, content (a string, or a list of parts such as
// {"type": "text", "text": ...}), and whatever else a template reads: tool_calls,
// tool_call_id, name, reasoning_content, thinking...
type Message = map[string]any

// Options are apply_chat_template's arguments.
type Options struct {
	AddGenerationPrompt bool
	// Tools are tool definitions (JSON schemas); nil renders the template with
	// tools=None. Use json.RawMessage or DecodeJSON results to keep their key order.
	Tools []any
	// Documents for retrieval-augmented templates; nil means documents=None.
	Documents []any
	// Kwargs are extra template variables, e.g. enable_thinking; they override the
	// special tokens (bos_token...) as in transformers.
	Kwargs map[string]any
	// Now is the clock strftime_now reads; nil means time.Now.
	Now func() time.Time
}

// ChatTemplate is a model's chat template with the special tokens transformers passes
// to it (bos_token, eos_token, ...).
type ChatTemplate struct {
	name      string
	templates map[string]*Template
	special   map[string]string
}

// specialTokenNames are the tokenizer attributes transformers puts in a chat template's
// scope (its special_tokens_map), when tokenizer_config.json sets them. A tokenizer
// class's own defaults are not known here (GemmaTokenizer's mask_token "<mask>" is the
// one the conformance models show); no known template reads them.
var specialTokenNames = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// LoadChatTemplate reads a model directory's chat template the way transformers does:
// chat_template.jinja if present, else tokenizer_config.json's chat_template (a
// string, or a list of {name, template}), else chat_template.json; and the special
// tokens from tokenizer_config.json.
func LoadChatTemplate(dir string) (*ChatTemplate, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	var cfg map[string]json.RawMessage
	data, err := os.ReadFile(cfgPath)
	switch {
	case err == nil:
		if err := json.Unmarshal(data, &cfg); err != nil {
			return nil, fmt.Errorf("chat template: %s is not valid JSON: %w", cfgPath, err)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("chat template: %w", err)
	}
	special := map[string]string{}
	for _, name := range specialTokenNames {
		if s := tokenContent(cfg[name]); s != "" {
			special[name] = s
		}
	}
	// Named extra tokens (Gemma 3's boi_token, image_token...) join special_tokens_map too.
	var extra map[string]json.RawMessage
	if json.Unmarshal(cfg["extra_special_tokens"], &extra) == nil {
		for name, raw := range extra {
			if s := tokenContent(raw); s != "" {
				special[name] = s
			}
		}
	}
	sources := map[string]string{}
	origin := ""
	if jinja, err := os.ReadFile(filepath.Join(dir, "chat_template.jinja")); err == nil {
		sources["default"] = string(jinja)
		origin = filepath.Join(dir, "chat_template.jinja")
	} else if raw, ok := cfg["chat_template"]; ok && string(raw) != "null" {
		origin = cfgPath
		if sources, err = templateSources(raw); err != nil {
			return nil, fmt.Errorf("chat template: %s: %w", cfgPath, err)
		}
	} else if data, err := os.ReadFile(filepath.Join(dir, "chat_template.json")); err == nil {
		origin = filepath.Join(dir, "chat_template.json")
		var ct struct {
			ChatTemplate json.RawMessage `json:"chat_template"`
		}
		if err := json.Unmarshal(data, &ct); err != nil || ct.ChatTemplate == nil {
			return nil, fmt.Errorf("chat template: %s has no chat_template string", origin)
		}
		if sources, err = templateSources(ct.ChatTemplate); err != nil {
			return nil, fmt.Errorf("chat template: %s: %w", origin, err)
		}
	} else {
		return nil, fmt.Errorf("chat template: model %s has none (no chat_template.jinja, and tokenizer_config.json sets no chat_template); it is a base model, or its template must be supplied", dir)
	}
	return NewChatTemplate(origin, sources, special)
}

// templateSources reads chat_template: a string, or a list of {"name", "template"}.
func templateSources(raw json.RawMessage) (map[string]string, error) {
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return map[string]string{"default": s}, nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(raw, &list); err != nil || len(list) == 0 {
		return nil, fmt.Errorf("chat_template must be a string or a list of {name, template}")
	}
	out := map[string]string{}
	for _, e := range list {
		out[e.Name] = e.Template
	}
	return out, nil
}

// tokenContent reads a special token written as a string or as an AddedToken object.
func tokenContent(raw json.RawMessage) string {
	if raw == nil {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var tok struct {
		Content string `json:"content"`
	}
	if json.Unmarshal(raw, &tok) == nil {
		return tok.Content
	}
	return ""
}

// NewChatTemplate builds a ChatTemplate from template sources by name ("default",
// "tool_use", ...) and special tokens (bos_token, eos_token, ...). name (a path or a
// model name) appears in errors.
func NewChatTemplate(name string, sources map[string]string, special map[string]string) (*ChatTemplate, error) {
	c := &ChatTemplate{name: name, templates: map[string]*Template{}, special: map[string]string{}}
	for k, v := range special {
		c.special[k] = v
	}
	names := make([]string, 0, len(sources))
	for n := range sources {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		tname := name
		if len(sources) > 1 {
			tname = fmt.Sprintf("%s (template %q)", name, n)
		}
		t, err := Parse(tname, sources[n])
		if err != nil {
			return nil, err
		}
		c.templates[n] = t
	}
	return c, nil
}

// BOS and EOS are the special tokens' text ("" when the tokenizer sets none).
func (c *ChatTemplate) BOS() string { return c.special["bos_token"] }

// EOS is the eos_token's text.
func (c *ChatTemplate) EOS() string { return c.special["eos_token"] }

// SpecialTokens returns the special tokens the template sees, by variable name.
func (c *ChatTemplate) SpecialTokens() map[string]string {
	out := make(map[string]string, len(c.special))
	for k, v := range c.special {
		out[k] = v
	}
	return out
}

// Apply renders a conversation, as transformers' apply_chat_template(messages,
// tools=..., documents=..., add_generation_prompt=..., tokenize=False, **kwargs).
func (c *ChatTemplate) Apply(messages []Message, opts Options) (string, error) {
	t := c.pick(opts.Tools != nil)
	if t == nil {
		return "", fmt.Errorf("chat template %s: no \"default\" template among its named templates", c.name)
	}
	vars := make(map[string]any, len(c.special)+len(opts.Kwargs)+4)
	for k, v := range c.special {
		vars[k] = v
	}
	for k, v := range opts.Kwargs {
		switch k {
		case "messages", "tools", "documents", "add_generation_prompt":
			return "", fmt.Errorf("chat template %s: %s is an argument of its own, not a template kwarg", c.name, k)
		}
		vars[k] = v
	}
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = m
	}
	vars["messages"] = msgs
	vars["tools"] = nil
	if opts.Tools != nil {
		vars["tools"] = opts.Tools
	}
	vars["documents"] = nil
	if opts.Documents != nil {
		for i, d := range opts.Documents {
			if cv, err := convert(d); err != nil || !isDict(cv) {
				return "", fmt.Errorf("chat template %s: document %d is not an object with title and text", c.name, i)
			}
		}
		vars["documents"] = opts.Documents
	}
	vars["add_generation_prompt"] = opts.AddGenerationPrompt
	return t.render(vars, opts.Now)
}

func isDict(v any) bool { _, ok := v.(*Dict); return ok }

// pick chooses among named templates as transformers does: "tool_use" when tools are
// given and it exists, else "default".
func (c *ChatTemplate) pick(tools bool) *Template {
	if t, ok := c.templates["tool_use"]; ok && tools {
		return t
	}
	return c.templates["default"]
}
