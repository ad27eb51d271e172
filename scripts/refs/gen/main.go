// Command gen writes the checkpoints that the transformers reference fixtures
// (runner/testdata/refs.json) are computed from, and cases.json describing them.
//
//	go run ./scripts/refs/gen -out DIR [-shared ../shared]
//
// Each random case is a registry/randmodel checkpoint (float32 weights, fixed seed),
// and for the quantized cases that checkpoint converted by registry/create.
// The qwen3-tiny case is the trained model of ../shared/models converted to 8 bits
// (its float16 weights, 87 MB, are too large to carry to the GPU machine; the 8-bit
// form is under 50 MB), with prompts encoded by text/tokenizer and
// text/template. reference.py runs transformers on each (on the dequantized
// weights for quantized cases). The Go test rebuilds every checkpoint from the
// fixture's description and checks weights_digest (randmodel.Digest: tensor names,
// dtypes, shapes and bytes) first, so a change in the generator or the converter is
// reported as such, not as a numerical mismatch.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"

	"github.com/mlxg/mlxg/registry/create"
	"github.com/mlxg/mlxg/registry/randmodel"
	"github.com/mlxg/mlxg/text/template"
	"github.com/mlxg/mlxg/text/tokenizer"
)

// Case is one reference case, as cases.json and the fixture describe it.
type Case struct {
	Name          string            `json:"name"`
	Config        *randmodel.Config `json:"config,omitempty"`
	Seed          uint64            `json:"seed,omitempty"`
	SharedModel   string            `json:"shared_model,omitempty"` // a model of ../shared/models instead of a random one
	PromptText    string            `json:"prompt_text,omitempty"`  // the text Prompt encodes (shared models)
	Quantize      *Quantize         `json:"quantize,omitempty"`
	Prompt        []int32           `json:"prompt"`
	GreedyN       int               `json:"greedy_n"`
	WeightsDigest string            `json:"weights_digest"` // randmodel.Digest of the checkpoint read
	Dir           string            `json:"dir"`            // the checkpoint reference.py reads, relative to cases.json
}

// Quantize is the MLX quantization applied by registry/create.
type Quantize struct {
	Bits      int `json:"bits"`
	GroupSize int `json:"group_size"`
}

const vocab = 384

