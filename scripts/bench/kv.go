package main

import (
	"os"
	"path/filepath"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
)

// kvPerToken gives the KV cache bytes one token adds, for the model in dir: the layout mlxg's
// memory policy picks on this machine for numCtx with no KV settings (what the bench's mlxg
// serve runs), and fp16, which is Ollama's default (OLLAMA_KV_CACHE_TYPE unset).
func kvPerToken(dir string, numCtx int) (chosen int64, layout string, f16 int64, err error) {
	cfg, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return 0, "", 0, err
	}
	ts, _, err := MLXTensors(dir)
	if err != nil {
		return 0, "", 0, err
	}
	var weights int64
	for _, t := range ts {
		weights += t.Bytes
	}
	m, err := kvstore.ShapeFromConfig(cfg, weights)
	if err != nil {
		return 0, "", 0, err
	}
	mem, err := sysmem.System().Read()
	if err != nil {
		return 0, "", 0, err
	}
	plan, err := kvstore.Choose(kvstore.PolicyInput{Model: m, NumCtx: numCtx, Memory: mem})
	if err != nil {
		return 0, "", 0, err
	}
	l, err := kvstore.NewLayout(m, kvstore.SpecF16, 0, kvstore.SpecF16)
	if err != nil {
		return 0, "", 0, err
	}
	return plan.KVTokenBytes, plan.Layout.String(), l.TokenBytes(m), nil
}
