// Package modeltest holds helpers the architectures' tests share: a seeded random prompt,
// a chunked forward pass, and the relative error between two logit vectors.
package modeltest

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/model"
)

// Tokens is a prompt of n ids below 256, fixed by seed.
func Tokens(seed uint64, n int) []int32 {
	r := rand.New(rand.NewPCG(seed, seed))
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(r.IntN(256))
	}
	return p
}

// Forward feeds tokens in chunks of chunk and returns every position's logits.
func Forward(t testing.TB, m *model.Model, caches []kvstore.Layer, tokens []int32, chunk int) []float32 {
	t.Helper()
	var all []float32
	for i := 0; i < len(tokens); i += chunk {
		l, err := m.Forward(context.Background(), tokens[i:min(i+chunk, len(tokens))], caches, true)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, l...)
	}
	return all
}

// MaxRel is max|a-b| / max|b|.
func MaxRel(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		num = max(num, math.Abs(float64(a[i]-b[i])))
		den = max(den, math.Abs(float64(b[i])))
	}
	return num / den
}
