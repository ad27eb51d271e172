package main

// GGUF for llama.cpp from the bench's own MLX 4-bit checkpoints.
//
// The stream scenario compares mlxg with llama.cpp on the same weights. Ollama v0.17.4,
// the bench's usual converter, does not convert Qwen3 or Qwen3-MoE safetensors, and
// quantizes only to Q4_K and Q8_0, which llama.cpp's CPU backend repacks into memory of
// its own at load (so under a memory cap it copies the weights instead of reading them
// from the mapping). MLX's affine 4-bit format maps exactly onto GGUF's Q4_1: a group of
// 64 codes with a scale and a bias is two Q4_1 blocks of 32 with that scale (d) and bias
// (m), the bf16 scales and biases becoming fp16 without rounding at these magnitudes.
// So the GGUF written here holds the very weights mlxg runs, in a format llama.cpp reads
// in place. Norms and the 8-bit routers are written as float32. The tokenizer is Qwen's
// (tokenizer.json of a Qwen checkpoint), padded to the model's vocabulary.

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"

	"github.com/mlxg/mlxg/internal/half"
	"github.com/mlxg/mlxg/registry/safetensors"
)

const (
	ggmlF32   = 0
	ggmlQ4_1  = 3
	ggufAlign = 32
)

// ggufTensor is one tensor to write: its GGUF name, dims (innermost first) and bytes.
type ggufTensor struct {
	name string
	dims []uint64
	typ  uint32
	data func() ([]byte, error)
	size uint64
}

