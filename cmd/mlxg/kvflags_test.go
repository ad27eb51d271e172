package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/mlxg/mlxg/kvstore"
)

// TestKVFlags: every KV-cache setting has its flag, a flag wins over the environment and
// is recorded as the source, and a malformed value fails at parse time naming the flag.
func TestKVFlags(t *testing.T) {
	parse := func(args []string, env map[string]string) (*kvstore.Options, error) {
		var o kvstore.Options
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		fs.SetOutput(&strings.Builder{})
		registerKVFlags(fs, &o)
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		return &o, o.ApplyEnv(func(k string) string { return env[k] })
	}
	o, err := parse([]string{"--kv-bits", "(8, 4)", "--kv-group-size=(64, 32)", "--kv-boundary-layers", "3",
		"--kv-boundary-bits", "8", "--quantized-kv-start", "512", "--max-kv-size", "8192"}, map[string]string{"MLXG_KV_BITS": "2"})
	if err != nil {
		t.Fatal(err)
	}
	a8, a4 := kvstore.AffineFormat(8, 0), kvstore.AffineFormat(4, 0)
	if *o.Bits != [2]kvstore.Format{a8, a4} || *o.GroupSize != [2]int{64, 32} || *o.BoundaryLayers != 3 ||
		*o.BoundaryBits != [2]kvstore.Format{a8, a8} || o.QuantizedKVStart != 512 || o.MaxKVSize != 8192 {
		t.Errorf("flags parsed to %+v", o)
	}
	for _, name := range kvstore.Settings {
		if o.Source[name] != "--"+name {
			t.Errorf("%s from %q, want the flag", name, o.Source[name])
		}
	}
	for _, args := range [][]string{{"--kv-bits", "7"}, {"--kv-group-size", "48"}, {"--kv-boundary-layers", "two"},
		{"--kv-boundary-bits", "(8, 8, 8)"}, {"--quantized-kv-start", "1e3"}, {"--max-kv-size", "-5"}} {
		if _, err := parse(args, nil); err == nil || !strings.Contains(err.Error(), args[0]) {
			t.Errorf("%v: want an error naming the flag, got %v", args, err)
		}
	}
}

// TestPrefixFlags: the prefix-cache flags, their environment variables in the help, a
// flag winning over its variable, and a malformed value failing at parse time.
func TestPrefixFlags(t *testing.T) {
	var o kvstore.PrefixOptions
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.SetOutput(&strings.Builder{})
	registerPrefixFlags(fs, &o)
	for _, name := range kvstore.PrefixSettings {
		f := fs.Lookup(name)
		if f == nil || !strings.Contains(f.Usage, kvstore.PrefixEnvVars[name]) {
			t.Fatalf("--%s: %+v", name, f)
		}
	}
	if err := fs.Parse([]string{"--block-ssd-cache-max-size", "2.5"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"MLXG_PREFIX_MAX_SIZE": "7"}
	if err := o.ApplyEnv(func(k string) string { return env[k] }); err != nil || o.MaxSizeGB != 2.5 {
		t.Fatalf("%+v %v: the flag must win over MLXG_PREFIX_MAX_SIZE", o, err)
	}
	if got := fs.Lookup("block-ssd-cache-max-size").Value.String(); got != "2.5" {
		t.Errorf("the flag shows %q", got)
	}
	if err := fs.Parse([]string{"--prompt-cache-hot", "many"}); err == nil || !strings.Contains(err.Error(), "prompt-cache-hot") {
		t.Fatalf("bad value accepted or error unnamed: %v", err)
	}
}