func randomCases() []Case {
	llama := randmodel.Tiny("llama", vocab)
	llama.RopeScaling = map[string]any{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
		"high_freq_factor": 4.0, "original_max_position_embeddings": 64}
	llamaLinear := randmodel.Tiny("llama", vocab)
	llamaLinear.RopeScaling = map[string]any{"rope_type": "linear", "factor": 2.0}
	llamaLinear.TieWordEmbeddings = true

	qwen2 := randmodel.Tiny("qwen2", vocab)
	qwen2.RopeTheta = 1e6
	qwen2.TieWordEmbeddings = true
	qwen2Yarn := qwen2
	qwen2Yarn.RopeScaling = map[string]any{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
	// max = factor × original, so transformers' two readings of yarn's factor agree.
	qwen2Yarn.MaxPositions = 256

	qwen3 := randmodel.Tiny("qwen3", vocab)
	qwen3.RopeTheta = 1e6
	qwen3.HeadDim = 64 // heads×head_dim (256) differs from hidden (128), as in real Qwen3
	qwen3.TieWordEmbeddings = true

	cs := []Case{
		{Name: "llama-f32", Config: &llama, Seed: 101},
		{Name: "llama-linear-f32", Config: &llamaLinear, Seed: 102},
		{Name: "qwen2-f32", Config: &qwen2, Seed: 211},
		{Name: "qwen2-yarn-f32", Config: &qwen2Yarn, Seed: 202},
		{Name: "qwen3-f32", Config: &qwen3, Seed: 301},
		{Name: "llama-q4g32", Config: &llama, Seed: 101, Quantize: &Quantize{4, 32}},
		{Name: "llama-q2g64", Config: &llama, Seed: 101, Quantize: &Quantize{2, 64}},
		{Name: "qwen2-q3g64", Config: &qwen2, Seed: 211, Quantize: &Quantize{3, 64}},
		{Name: "qwen2-q5g32", Config: &qwen2, Seed: 211, Quantize: &Quantize{5, 32}},
		{Name: "qwen3-q6g128", Config: &qwen3, Seed: 301, Quantize: &Quantize{6, 128}},
		{Name: "qwen3-q8g64", Config: &qwen3, Seed: 301, Quantize: &Quantize{8, 64}},
	}
	for i := range cs {
		r := rand.New(rand.NewPCG(cs[i].Seed, 99))
		cs[i].Prompt = make([]int32, 21)
		for j := range cs[i].Prompt {
			cs[i].Prompt[j] = int32(r.IntN(vocab))
		}
		cs[i].GreedyN = 8
	}
	return cs
}

// tinyCases are greedy continuations of qwen3-tiny (8-bit) for a plain prompt and a
// chat prompt.
func tinyCases(dir string) ([]Case, error) {
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	tmpl, err := template.LoadChatTemplate(dir)
	if err != nil {
		return nil, err
	}
	chat, err := tmpl.Apply([]template.Message{{"role": "user", "content": "What is a shepherd?"}},
		template.Options{AddGenerationPrompt: true, Kwargs: map[string]any{"enable_thinking": false}})
	if err != nil {
		return nil, err
	}
	var cs []Case
	for i, text := range []string{"In the beginning God created the heaven and the earth. And the", chat} {
		cs = append(cs, Case{
			Name: fmt.Sprintf("qwen3-tiny-q8g64-%d", i+1), SharedModel: "qwen3-tiny", PromptText: text,
			Quantize: &Quantize{8, 64}, Prompt: tok.Encode(text, false), GreedyN: 16,
		})
	}
	return cs, nil
}

// Build writes the checkpoint of c into out and returns the directory the model is
// read from and the digest of its weights. Random source checkpoints of quantized
// cases go to scratch, so out holds only what reference.py reads.
func Build(c Case, out, scratch, shared string) (string, string, error) {
	var src string
	switch {
	case c.SharedModel != "":
		src = filepath.Join(shared, "models", c.SharedModel)
	case c.Quantize != nil:
		src = filepath.Join(scratch, c.Name)
	default:
		src = filepath.Join(out, c.Name)
	}
	if c.Config != nil {
		if err := randmodel.Generate(src, *c.Config, randmodel.Options{Seed: c.Seed}); err != nil {
			return "", "", err
		}
	}
	model := src
	if c.Quantize != nil {
		model = filepath.Join(out, c.Name)
		if c.SharedModel != "" {
			// Cases of one shared model share its converted checkpoint.
			model = filepath.Join(out, fmt.Sprintf("%s-q%dg%d", c.SharedModel, c.Quantize.Bits, c.Quantize.GroupSize))
		}
		if _, err := os.Stat(filepath.Join(model, "config.json")); err == nil {
			sum, err := randmodel.Digest(model)
			return model, sum, err
		}
		if _, err := create.Convert(context.Background(), src, model, create.Options{Bits: c.Quantize.Bits, GroupSize: c.Quantize.GroupSize}); err != nil {
			return "", "", err
		}
		// reference.py reads no tokenizer, and the GPU machine takes 64 MiB in all.
		os.Remove(filepath.Join(model, "tokenizer.json"))
	}
	sum, err := randmodel.Digest(model)
	return model, sum, err
}

func main() {
	out := flag.String("out", "", "directory to write the checkpoints and cases.json into (created)")
	shared := flag.String("shared", "../shared", "the shared folder holding models/qwen3-tiny")
	hybrid := flag.Bool("hybrid", false, "write the mixture-of-experts and hybrid cases (refs_hybrid.json) instead")
	flag.Parse()
	if *out == "" {
		log.Fatal("usage: go run ./scripts/refs/gen -out DIR [-shared ../shared]")
	}
	scratch, err := os.MkdirTemp("", "refs-gen-*")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(scratch)
	var cs []Case
	if *hybrid {
		cs = hybridCases()
	} else {
		cs = randomCases()
		tiny, err := tinyCases(filepath.Join(*shared, "models", "qwen3-tiny"))
		if err != nil {
			log.Fatalf("qwen3-tiny: %v", err)
		}
		cs = append(cs, tiny...)
	}
	for i := range cs {
		model, sum, err := Build(cs[i], *out, scratch, *shared)
		if err != nil {
			log.Fatalf("%s: %v", cs[i].Name, err)
		}
		cs[i].WeightsDigest = sum
		cs[i].Dir, _ = filepath.Rel(*out, model)
		fmt.Printf("%-20s %s %s (%d prompt tokens)\n", cs[i].Name, sum[:12], cs[i].Dir, len(cs[i].Prompt))
	}
	b, err := json.MarshalIndent(cs, "", "  ")
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(*out, "cases.json"), b, 0o644); err != nil {
		log.Fatal(err)
	}
}
