package main

import (
	"fmt"
	"strings"
	"testing"
	"text/tabwriter"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/runner/residency"
)

// tableModel is a well-known model's shape as its config.json states it (the public Hugging Face
// configs' cache fields), its MLX 4-bit (gpt-oss: mxfp4) checkpoint's bytes, and the bytes that stay
// in memory when it streams (experts' or decoder layers' matrices read from disk instead).
type tableModel struct {
	name            string
	config          string
	weights, pinned int64
}

var tableModels = []tableModel{
	{"qwen3:8b", `{"model_type":"qwen3","num_hidden_layers":36,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,
		"hidden_size":4096,"max_position_embeddings":40960}`, 4620e6, 1000e6},
	{"qwen3:30b (30B-A3B)", `{"model_type":"qwen3_moe","num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,"head_dim":128,
		"hidden_size":2048,"max_position_embeddings":40960}`, 17200e6, 900e6},
	{"gemma-3-27b", `{"model_type":"gemma3","text_config":{"model_type":"gemma3_text","num_hidden_layers":62,"num_attention_heads":32,
		"num_key_value_heads":16,"head_dim":128,"hidden_size":5376,"sliding_window":1024,"sliding_window_pattern":6,
		"max_position_embeddings":131072}}`, 16900e6, 1600e6},
	{"gpt-oss-20b", `{"model_type":"gpt_oss","num_hidden_layers":24,"num_attention_heads":64,"num_key_value_heads":8,"head_dim":64,
		"hidden_size":2880,"sliding_window":128,"max_position_embeddings":131072}`, 12100e6, 2000e6},
}

// autoContext is the context a load with no num_ctx gets on a machine of total bytes with avail
// available, as the server plans it (api/server's EngineLoader.Plan and planStreaming): the KV
// policy's auto context, or, when the weights do not fit, the one planned beside the weights
// that stay in memory while the rest streams.
func autoContext(m tableModel, total, avail int64) (kvstore.Plan, bool, error) {
	shape, err := kvstore.ShapeFromConfig([]byte(m.config), m.weights)
	if err != nil {
		return kvstore.Plan{}, false, err
	}
	mem := sysmem.Info{Total: uint64(total), Available: uint64(avail), Source: "given"}
	p, err := kvstore.Choose(kvstore.PolicyInput{Model: shape, Memory: mem})
	if err == nil {
		return p, false, nil
	}
	shape.WeightBytes = m.pinned
	p, err = kvstore.Choose(kvstore.PolicyInput{Model: shape, Memory: mem})
	if err != nil {
		return p, true, err
	}
	if residency.Budget(m.pinned, m.weights-m.pinned, p.Free-p.KVBytes) <= 0 {
		return p, true, fmt.Errorf("no memory left for streamed weights")
	}
	return p, true, nil
}

// The auto context of well-known model shapes on 16, 24, 36 and 64 GiB machines, three quarters of
// whose memory is available (the rest held by the OS and the user's applications), at normal
// pressure: `go test ./cmd/mlxg -run TestAutoContextTable -v` prints the table.
func TestAutoContextTable(t *testing.T) {
	machines := []int64{16, 24, 36, 64}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "model\tmax\tKV/token (K6h/V6h)")
	for _, g := range machines {
		fmt.Fprintf(tw, "\t%d GiB", g)
	}
	fmt.Fprintln(tw)
	for _, m := range tableModels {
		shape, _ := kvstore.ShapeFromConfig([]byte(m.config), m.weights)
		var perToken int64
		prev := 0
		for i, g := range machines {
			total := g << 30
			p, streams, err := autoContext(m, total, total/4*3)
			if i == 0 {
				perToken = p.KVTokenBytes
				fmt.Fprintf(tw, "%s\t%d\t%s", m.name, shape.MaxContext, ibytes(perToken))
			}
			cell := "does not load"
			if err == nil {
				cell = fmt.Sprintf("%d", p.Context)
				if streams {
					cell += " (streams)"
				}
				// More memory never gives a loaded model less context. A model that streams plans
				// its context beside the weights that stay (the expert or layer cache takes what
				// the KV leaves), so it may get more than one that just fits: not compared.
				if p.Context > shape.MaxContext || !streams && p.Context < prev || p.KVBytes*2 > p.Free && p.Context > kvstore.AutoFloor {
					t.Errorf("%s at %d GiB: context %d (max %d, previous %d), kv %d of free %d", m.name, g, p.Context, shape.MaxContext, prev, p.KVBytes, p.Free)
				}
				if !streams {
					prev = p.Context
				}
			}
			fmt.Fprintf(tw, "\t%s", cell)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	t.Log("auto context (no num_ctx), normal pressure, 3/4 of the memory available:\n" + b.String())
	// qwen3:8b's agents' first requests (~27K tokens) fit from 16 GiB up.
	p, _, err := autoContext(tableModels[0], 16<<30, 12<<30)
	if err != nil || p.Context < 27000 {
		t.Errorf("qwen3:8b on 16 GiB: context %d, %v", p.Context, err)
	}
}