// writeGGUF converts the MLX 4-bit qwen3 or qwen3_moe checkpoint in dir, with the
// tokenizer.json in tokDir, into a Q4_1 GGUF at out (kept when it exists).
func writeGGUF(dir, tokDir, out string) error {
	if _, err := os.Stat(out); err == nil {
		return nil
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return err
	}
	var cfg struct {
		ModelType    string  `json:"model_type"`
		Hidden       int     `json:"hidden_size"`
		Inter        int     `json:"intermediate_size"`
		Layers       int     `json:"num_hidden_layers"`
		Heads        int     `json:"num_attention_heads"`
		KVHeads      int     `json:"num_key_value_heads"`
		HeadDim      int     `json:"head_dim"`
		MaxPos       int     `json:"max_position_embeddings"`
		Theta        float64 `json:"rope_theta"`
		Eps          float64 `json:"rms_norm_eps"`
		Vocab        int     `json:"vocab_size"`
		Experts      int     `json:"num_experts"`
		TopK         int     `json:"num_experts_per_tok"`
		MoEInter     int     `json:"moe_intermediate_size"`
		Quantization struct {
			Bits  int `json:"bits"`
			Group int `json:"group_size"`
		} `json:"quantization"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return err
	}
	arch := map[string]string{"qwen3": "qwen3", "qwen3_moe": "qwen3moe"}[cfg.ModelType]
	if arch == "" || cfg.Quantization.Bits != 4 || cfg.Quantization.Group%32 != 0 {
		return fmt.Errorf("GGUF: only MLX 4-bit qwen3 and qwen3_moe checkpoints (groups a multiple of 32), not %s at %d bits in groups of %d",
			cfg.ModelType, cfg.Quantization.Bits, cfg.Quantization.Group)
	}
	ck, err := safetensors.OpenDir(dir)
	if err != nil {
		return err
	}
	defer ck.Close()

	var tensors []ggufTensor
	add := func(ggufName, key string) error {
		t, ok := ck.Tensor(key + ".weight")
		if !ok {
			return fmt.Errorf("GGUF: %s has no %s.weight", dir, key)
		}
		if t.DType != safetensors.U32 {
			// A float vector (norms): float32.
			n := uint64(t.NumElements())
			tensors = append(tensors, ggufTensor{name: ggufName + ".weight", dims: []uint64{n}, typ: ggmlF32, size: 4 * n,
				data: func() ([]byte, error) {
					f, err := t.Float32s()
					if err != nil {
						return nil, err
					}
					b := make([]byte, 4*len(f))
					for i, v := range f {
						binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
					}
					return b, nil
				}})
			return nil
		}
		sc, ok1 := ck.Tensor(key + ".scales")
		bi, ok2 := ck.Tensor(key + ".biases")
		if !ok1 || !ok2 || sc.DType != bi.DType {
			return fmt.Errorf("GGUF: %s: scales and biases missing or of two types", key)
		}
		shape := t.Shape
		words := int64(shape[len(shape)-1])
		rows := int64(1)
		for _, d := range shape[:len(shape)-1] {
			rows *= int64(d)
		}
		groups := int64(sc.Shape[len(sc.Shape)-1])
		bits := int(words * 32 / (groups * int64(cfg.Quantization.Group)))
		in := words * 32 / int64(bits)
		dims := []uint64{uint64(in)}
		for i := len(shape) - 2; i >= 0; i-- {
			dims = append(dims, uint64(shape[i]))
		}
		if bits == 4 {
			tensors = append(tensors, ggufTensor{name: ggufName + ".weight", dims: dims, typ: ggmlQ4_1, size: uint64(rows*in/32) * 20,
				data: func() ([]byte, error) { return q4ToQ41(t, sc, bi, rows, in, cfg.Quantization.Group) }})
			return nil
		}
		tensors = append(tensors, ggufTensor{name: ggufName + ".weight", dims: dims, typ: ggmlF32, size: uint64(rows*in) * 4,
			data: func() ([]byte, error) { return dequantF32(t, sc, bi, rows, in, bits, cfg.Quantization.Group) }})
		return nil
	}
	if err := add("token_embd", "model.embed_tokens"); err != nil {
		return err
	}
	if err := add("output_norm", "model.norm"); err != nil {
		return err
	}
	if _, ok := ck.Tensor("lm_head.weight"); ok {
		if err := add("output", "lm_head"); err != nil {
			return err
		}
	}
	for l := range cfg.Layers {
		p, b := fmt.Sprintf("model.layers.%d.", l), fmt.Sprintf("blk.%d.", l)
		pairs := [][2]string{{"attn_norm", "input_layernorm"}, {"attn_q", "self_attn.q_proj"}, {"attn_k", "self_attn.k_proj"},
			{"attn_v", "self_attn.v_proj"}, {"attn_output", "self_attn.o_proj"}, {"attn_q_norm", "self_attn.q_norm"},
			{"attn_k_norm", "self_attn.k_norm"}, {"ffn_norm", "post_attention_layernorm"}}
		if cfg.Experts > 0 {
			pairs = append(pairs, [2]string{"ffn_gate_inp", "mlp.gate"}, [2]string{"ffn_gate_exps", "mlp.switch_mlp.gate_proj"},
				[2]string{"ffn_up_exps", "mlp.switch_mlp.up_proj"}, [2]string{"ffn_down_exps", "mlp.switch_mlp.down_proj"})
		} else {
			pairs = append(pairs, [2]string{"ffn_gate", "mlp.gate_proj"}, [2]string{"ffn_up", "mlp.up_proj"}, [2]string{"ffn_down", "mlp.down_proj"})
		}
		for _, pr := range pairs {
			if err := add(b+pr[0], p+pr[1]); err != nil {
				return err
			}
		}
	}

	tokens, types, merges, err := qwenVocab(tokDir, cfg.Vocab)
	if err != nil {
		return err
	}
	kv := &ggufKV{}
	kv.str("general.architecture", arch)
	kv.str("general.name", filepath.Base(filepath.Dir(dir)))
	kv.u32("general.file_type", 3) // mostly Q4_1
	kv.u32("general.alignment", ggufAlign)
	kv.u32(arch+".context_length", uint32(cfg.MaxPos))
	kv.u32(arch+".embedding_length", uint32(cfg.Hidden))
	kv.u32(arch+".block_count", uint32(cfg.Layers))
	kv.u32(arch+".feed_forward_length", uint32(cfg.Inter))
	kv.u32(arch+".attention.head_count", uint32(cfg.Heads))
	kv.u32(arch+".attention.head_count_kv", uint32(cfg.KVHeads))
	kv.u32(arch+".attention.key_length", uint32(cfg.HeadDim))
	kv.u32(arch+".attention.value_length", uint32(cfg.HeadDim))
	kv.f32(arch+".rope.freq_base", float32(cfg.Theta))
	kv.f32(arch+".attention.layer_norm_rms_epsilon", float32(cfg.Eps))
	if cfg.Experts > 0 {
		kv.u32(arch+".expert_count", uint32(cfg.Experts))
		kv.u32(arch+".expert_used_count", uint32(cfg.TopK))
		kv.u32(arch+".expert_feed_forward_length", uint32(cfg.MoEInter))
	}
	kv.str("tokenizer.ggml.model", "gpt2")
	kv.str("tokenizer.ggml.pre", "qwen2")
	kv.strs("tokenizer.ggml.tokens", tokens)
	kv.i32s("tokenizer.ggml.token_type", types)
	kv.strs("tokenizer.ggml.merges", merges)
	kv.u32("tokenizer.ggml.eos_token_id", 151645)
	kv.u32("tokenizer.ggml.padding_token_id", 151643)
	kv.u32("tokenizer.ggml.bos_token_id", 151643)
	kv.boolean("tokenizer.ggml.add_bos_token", false)

	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	w := bufio.NewWriterSize(f, 8<<20)
	le := binary.LittleEndian
	var hdr []byte
	hdr = append(hdr, "GGUF"...)
	hdr = le.AppendUint32(hdr, 3)
	hdr = le.AppendUint64(hdr, uint64(len(tensors)))
	hdr = le.AppendUint64(hdr, uint64(kv.n))
	hdr = append(hdr, kv.b...)
	var off uint64
	for _, t := range tensors {
		hdr = ggufString(hdr, t.name)
		hdr = le.AppendUint32(hdr, uint32(len(t.dims)))
		for _, d := range t.dims {
			hdr = le.AppendUint64(hdr, d)
		}
		hdr = le.AppendUint32(hdr, t.typ)
		hdr = le.AppendUint64(hdr, off)
		off += (t.size + ggufAlign - 1) &^ (ggufAlign - 1)
	}
	for len(hdr)%ggufAlign != 0 {
		hdr = append(hdr, 0)
	}
	if _, err := w.Write(hdr); err != nil {
		f.Close()
		return err
	}
	for _, t := range tensors {
		b, err := t.data()
		if err != nil {
			f.Close()
			return fmt.Errorf("GGUF: %s: %w", t.name, err)
		}
		if uint64(len(b)) != t.size {
			f.Close()
			return fmt.Errorf("GGUF: %s: %d bytes, want %d", t.name, len(b), t.size)
		}
		w.Write(b)
		for pad := (ggufAlign - len(b)%ggufAlign) % ggufAlign; pad > 0; pad-- {
			w.WriteByte(0)
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// q4ToQ41 rewrites MLX 4-bit rows (8 codes a word, low nibble first; a scale and a bias
// per group) as Q4_1 blocks: fp16 d and m, then 16 bytes whose low nibbles are codes
// 0..15 and high nibbles codes 16..31.
func q4ToQ41(t, sc, bi *safetensors.Tensor, rows, in int64, group int) ([]byte, error) {
	s, err := sc.Float32s()
	if err != nil {
		return nil, err
	}
	b, err := bi.Float32s()
	if err != nil {
		return nil, err
	}
	words := t.Data
	out := make([]byte, rows*in/32*20)
	gpr := in / int64(group)
	o := 0
	for r := range rows {
		row := words[r*in/2 : (r+1)*in/2] // in/2 bytes of nibbles, element k at byte k/2, low nibble first
		for blk := int64(0); blk < in/32; blk++ {
			g := r*gpr + blk*32/int64(group)
			binary.LittleEndian.PutUint16(out[o:], half.F32ToF16(s[g]))
			binary.LittleEndian.PutUint16(out[o+2:], half.F32ToF16(b[g]))
			src := row[blk*16 : blk*16+16]
			for j := range 16 {
				lo := nib(src, j)
				hi := nib(src, j+16)
				out[o+4+j] = lo | hi<<4
			}
			o += 20
		}
	}
	return out, nil
}

// nib is code k of a run of nibbles, low nibble first.
func nib(b []byte, k int) byte {
	if k%2 == 0 {
		return b[k/2] & 15
	}
	return b[k/2] >> 4
}

// dequantF32 expands MLX affine rows of other bit widths (the routers' 8 bits) to float32.
func dequantF32(t, sc, bi *safetensors.Tensor, rows, in int64, bits, group int) ([]byte, error) {
	if bits != 8 {
		return nil, fmt.Errorf("%d-bit weights: only 4 and 8 bits", bits)
	}
	s, err := sc.Float32s()
	if err != nil {
		return nil, err
	}
	b, err := bi.Float32s()
	if err != nil {
		return nil, err
	}
	out := make([]byte, rows*in*4)
	gpr := in / int64(group)
	for r := range rows {
		for k := range in {
			g := r*gpr + k/int64(group)
			v := s[g]*float32(t.Data[r*in+k]) + b[g]
			binary.LittleEndian.PutUint32(out[4*(r*in+k):], math.Float32bits(v))
		}
	}
	return out, nil
}

// qwenVocab reads a byte-level BPE tokenizer.json into GGUF's tokens, token types
// (1 normal, 3 control, 4 user-defined, 5 unused padding) and merges, padded to vocab.
func qwenVocab(dir string, vocab int) (tokens []string, types []int32, merges []string, err error) {
	raw, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		return nil, nil, nil, err
	}
	var tj struct {
		Model struct {
			Vocab  map[string]int    `json:"vocab"`
			Merges []json.RawMessage `json:"merges"`
		} `json:"model"`
		Added []struct {
			ID      int    `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(raw, &tj); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", dir, err)
	}
	tokens = make([]string, vocab)
	types = make([]int32, vocab)
	for i := range tokens {
		tokens[i], types[i] = "[PAD"+strconv.Itoa(i)+"]", 5
	}
	for s, id := range tj.Model.Vocab {
		if id < vocab {
			tokens[id], types[id] = s, 1
		}
	}
	for _, a := range tj.Added {
		if a.ID < vocab {
			tokens[a.ID], types[a.ID] = a.Content, 4
			if a.Special {
				types[a.ID] = 3
			}
		}
	}
	for _, m := range tj.Model.Merges {
		var pair []string
		var s string
		switch {
		case json.Unmarshal(m, &pair) == nil && len(pair) == 2:
			merges = append(merges, pair[0]+" "+pair[1])
		case json.Unmarshal(m, &s) == nil:
			merges = append(merges, s)
		}
	}
	return tokens, types, merges, nil
}

