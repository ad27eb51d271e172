package kvstore

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Defaults of the prefix cache.
const (
	DefaultPrefixMaxGB = 20 // --block-ssd-cache-max-size
	DefaultPrefixHot   = 64 // --prompt-cache-hot
)

// PrefixEnvVars maps each prefix-cache setting (by its flag name) to its environment
// variable; a flag wins.
var PrefixEnvVars = map[string]string{
	"block-ssd-cache-dir":      "MLXG_PREFIX_DIR",
	"block-ssd-cache-max-size": "MLXG_PREFIX_MAX_SIZE",
	"prompt-cache-hot":         "MLXG_PROMPT_CACHE_HOT",
}

// PrefixOptions are the user's prefix-cache settings, from flags (bound in cmd/mlxg)
// and environment.
type PrefixOptions struct {
	Dir       string  // SSD tier folder; "" the default, "off" none
	MaxSizeGB float64 // SSD tier cap in GB (10^9 bytes); 0 with no source: the default
	Hot       int     // blocks loaded into RAM at start-up
	Source    map[string]string
}

// PrefixSettings are the names of the prefix-cache settings, which are also their
// flags' names.
var PrefixSettings = []string{"block-ssd-cache-dir", "block-ssd-cache-max-size", "prompt-cache-hot"}

// Set applies one setting by its name (one of PrefixSettings) and records from (the
// flag or variable that gave it) in Source; a malformed value is an error naming from.
func (o *PrefixOptions) Set(name, value, from string) error {
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

// ApplyEnv fills the settings no flag gave from the environment; getenv is os.Getenv
// outside tests.
func (o *PrefixOptions) ApplyEnv(getenv func(string) string) error {
	for _, name := range PrefixSettings {
		env := PrefixEnvVars[name]
		if v := getenv(env); v != "" && o.Source[name] == "" {
			if err := o.Set(name, v, env); err != nil {
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
