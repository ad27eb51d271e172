package sched

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ConfigFromEnv reads MLXG_NUM_PARALLEL, MLXG_MAX_QUEUE and MLXG_KEEP_ALIVE, each falling back on its OLLAMA_
// twin, so an Ollama setup carries over, and MLXG_RETRY_AFTER (a BusyError's Retry-After: a duration or a
// number of seconds). getenv is os.Getenv in production.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	var c Config
	var err error
	if c.NumParallel, err = envInt(getenv, "NUM_PARALLEL", 1); err != nil {
		return c, err
	}
	if c.MaxQueue, err = envInt(getenv, "MAX_QUEUE", 512); err != nil {
		return c, err
	}
	name, v := lookup(getenv, "KEEP_ALIVE")
	c.DefaultKeepAlive = 5 * time.Minute
	if v != "" {
		d, err := ParseKeepAlive(v)
		if err != nil {
			return c, fmt.Errorf("%s=%q: %w", name, v, err)
		}
		c.DefaultKeepAlive = d
		if d == 0 {
			// 0 means "unload at once"; Config's zero value means "default", so use the smallest duration.
			c.DefaultKeepAlive = time.Nanosecond
		}
	}
	c.RetryAfter = 10 * time.Second
	if v := strings.TrimSpace(getenv("MLXG_RETRY_AFTER")); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			n, nerr := strconv.Atoi(v)
			d, err = time.Duration(n)*time.Second, nerr
		}
		if err != nil || d < time.Second || d > time.Hour {
			return c, fmt.Errorf("MLXG_RETRY_AFTER=%q: want a duration from 1s to 1h, such as 10s, or a number of seconds", v)
		}
		c.RetryAfter = d
	}
	return c, nil
}

func lookup(getenv func(string) string, key string) (string, string) {
	for _, prefix := range []string{"MLXG_", "OLLAMA_"} {
		if v := strings.TrimSpace(getenv(prefix + key)); v != "" {
			return prefix + key, v
		}
	}
	return "MLXG_" + key, ""
}

func envInt(getenv func(string) string, key string, def int) (int, error) {
	name, v := lookup(getenv, key)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a whole number of at least 1", name, v)
	}
	return n, nil
}

// ParseKeepAlive reads a keep_alive as Ollama does: a Go duration ("5m", "1h30m") or a number of seconds;
// a negative value means forever (returned as -1).
func ParseKeepAlive(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return -1, nil
		}
		return d, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("keep_alive must be a duration such as 5m, 1h or 30s, or a number of seconds (negative: forever)")
	}
	if f < 0 {
		return -1, nil
	}
	if f*float64(time.Second) > math.MaxInt64 {
		return -1, nil
	}
	return time.Duration(f * float64(time.Second)), nil
}