// ggufKV accumulates GGUF key-value pairs.
type ggufKV struct {
	b []byte
	n int
}

func ggufString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

func (k *ggufKV) key(name string, typ uint32) {
	k.b = ggufString(k.b, name)
	k.b = binary.LittleEndian.AppendUint32(k.b, typ)
	k.n++
}
func (k *ggufKV) u32(name string, v uint32) {
	k.key(name, 4)
	k.b = binary.LittleEndian.AppendUint32(k.b, v)
}
func (k *ggufKV) f32(name string, v float32) {
	k.key(name, 6)
	k.b = binary.LittleEndian.AppendUint32(k.b, math.Float32bits(v))
}
func (k *ggufKV) boolean(name string, v bool) {
	k.key(name, 7)
	if v {
		k.b = append(k.b, 1)
	} else {
		k.b = append(k.b, 0)
	}
}
func (k *ggufKV) str(name, v string) {
	k.key(name, 8)
	k.b = ggufString(k.b, v)
}
func (k *ggufKV) strs(name string, v []string) {
	k.key(name, 9)
	k.b = binary.LittleEndian.AppendUint32(k.b, 8)
	k.b = binary.LittleEndian.AppendUint64(k.b, uint64(len(v)))
	for _, s := range v {
		k.b = ggufString(k.b, s)
	}
}
func (k *ggufKV) i32s(name string, v []int32) {
	k.key(name, 9)
	k.b = binary.LittleEndian.AppendUint32(k.b, 5)
	k.b = binary.LittleEndian.AppendUint64(k.b, uint64(len(v)))
	for _, x := range v {
		k.b = binary.LittleEndian.AppendUint32(k.b, uint32(x))
	}
}
