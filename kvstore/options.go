package kvstore

import (
	"fmt"
	"strconv"
	"strings"
)

// Defaults of a layout the user's bits make (--kv-bits, MLXG_KV_BITS,
// OLLAMA_KV_CACHE_TYPE) without group or boundary settings: keys in groups of 64,
// values of 32, and the first and last 2 KV layers at 8/8, which bound the drift of a
// low-bit cache from fp16's answers. The policy's own ladder (policy.go) names its
// groups and boundary layers per step.
const (
	DefaultKGroup         = 64
	DefaultVGroup         = 32
	DefaultBoundaryLayers = 2
	DefaultBoundaryBits   = 8
)

// Options are the user's KV-cache settings, from flags and environment variables.
// A nil or zero field is left to the policy; a set one always wins over it. The
// command line binds each setting to the flag of its name (cmd/mlxg); Set and
// ApplyEnv are what it and the environment go through.
type Options struct {
	Bits             *[2]Format // --kv-bits: keys, values; affine groups come from GroupSize
	GroupSize        *[2]int    // --kv-group-size: keys, values
	BoundaryLayers   *int       // --kv-boundary-layers: 0 disables
	BoundaryBits     *[2]Format // --kv-boundary-bits
	QuantizedKVStart int        // --quantized-kv-start: fp16 until this many tokens
	MaxKVSize        int        // --max-kv-size: full-attention layers keep the last N tokens; 0: all

	// Source names where each explicit setting came from ("--kv-bits", "MLXG_KV_BITS",
	// "OLLAMA_KV_CACHE_TYPE=q4_0"), for the policy's log line.
	Source map[string]string
}

// The accepted forms, shown in every parse error.
const (
	bitsForms  = `bits are 2, 3, 4, 5, 6, 8, 16 (fp16) or q4_0, each optionally followed by h for Hadamard-rotated ("4h"), given once for keys and values ("8") or as a pair for keys and values ("(8, 4)", "8,4" or "8/4h")`
	groupForms = `group sizes are 16, 32, 64 or 128, given once ("64") or as a pair for keys and values ("(64, 32)", "64,32" or "64/32")`
	countForms = `a whole number, 0 or more`
)

// EnvVars maps each setting (by its flag name) to its environment variable. Flags win
// over the environment, and MLXG_KV_* over OLLAMA_KV_CACHE_TYPE.
var EnvVars = map[string]string{
	"kv-bits":            "MLXG_KV_BITS",
	"kv-group-size":      "MLXG_KV_GROUP_SIZE",
	"kv-boundary-layers": "MLXG_KV_BOUNDARY_LAYERS",
	"kv-boundary-bits":   "MLXG_KV_BOUNDARY_BITS",
	"quantized-kv-start": "MLXG_KV_QUANTIZED_START",
	"max-kv-size":        "MLXG_KV_MAX_SIZE",
}

// OllamaCacheTypeEnv is Ollama's variable, honoured as a drop-in: f16, q8_0 or q4_0
// for every KV layer, no boundary layers.
const OllamaCacheTypeEnv = "OLLAMA_KV_CACHE_TYPE"

// splitPair reads "x", "(x, y)", "[x, y]", "x,y" or "x/y" into two fields.
func splitPair(s string) (a, b string, ok bool) {
	t := strings.TrimSpace(s)
	if len(t) >= 2 && (t[0] == '(' && t[len(t)-1] == ')' || t[0] == '[' && t[len(t)-1] == ']') {
		t = t[1 : len(t)-1]
	}
	parts := strings.FieldsFunc(t, func(r rune) bool { return r == ',' || r == '/' })
	seps := strings.Count(t, ",") + strings.Count(t, "/")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	switch {
	case seps == 0 && len(parts) == 1 && parts[0] != "":
		return parts[0], parts[0], true
	case seps == 1 && len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return parts[0], parts[1], true
	}
	return "", "", false
}

// parseFormat reads one bits field, "h" at its end asking for rotation. Affine formats
// get their group later.
func parseFormat(s string) (Format, bool) {
	s = strings.ToLower(s)
	if t, ok := strings.CutSuffix(s, rotatedSuffix); ok {
		f, ok := parseFormat(t)
		return f.Rotate(true), ok && !strings.HasSuffix(t, rotatedSuffix)
	}
	switch s {
	case "16", "f16", "fp16":
		return FormatF16, true
	case "q4_0":
		return FormatQ4_0, true
	case "2", "3", "4", "5", "6", "8":
		b, _ := strconv.Atoi(s)
		return Format{Mode: Affine, Bits: b}, true
	}
	return Format{}, false
}

