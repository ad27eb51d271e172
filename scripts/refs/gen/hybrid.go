package main

import (
	"math/rand/v2"

	"github.com/mlxg/mlxg/registry/randmodel"
)

// hybridCases are the mixture-of-experts and hybrid architectures' cases, written with
// -hybrid into runner/testdata/refs_hybrid.json's work directory. The mixture-of-experts
// models are read in the MLX layout (a Quantize of 0 bits is a float conversion by
// registry/create, which stacks the experts as mlx-lm does); hybrid.py turns it back
// into Hugging Face's for transformers.
func hybridCases() []Case {
	moe := randmodel.TinyMoE(vocab)
	moe.RopeTheta = 1e6
	moeSparse := randmodel.TinyMoE(vocab)
	moeSparse.NumLayers, moeSparse.DecoderSparseStep, moeSparse.MLPOnlyLayers, moeSparse.NormTopK = 3, 1, []int{1}, false
	moeSparse.TieWordEmbeddings = true

	gemma := randmodel.TinyGemma3(vocab)
	gemmaCap := randmodel.TinyGemma3(vocab)
	gemmaCap.FinalLogitSoftcapping = 3
	gemmaCap.TieWordEmbeddings = false
	gemmaCap.RopeScaling = map[string]any{"rope_type": "linear", "factor": 4.0}

	next := randmodel.TinyQwen3Next(vocab)
	next.TieWordEmbeddings = true

	cs := []Case{
		{Name: "qwen3moe-f32", Config: &moe, Seed: 801, Quantize: &Quantize{}},
		{Name: "qwen3moe-mlponly-f32", Config: &moeSparse, Seed: 802, Quantize: &Quantize{}},
		{Name: "qwen3moe-q4g64", Config: &moe, Seed: 801, Quantize: &Quantize{4, 64}},
		{Name: "gemma3-f32", Config: &gemma, Seed: 803},
		{Name: "gemma3-softcap-linear-f32", Config: &gemmaCap, Seed: 804},
		{Name: "gemma3-q8g32", Config: &gemma, Seed: 803, Quantize: &Quantize{8, 32}},
		{Name: "qwen3next-f32", Config: &next, Seed: 805, Quantize: &Quantize{}},
		{Name: "qwen3next-q6g32", Config: &next, Seed: 805, Quantize: &Quantize{6, 32}},
	}
	for i := range cs {
		r := rand.New(rand.NewPCG(cs[i].Seed, 99))
		cs[i].Prompt = make([]int32, 21) // longer than gemma's window of 8
		for j := range cs[i].Prompt {
			cs[i].Prompt[j] = int32(r.IntN(vocab))
		}
		cs[i].GreedyN = 8
	}
	return cs
}
