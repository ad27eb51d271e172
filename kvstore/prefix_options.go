package kvstore

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Defaults of the prefix cache.
const (
	DefaultPrefixMaxGB = 20 // --block-ssd-cache-max-size
	DefaultPrefixHot   = 64 // --prompt-cache-hot
)

// PrefixEnvVars maps each prefix-cache flag to its environment variable; a flag wins.
var PrefixEnvVars = map[string]string{
	"block-ssd-cache-dir":      "MLXG_PREFIX_DIR",
	"block-ssd-cache-max-size": "MLXG_PREFIX_MAX_SIZE",
	"prompt-cache-hot":         "MLXG_PROMPT_CACHE_HOT",
}

// PrefixOptions are the user's prefix-cache settings, from flags and environment.
type PrefixOptions struct {
	Dir       string  // SSD tier folder; "" the default, "off" none
	MaxSizeGB float64 // SSD tier cap in GB (10^9 bytes); 0 with no source: the default
	Hot       int     // blocks loaded into RAM at start-up
	Source    map[string]string
}

type prefixFlag struct {
	o    *PrefixOptions
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
func (f prefixFlag) Set(s string) error { return f.o.set(f.name, s, "--"+f.name) }

func (o *PrefixOptions) set(name, value, from string) error {
	value = strings.TrimSpace(value)
	switch name {
	case "block-ssd-cache-dir":
		if value == "" {
			return fmt.Errorf("%s: an empty folder: give a path, or off for no SSD tier", from)
		}
		o.Dir = value
	case "block-ssd-cache-max-size":
		v, err := strconv.ParseFloat(strings.TrimSuffix(strings.ToUpper(value), "GB"), 64)
		if err != nil || v < 0 {
			return fmt.Errorf("%s: %q is not a size in GB, such as 20 or 0.5", from, value)
		}
		o.MaxSizeGB = v
	case "prompt-cache-hot":
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return fmt.Errorf("%s: %q is not a block count, 0 or more", from, value)
		}
		o.Hot = n
	default:
		return fmt.Errorf("kvstore: unknown prefix-cache setting %q", name)
	}
	if o.Source == nil {
		o.Source = map[string]string{}
	}
	o.Source[name] = from
	return nil
}

// RegisterFlags adds the prefix-cache flags to fs.
func (o *PrefixOptions) RegisterFlags(fs *pflag.FlagSet) {
	add := func(name, usage string) {
		fs.Var(prefixFlag{o: o, name: name}, name, usage+" (env "+PrefixEnvVars[name]+")")
	}
	add("block-ssd-cache-dir", `folder of the SSD prefix cache, "off" for none (default ~/.cache/mlxg/prefix)`)
	add("block-ssd-cache-max-size", fmt.Sprintf("size cap of the SSD prefix cache in GB (default %d)", DefaultPrefixMaxGB))
	add("prompt-cache-hot", fmt.Sprintf("most recent SSD prefix blocks loaded into RAM at start-up (default %d)", DefaultPrefixHot))
}

// ApplyEnv fills the settings no flag gave from the environment; getenv is os.Getenv
// outside tests.
func (o *PrefixOptions) ApplyEnv(getenv func(string) string) error {
	for _, name := range []string{"block-ssd-cache-dir", "block-ssd-cache-max-size", "prompt-cache-hot"} {
		env := PrefixEnvVars[name]
		if v := getenv(env); v != "" && o.Source[name] == "" {
			if err := o.set(name, v, env); err != nil {
				return err
			}
		}
	}
	return nil
}

// DefaultPrefixDir is ~/.cache/mlxg/prefix.
func DefaultPrefixDir() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("prefix cache: no home folder (%w): set --block-ssd-cache-dir or MLXG_PREFIX_DIR", err)
	}
	return filepath.Join(home, ".cache", "mlxg", "prefix"), nil
}

// ResolvedDir is the SSD tier's folder with the default applied; "" when off.
func (o *PrefixOptions) ResolvedDir() (string, error) {
	switch {
	case strings.EqualFold(o.Dir, "off"):
		return "", nil
	case o.Dir == "":
		return DefaultPrefixDir()
	}
	return o.Dir, nil
}

// Config turns the settings into a PrefixConfig.
func (o *PrefixOptions) Config(log *slog.Logger) (PrefixConfig, error) {
	dir, err := o.ResolvedDir()
	if err != nil {
		return PrefixConfig{}, err
	}
	gb := o.MaxSizeGB
	if o.Source["block-ssd-cache-max-size"] == "" {
		gb = DefaultPrefixMaxGB
	}
	hot := o.Hot
	if o.Source["prompt-cache-hot"] == "" {
		hot = DefaultPrefixHot
	}
	return PrefixConfig{Dir: dir, MaxDiskBytes: int64(gb * 1e9), Hot: hot, Log: log}, nil
}
