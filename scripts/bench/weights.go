package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// TensorBytes is one stored tensor's size and its number of rows (for an embedding table,
// the vocabulary size).
type TensorBytes struct {
	Name  string
	Bytes int64
	Rows  int64
}

// BytesPerToken is how many weight bytes one decode step reads: every tensor once, except an
// embedding table that is not also the output head, of which only one row is read. Tensors
// whose name starts with embedPrefix are the embedding table (an MLX quantized table is three
// tensors: weight, scales and biases); tied says the table doubles as the output head.
func BytesPerToken(ts []TensorBytes, embedPrefix string, tied bool) int64 {
	var n int64
	for _, t := range ts {
		if !tied && strings.HasPrefix(t.Name, embedPrefix) && t.Rows > 0 {
			n += t.Bytes / t.Rows
			continue
		}
		n += t.Bytes
	}
	return n
}

// MLXTensors lists a checkpoint directory's tensors from its safetensors headers, and whether
// its embedding table is tied to the output head (config.json's tie_word_embeddings, or no
// lm_head.weight, as mlx-lm saves tied models).
func MLXTensors(dir string) ([]TensorBytes, bool, error) {
	hs, err := safetensors.ReadDirHeaders(dir)
	if err != nil {
		return nil, false, err
	}
	var ts []TensorBytes
	hasHead := false
	for _, h := range hs {
		for _, t := range h.Tensors {
			rows := int64(0)
			if len(t.Shape) > 0 {
				rows = int64(t.Shape[0])
			}
			ts = append(ts, TensorBytes{Name: t.Name, Bytes: t.End - t.Begin, Rows: rows})
			hasHead = hasHead || t.Name == "lm_head.weight"
		}
	}
	var cfg struct {
		Tie *bool `json:"tie_word_embeddings"`
	}
	raw, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, false, err
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, false, fmt.Errorf("%s: %w", filepath.Join(dir, "config.json"), err)
	}
	tied := !hasHead
	if cfg.Tie != nil {
		tied = *cfg.Tie
	}
	return ts, tied, nil
}

// ggmlBlock is a GGML tensor type's block: elements per block and bytes per block.
var ggmlBlock = map[string][2]int64{
	"F32": {1, 4}, "F16": {1, 2}, "BF16": {1, 2}, "F64": {1, 8},
	"Q4_0": {32, 18}, "Q4_1": {32, 20}, "Q5_0": {32, 22}, "Q5_1": {32, 24}, "Q8_0": {32, 34}, "Q8_1": {32, 36},
	"Q2_K": {256, 84}, "Q3_K": {256, 110}, "Q4_K": {256, 144}, "Q5_K": {256, 176}, "Q6_K": {256, 210},
	"Q8_K": {256, 292}, "MXFP4": {32, 17},
}

// GGMLTensor is a tensor as Ollama's /api/show (verbose) lists it: shape in GGML order,
// the row length first.
type GGMLTensor struct {
	Name  string   `json:"name"`
	Type  string   `json:"type"`
	Shape []uint64 `json:"shape"`
}

// GGUFTensors sizes GGML tensors by their type's block layout.
func GGUFTensors(ts []GGMLTensor) ([]TensorBytes, error) {
	out := make([]TensorBytes, 0, len(ts))
	for _, t := range ts {
		blk, ok := ggmlBlock[t.Type]
		if !ok {
			return nil, fmt.Errorf("tensor %s: GGML type %q has no known block size", t.Name, t.Type)
		}
		n := int64(1)
		for _, d := range t.Shape {
			n *= int64(d)
		}
		if n%blk[0] != 0 {
			return nil, fmt.Errorf("tensor %s: %d elements is not a whole number of %s blocks of %d", t.Name, n, t.Type, blk[0])
		}
		rows := int64(1)
		if len(t.Shape) > 1 {
			rows = n / int64(t.Shape[0])
		}
		out = append(out, TensorBytes{Name: t.Name, Bytes: n / blk[0] * blk[1], Rows: rows})
	}
	return out, nil
}
