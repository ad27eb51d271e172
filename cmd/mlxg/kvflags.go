package main

import (
	"fmt"
	"strconv"

	"github.com/spf13/pflag"

	"github.com/mlxg/mlxg/kvstore"
)

// The KV-cache and prefix-cache flags. kvstore holds the settings and parses their
// values (kvstore.Options.Set, PrefixOptions.Set); the flags live here, so that the
// storage package does not depend on a command-line library. Each flag parses its
// value when the flag is parsed, so a malformed one fails before anything loads.

// kvFlag is one KV-cache setting as a flag.
type kvFlag struct {
	o    *kvstore.Options
	name string
	text string // the value given, for help and errors
}

func (f *kvFlag) String() string { return f.text }
func (f *kvFlag) Type() string   { return "string" }
func (f *kvFlag) Set(s string) error {
	if err := f.o.Set(f.name, s, "--"+f.name); err != nil {
		return err
	}
	f.text = s
	return nil
}

// registerKVFlags adds the KV-cache flags to fs, writing into o when parsed.
func registerKVFlags(fs *pflag.FlagSet, o *kvstore.Options) {
	add := func(name, usage string) {
		fs.Var(&kvFlag{o: o, name: name}, name, usage+" (env "+kvstore.EnvVars[name]+")")
	}
	add("kv-bits", `KV cache bits for keys and values: "8", "(8, 4)", 16 for fp16, or q4_0 (default: chosen from RAM and memory pressure)`)
	add("kv-group-size", `KV quantization group sizes for keys and values: "64" or "(64, 32)" (default (64, 32))`)
	add("kv-boundary-layers", "the first and last N KV layers use --kv-boundary-bits; 0 disables (default 2)")
	add("kv-boundary-bits", `bits of the boundary layers: "8" or "(8, 8)" (default (8, 8))`)
	add("quantized-kv-start", "keep the KV cache fp16 until this many tokens, then quantize it (default 0)")
	add("max-kv-size", "keep only the last N tokens of each full-attention layer (rotating cache; default 0: all)")
}

// prefixFlag is one prefix-cache setting as a flag; it shows the setting's value.
type prefixFlag struct {
	o    *kvstore.PrefixOptions
	name string
}

func (f prefixFlag) String() string {
	if f.o == nil {
		return ""
	}
	switch f.name {
	case "block-ssd-cache-dir":
		return f.o.Dir
	case "block-ssd-cache-max-size":
		return strconv.FormatFloat(f.o.MaxSizeGB, 'g', -1, 64)
	}
	return strconv.Itoa(f.o.Hot)
}
func (f prefixFlag) Type() string       { return "string" }
func (f prefixFlag) Set(s string) error { return f.o.Set(f.name, s, "--"+f.name) }

// registerPrefixFlags adds the prefix-cache flags to fs, writing into o when parsed.
func registerPrefixFlags(fs *pflag.FlagSet, o *kvstore.PrefixOptions) {
	add := func(name, usage string) {
		fs.Var(prefixFlag{o: o, name: name}, name, usage+" (env "+kvstore.PrefixEnvVars[name]+")")
	}
	add("block-ssd-cache-dir", `folder of the SSD prefix cache, "off" for none (default ~/.cache/mlxg/prefix)`)
	add("block-ssd-cache-max-size", fmt.Sprintf("size cap of the SSD prefix cache in GB (default %d)", kvstore.DefaultPrefixMaxGB))
	add("prompt-cache-hot", fmt.Sprintf("most recent SSD prefix blocks loaded into RAM at start-up (default %d)", kvstore.DefaultPrefixHot))
}
