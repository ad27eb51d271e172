package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/mlxg/mlxg/runner/residency"
)

// weightStreaming reads MLXG_WEIGHT_BUDGET (a size: load models in streaming mode, their
// experts or dense layers read from disk, with at most that much of their weights in
// memory; unset: only models
// whose weights do not fit stream) and MLXG_WEIGHT_POLICY (the expert cache's eviction
// policy: frequency, lru or lfu).
func weightStreaming() (budget int64, policy residency.Policy, err error) {
	if v := strings.TrimSpace(os.Getenv("MLXG_WEIGHT_BUDGET")); v != "" {
		n, err := humanize.ParseBytes(v)
		if err != nil || n == 0 {
			return 0, 0, fmt.Errorf("MLXG_WEIGHT_BUDGET=%q: want a size such as 2GiB or 1500MB", v)
		}
		budget = int64(n)
	}
	policy, err = residency.ParsePolicy(os.Getenv("MLXG_WEIGHT_POLICY"))
	if err != nil {
		return 0, 0, fmt.Errorf("MLXG_WEIGHT_POLICY: %w", err)
	}
	return budget, policy, nil
}
