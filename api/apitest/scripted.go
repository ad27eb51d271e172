// Package apitest builds what the server's tests need: a real checkpoint whose replies are known in advance,
// so that tests through real clients (ollama-js, openai-node, Ollama's and OpenAI's Go SDKs) can assert
// exact text, thinking and tool calls from a model the engine actually runs.
//
// The checkpoint is a one-layer Llama whose attention and MLP write nothing (zero output projections), so
// the last hidden state is the current token's embedding: each scripted token has a one-hot embedding, and
// the output head maps it to the next token of its script with a large logit margin (about 32 nats), so
// sampling at any usual temperature follows the script. A token outside every script has a zero embedding,
// hence all-zero logits: greedy decoding then repeats token 0 forever (a long generation for cancellation
// tests).
package apitest

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// Script is one reply: when the prompt's last token is After (a token's exact text), the model writes Reply
// and then its end-of-sequence token.
type Script struct {
	After string
	Reply string
}

// Qwen3 scripts for a checkpoint with Qwen3's tokenizer and chat template: with thinking on (the prompt ends
// "<|im_start|>assistant\n") the model thinks and calls get_weather; with thinking off (the template
// appends an empty think block, so the prompt ends "\n\n") it answers in plain text.
var Qwen3 = []Script{
	{After: "\n", Reply: ToolReply},
	{After: "\n\n", Reply: PlainReply},
}

// The scripted replies and what a client sees of them.
const (
	ToolReply     = `<think>Weather needs a tool</think><tool_call>{"name":"get_weather","arguments":{"city": "Paris"}}</tool_call>`
	ToolThinking  = "Weather needs a tool"
	ToolName      = "get_weather"
	ToolArguments = `{"city":"Paris"}`
	PlainReply    = "The weather in Paris is sunny."
)

const hidden = 64

// WriteScripted writes the checkpoint into dir (config.json, generation_config.json, model.safetensors and
// the tokenizer files copied from tokenizerDir). It fails when two scripts give one token two successors.
func WriteScripted(dir, tokenizerDir string, scripts []Script) error {
	tok, err := tokenizer.Load(tokenizerDir)
	if err != nil {
		return err
	}
	eos := tok.EOS()
	if len(eos) == 0 {
		return fmt.Errorf("tokenizer in %s has no EOS token", tokenizerDir)
	}
	next := map[int32]int32{}
	var order []int32
	for _, s := range scripts {
		first, ok := tok.TokenID(s.After)
		if !ok {
			ids := tok.Encode(s.After, false)
			if len(ids) != 1 {
				return fmt.Errorf("script after %q: that text is %d tokens, not one", s.After, len(ids))
			}
			first = ids[0]
		}
		seq := append([]int32{first}, tok.Encode(s.Reply, false)...)
		seq = append(seq, eos[0])
		for i := 0; i+1 < len(seq); i++ {
			a, b := seq[i], seq[i+1]
			if prev, ok := next[a]; ok && prev != b {
				return fmt.Errorf("script %q: token %q is followed by both %q and %q; reword the script", s.Reply, tok.Token(a), tok.Token(prev), tok.Token(b))
			}
			if _, ok := next[a]; !ok {
				order = append(order, a)
			}
			next[a] = b
		}
	}
	if len(order) > hidden {
		return fmt.Errorf("scripts use %d distinct tokens; at most %d fit", len(order), hidden)
	}
	vocab := tok.VocabSize()
	for _, id := range eos {
		vocab = max(vocab, int(id)+1)
	}
	vocab = (vocab + 127) / 128 * 128

	embed := make([]float32, vocab*hidden)
	head := make([]float32, vocab*hidden)
	for k, a := range order {
		embed[int(a)*hidden+k] = 1
		head[int(next[a])*hidden+k] = 4 // the normed hidden state is 8 at k: a logit of 32
	}
	ones := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = 1
		}
		return v
	}
	const heads, kvHeads, headDim, inter = 2, 1, 64, 64
	tensors := []struct {
		name  string
		shape []int
		data  []float32
	}{
		{"model.embed_tokens.weight", []int{vocab, hidden}, embed},
		{"lm_head.weight", []int{vocab, hidden}, head},
		{"model.norm.weight", []int{hidden}, ones(hidden)},
		{"model.layers.0.input_layernorm.weight", []int{hidden}, ones(hidden)},
		{"model.layers.0.post_attention_layernorm.weight", []int{hidden}, ones(hidden)},
		{"model.layers.0.self_attn.q_proj.weight", []int{heads * headDim, hidden}, nil},
		{"model.layers.0.self_attn.k_proj.weight", []int{kvHeads * headDim, hidden}, nil},
		{"model.layers.0.self_attn.v_proj.weight", []int{kvHeads * headDim, hidden}, nil},
		{"model.layers.0.self_attn.o_proj.weight", []int{hidden, heads * headDim}, nil},
		{"model.layers.0.mlp.gate_proj.weight", []int{inter, hidden}, nil},
		{"model.layers.0.mlp.up_proj.weight", []int{inter, hidden}, nil},
		{"model.layers.0.mlp.down_proj.weight", []int{hidden, inter}, nil},
	}
	var out []safetensors.Tensor
	for _, t := range tensors {
		n := 1
		for _, d := range t.shape {
			n *= d
		}
		data := make([]byte, 2*n)
		for i, v := range t.data {
			binary.LittleEndian.PutUint16(data[2*i:], half.F32ToF16(v))
		}
		out = append(out, safetensors.Tensor{TensorInfo: safetensors.TensorInfo{Name: t.name, DType: "F16", Shape: t.shape}, Data: data})
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), out, map[string]string{"format": "pt"}); err != nil {
		return err
	}
	config := map[string]any{
		"architectures": []string{"LlamaForCausalLM"}, "model_type": "llama", "hidden_size": hidden,
		"intermediate_size": inter, "num_hidden_layers": 1, "num_attention_heads": heads,
		"num_key_value_heads": kvHeads, "head_dim": headDim, "rms_norm_eps": 1e-6, "vocab_size": vocab,
		"max_position_embeddings": 8192, "rope_theta": 10000.0, "tie_word_embeddings": false,
		"torch_dtype": "float16", "eos_token_id": eos,
	}
	if err := writeJSON(filepath.Join(dir, "config.json"), config); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(dir, "generation_config.json"), map[string]any{"eos_token_id": eos}); err != nil {
		return err
	}
	for _, f := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := os.ReadFile(filepath.Join(tokenizerDir, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
