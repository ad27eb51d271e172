package safetensors

import (
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
)

// The trained test model is a real transformers-written file: it must open cleanly.
func TestQwen3Tiny(t *testing.T) {
	dir := testdata.SharedModel(t, "qwen3-tiny")
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := len(c.Names()); n != 68 {
		t.Fatalf("qwen3-tiny has %d tensors, its README says 68", n)
	}
	var params int64
	for _, n := range c.Names() {
		tt, _ := c.Tensor(n)
		params += tt.NumElements()
	}
	if params != 43618304 {
		t.Fatalf("parameters %d, README says 43,618,304", params)
	}
	emb, ok := c.Tensor("model.embed_tokens.weight")
	if !ok || emb.DType != F16 || emb.Shape[0] != 151936 || emb.Shape[1] != 256 {
		t.Fatalf("embedding: %+v", emb)
	}
}
