package kvstore

import (
	"fmt"
	"strings"
	"testing"
)

func TestParseBits(t *testing.T) {
	a8, a4 := AffineFormat(8, 0), AffineFormat(4, 0)
	good := map[string][2]Format{
		"8":         {a8, a8},
		"(8, 4)":    {a8, a4},
		"(8,4)":     {a8, a4},
		" 8 , 4 ":   {a8, a4},
		"8/4":       {a8, a4},
		"[8, 4]":    {a8, a4},
		"16":        {FormatF16, FormatF16},
		"(f16, 4)":  {FormatF16, a4},
		"q4_0":      {FormatQ4_0, FormatQ4_0},
		"(8, q4_0)": {a8, FormatQ4_0},
		"(2, 3)":    {AffineFormat(2, 0), AffineFormat(3, 0)},
		"(5, 6)":    {AffineFormat(5, 0), AffineFormat(6, 0)},
		"8/4h":      {a8, a4.Rotate(true)},
		"8H,4h":     {a8.Rotate(true), a4.Rotate(true)},
		"q4_0h":     {FormatQ4_0.Rotate(true), FormatQ4_0.Rotate(true)},
		"16h":       {FormatF16.Rotate(true), FormatF16.Rotate(true)},
	}
	for in, want := range good {
		got, err := ParseBits(in)
		if err != nil || got != want {
			t.Errorf("ParseBits(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "7", "9", "1", "32", "(8, 4, 2)", "(8,)", "8,,4", "(8 4)", "eight", "q8_0", "8/4/2", "()", "8hh", "h", "(8, 4r)"} {
		_, err := ParseBits(in)
		if err == nil {
			t.Errorf("ParseBits(%q): no error", in)
		} else if !strings.Contains(err.Error(), "(8, 4)") {
			t.Errorf("ParseBits(%q) error does not show the accepted forms: %v", in, err)
		}
	}
}

func TestParseGroupSize(t *testing.T) {
	good := map[string][2]int{"64": {64, 64}, "(64, 32)": {64, 32}, "128/32": {128, 32}, "64/16": {64, 16}}
	for in, want := range good {
		got, err := ParseGroupSize(in)
		if err != nil || got != want {
			t.Errorf("ParseGroupSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "8", "63", "(64, 32, 32)", "x", "-64"} {
		if _, err := ParseGroupSize(in); err == nil || !strings.Contains(err.Error(), "(64, 32)") {
			t.Errorf("ParseGroupSize(%q): want an error with the accepted forms, got %v", in, err)
		}
	}
}

// parseSettings applies args, pairs of a flag ("--kv-bits") and its value, as the
// command line's flags do (cmd/mlxg binds them to Set), then the environment env.
func parseSettings(t *testing.T, args []string, env map[string]string) (*Options, error) {
	t.Helper()
	var o Options
	for i := 0; i+1 < len(args); i += 2 {
		if err := o.Set(strings.TrimPrefix(args[i], "--"), args[i+1], args[i]); err != nil {
			return nil, fmt.Errorf("%s: %w", args[i], err)
		}
	}
	return &o, o.ApplyEnv(func(k string) string { return env[k] })
}

func TestSettingsAndEnv(t *testing.T) {
	o, err := parseSettings(t, []string{"--kv-bits", "(8, 4)", "--kv-group-size", "(64, 32)", "--kv-boundary-layers", "3",
		"--kv-boundary-bits", "8", "--quantized-kv-start", "512", "--max-kv-size", "8192"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if *o.Bits != [2]Format{AffineFormat(8, 0), AffineFormat(4, 0)} || *o.GroupSize != [2]int{64, 32} ||
		*o.BoundaryLayers != 3 || *o.BoundaryBits != [2]Format{AffineFormat(8, 0), AffineFormat(8, 0)} ||
		o.QuantizedKVStart != 512 || o.MaxKVSize != 8192 {
		t.Errorf("flags parsed to %+v", o)
	}
	if o.Source["kv-bits"] != "--kv-bits" {
		t.Errorf("source %v", o.Source)
	}

	// The environment fills what no flag set; flags win.
	o, err = parseSettings(t, []string{"--kv-bits", "4"}, map[string]string{
		"MLXG_KV_BITS": "8", "MLXG_KV_GROUP_SIZE": "32", "MLXG_KV_BOUNDARY_LAYERS": "0", "MLXG_KV_MAX_SIZE": "100",
		"OLLAMA_KV_CACHE_TYPE": "q4_0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if *o.Bits != [2]Format{AffineFormat(4, 0), AffineFormat(4, 0)} || *o.GroupSize != [2]int{32, 32} ||
		*o.BoundaryLayers != 0 || o.MaxKVSize != 100 {
		t.Errorf("flags+env parsed to %+v", o)
	}
	if o.Source["kv-bits"] != "--kv-bits" || o.Source["kv-group-size"] != "MLXG_KV_GROUP_SIZE" {
		t.Errorf("source %v", o.Source)
	}
	if s := o.Explicit(); !strings.Contains(s, "kv-bits from --kv-bits") || !strings.Contains(s, "max-kv-size from MLXG_KV_MAX_SIZE") {
		t.Errorf("Explicit() = %q", s)
	}

	// Nothing set: the policy decides.
	o, err = parseSettings(t, nil, nil)
	if err != nil || o.Bits != nil || o.GroupSize != nil || o.BoundaryLayers != nil || o.Explicit() != "" {
		t.Errorf("empty options: %+v, %v", o, err)
	}
}

func TestOllamaCacheType(t *testing.T) {
	cases := map[string]Spec{
		"f16":  SpecF16,
		"q8_0": {K: AffineFormat(8, 64), V: AffineFormat(8, 64)},
		"q4_0": {K: FormatQ4_0, V: FormatQ4_0},
	}
	for typ, want := range cases {
		o, err := parseSettings(t, nil, map[string]string{"OLLAMA_KV_CACHE_TYPE": typ})
		if err != nil {
			t.Fatal(err)
		}
		g := [2]int{DefaultKGroup, DefaultVGroup}
		if o.GroupSize != nil {
			g = *o.GroupSize
		}
		if got := withGroups(*o.Bits, g); got != want || *o.BoundaryLayers != 0 {
			t.Errorf("%s: spec %v boundary %d, want %v and 0", typ, got, *o.BoundaryLayers, want)
		}
	}
	// MLXG_KV_BITS wins over Ollama's variable.
	o, err := parseSettings(t, nil, map[string]string{"OLLAMA_KV_CACHE_TYPE": "q4_0", "MLXG_KV_BITS": "6"})
	if err != nil || (*o.Bits)[0] != AffineFormat(6, 0) || o.BoundaryLayers != nil {
		t.Errorf("MLXG_KV_BITS over OLLAMA_KV_CACHE_TYPE: %+v, %v", o, err)
	}
}

func TestMalformedSettings(t *testing.T) {
	flagCases := [][]string{
		{"--kv-bits", "7"}, {"--kv-bits", "(8, 4"}, {"--kv-group-size", "48"},
		{"--kv-boundary-layers", "-1"}, {"--kv-boundary-layers", "two"}, {"--kv-boundary-bits", "(8, 8, 8)"},
		{"--quantized-kv-start", "1e3"}, {"--max-kv-size", "-5"}, {"--kv-cache", "8"},
	}
	for _, args := range flagCases {
		var o Options
		if err := o.Set(args[0][2:], args[1], args[0]); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	envCases := map[string]string{
		"MLXG_KV_BITS": "9", "MLXG_KV_GROUP_SIZE": "(64,)", "MLXG_KV_BOUNDARY_LAYERS": "x",
		"MLXG_KV_BOUNDARY_BITS": "1", "MLXG_KV_QUANTIZED_START": "-1", "MLXG_KV_MAX_SIZE": "big",
		"OLLAMA_KV_CACHE_TYPE": "q5_1",
	}
	for k, v := range envCases {
		_, err := parseSettings(t, nil, map[string]string{k: v})
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("%s=%s: want an error naming the variable, got %v", k, v, err)
		}
	}
}

func TestSpecString(t *testing.T) {
	cases := map[string]Spec{
		"fp16":         SpecF16,
		"q4_0":         {K: FormatQ4_0, V: FormatQ4_0},
		"K8/V4 g64/32": {K: AffineFormat(8, 64), V: AffineFormat(4, 32)},
		"K8/V8 g64":    {K: AffineFormat(8, 64), V: AffineFormat(8, 64)},
		"K8/Vq4_0 g64": {K: AffineFormat(8, 64), V: FormatQ4_0},
		"K16/V4 g32":   {K: FormatF16, V: AffineFormat(4, 32)},
	}
	for want, s := range cases {
		if got := s.String(); got != want {
			t.Errorf("%+v: got %q want %q", s, got, want)
		}
	}
}

func TestFormatArithmetic(t *testing.T) {
	cases := []struct {
		f       Format
		rowB    int
		bitsPer float64
	}{
		{FormatF16, 256, 16},
		{AffineFormat(8, 64), 128 + 8, 8.5},
		{AffineFormat(4, 32), 64 + 16, 5},
		{AffineFormat(3, 64), 48 + 8, 3.5},
		{FormatQ4_0, 64 + 8, 4.5},
	}
	for _, c := range cases {
		if got := c.f.RowBytes(128); got != c.rowB {
			t.Errorf("%v: RowBytes(128) = %d, want %d", c.f, got, c.rowB)
		}
		if got := c.f.BitsPerElement(); got != c.bitsPer || float64(c.rowB*8)/128 != c.bitsPer {
			t.Errorf("%v: BitsPerElement = %v, want %v", c.f, got, c.bitsPer)
		}
	}
	for _, bad := range []Format{{Mode: F16, Bits: 8}, AffineFormat(7, 64), AffineFormat(8, 48), {Mode: Q4_0, Bits: 4, Group: 64}, {Mode: 9}} {
		if err := bad.Validate(128); err == nil {
			t.Errorf("%+v validated", bad)
		}
	}
	if err := AffineFormat(4, 128).Validate(64); err == nil {
		t.Error("group 128 over head_dim 64 validated")
	}
}
