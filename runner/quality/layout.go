package quality

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/runner/model"
)

// Shape is m's cache shape, as the memory policy reads it from config.json.
func Shape(m *model.Model) (kvstore.ModelShape, error) {
	data, err := os.ReadFile(filepath.Join(m.Dir, "config.json"))
	if err != nil {
		return kvstore.ModelShape{}, err
	}
	return kvstore.ShapeFromConfig(data, m.WeightBytes())
}

// Layouts are the KV layouts measured by default, by name: fp16 (the reference), K8/V8,
// the policy's default at normal pressure (kvstore's ladder) and
// Ollama's q4_0. Each is a spec for ParseLayout.
var Layouts = [][2]string{
	{"fp16", "kv-bits=16"},
	{"K8/V8", "kv-bits=8"},
	{"default", ""},
	{"q4_0", "kv-bits=q4_0 kv-boundary-layers=0"},
}

// ParseLayout is the layout the memory policy picks for shape at normal pressure with
// plenty of memory, under the KV settings spec: space-separated name=value pairs named
// as the KV flags are (kvstore.Settings, a leading "--" allowed), such as
// "kv-bits=8/4 kv-group-size=64/16 kv-boundary-layers=0". An empty spec is the
// policy's default; "step=N" alone is step N of the policy's ladder (1 the default), as
// the policy builds it under pressure.
func ParseLayout(shape kvstore.ModelShape, spec string) (kvstore.Layout, error) {
	if v, ok := strings.CutPrefix(strings.TrimSpace(spec), "step="); ok {
		steps, err := kvstore.Ladder(shape, kvstore.Options{})
		if err != nil {
			return kvstore.Layout{}, fmt.Errorf("layout %q: %w", spec, err)
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > len(steps) {
			return kvstore.Layout{}, fmt.Errorf("layout %q: the policy's ladder has steps 1 to %d", spec, len(steps))
		}
		return steps[n-1].Layout, nil
	}
	var o kvstore.Options
	for f := range strings.FieldsSeq(spec) {
		name, value, ok := strings.Cut(strings.TrimPrefix(f, "--"), "=")
		if !ok {
			return kvstore.Layout{}, fmt.Errorf("layout %q: %q is not name=value (names: %s)", spec, f, strings.Join(kvstore.Settings, ", "))
		}
		if err := o.Set(name, value, "--"+name); err != nil {
			return kvstore.Layout{}, fmt.Errorf("layout %q: %w", spec, err)
		}
	}
	const plenty = 1 << 50
	p, err := kvstore.Choose(kvstore.PolicyInput{Model: shape, NumCtx: 1024, Options: o,
		Memory: sysmem.Info{Total: plenty, Available: plenty, Source: "fixed"}})
	if err != nil {
		return kvstore.Layout{}, fmt.Errorf("layout %q: %w", spec, err)
	}
	return p.Layout, nil
}

// LayoutCaches makes caches of layout l for m, for a Side.
func LayoutCaches(m *model.Model, l kvstore.Layout) func() ([]kvstore.Layer, error) {
	return func() ([]kvstore.Layer, error) {
		shape, err := Shape(m)
		if err != nil {
			return nil, err
		}
		return kvstore.NewCaches(shape, l)
	}
}