// ParseBits reads a --kv-bits or --kv-boundary-bits value into key and value formats.
// Affine formats come back with Group 0: the group sizes are a separate setting.
func ParseBits(s string) ([2]Format, error) {
	a, b, ok := splitPair(s)
	if ok {
		k, ok1 := parseFormat(a)
		v, ok2 := parseFormat(b)
		if ok1 && ok2 {
			return [2]Format{k, v}, nil
		}
	}
	return [2]Format{}, fmt.Errorf("%q is not a KV bit-width: %s", s, bitsForms)
}

// ParseGroupSize reads a --kv-group-size value into key and value group sizes.
func ParseGroupSize(s string) ([2]int, error) {
	a, b, ok := splitPair(s)
	if ok {
		k, err1 := strconv.Atoi(a)
		v, err2 := strconv.Atoi(b)
		if err1 == nil && err2 == nil && validGroup(k) && validGroup(v) {
			return [2]int{k, v}, nil
		}
	}
	return [2]int{}, fmt.Errorf("%q is not a KV group size: %s", s, groupForms)
}

func validGroup(g int) bool { return g == minKVGroup || g == 32 || g == 64 || g == 128 }

func parseCount(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not %s", s, countForms)
	}
	return n, nil
}

// Settings are the names of the KV-cache settings, which are also their flags' names.
var Settings = []string{"kv-bits", "kv-group-size", "kv-boundary-layers", "kv-boundary-bits", "quantized-kv-start", "max-kv-size"}

// Set applies one setting by its name (one of Settings) and records from (the flag or
// variable that gave it) in Source. A malformed value is an error showing the
// accepted forms.
func (o *Options) Set(name, value, from string) error {
	var err error
	switch name {
	case "kv-bits":
		var f [2]Format
		if f, err = ParseBits(value); err == nil {
			o.Bits = &f
		}
	case "kv-boundary-bits":
		var f [2]Format
		if f, err = ParseBits(value); err == nil {
			o.BoundaryBits = &f
		}
	case "kv-group-size":
		var g [2]int
		if g, err = ParseGroupSize(value); err == nil {
			o.GroupSize = &g
		}
	case "kv-boundary-layers":
		var n int
		if n, err = parseCount(value); err == nil {
			o.BoundaryLayers = &n
		}
	case "quantized-kv-start":
		o.QuantizedKVStart, err = parseCount(value)
	case "max-kv-size":
		o.MaxKVSize, err = parseCount(value)
	default:
		return fmt.Errorf("kvstore: unknown KV-cache setting %q", name)
	}
	if err != nil {
		return err
	}
	if o.Source == nil {
		o.Source = map[string]string{}
	}
	o.Source[name] = from
	return nil
}

// ApplyEnv fills every setting that no flag set from the MLXG_KV_* variables, then from
// OLLAMA_KV_CACHE_TYPE. getenv is os.Getenv outside tests. An error names the variable
// and shows the accepted forms.
func (o *Options) ApplyEnv(getenv func(string) string) error {
	for _, name := range Settings {
		env := EnvVars[name]
		val := getenv(env)
		if val == "" || o.Source[name] != "" {
			continue
		}
		if err := o.Set(name, val, env); err != nil {
			return fmt.Errorf("%s: %w", env, err)
		}
	}
	t := getenv(OllamaCacheTypeEnv)
	if t == "" || o.Bits != nil {
		return nil
	}
	from := OllamaCacheTypeEnv + "=" + t
	var bits, groups string
	switch strings.ToLower(t) {
	case "f16", "fp16":
		bits = "16"
	case "q8_0": // affine 8-bit in groups of 64 has q8_0's density, 8.5 bits per element
		bits, groups = "8", "64"
	case "q4_0":
		bits = "q4_0"
	default:
		return fmt.Errorf("%s: %q is not a cache type: use f16, q8_0 or q4_0 (or MLXG_KV_BITS for mlxg's own forms)", OllamaCacheTypeEnv, t)
	}
	if err := o.Set("kv-bits", bits, from); err != nil {
		return err
	}
	if groups != "" && o.GroupSize == nil {
		if err := o.Set("kv-group-size", groups, from); err != nil {
			return err
		}
	}
	if o.BoundaryLayers == nil {
		return o.Set("kv-boundary-layers", "0", from)
	}
	return nil
}

// withGroups completes parsed bits with key and value group sizes.
func withGroups(f [2]Format, g [2]int) Spec {
	for i := range f {
		if f[i].Mode == Affine {
			f[i].Group = g[i]
		}
	}
	return Spec{K: f[0], V: f[1]}
}

// Explicit describes the settings given by flags or environment, for logs: "kv-bits from --kv-bits, ...".
func (o *Options) Explicit() string {
	var parts []string
	for _, name := range Settings {
		if from := o.Source[name]; from != "" {
			parts = append(parts, name+" from "+from)
		}
	}
	return strings.Join(parts, ", ")
}
