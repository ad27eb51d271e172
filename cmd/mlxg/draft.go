package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner"
)

// registerDraftFlags binds --num-draft, and mlx-lm's name for it, --num-draft-tokens, to n
// (-1 when neither is given).
func registerDraftFlags(f *pflag.FlagSet, n *int, what string) {
	*n = -1
	f.IntVar(n, "num-draft", -1, fmt.Sprintf("%s: the most tokens speculative decoding (prompt lookup) drafts a step; 0 turns it off (default %d)", what, runner.DefaultNumDraft))
	f.IntVar(n, "num-draft-tokens", -1, "the same as --num-draft (mlx-lm's name)")
}

// numDraftGiven reports whether a draft flag was given.
func numDraftGiven(f *pflag.FlagSet) bool {
	return f.Changed("num-draft") || f.Changed("num-draft-tokens")
}

// checkNumDraft checks a num_draft value from a flag or the environment.
func checkNumDraft(name string, n int) error {
	if n < 0 || n > runner.MaxNumDraft {
		return fmt.Errorf("%s is %d: use 0 (no speculative decoding) to %d", name, n, runner.MaxNumDraft)
	}
	return nil
}

// serveNumDraft is the server's default num_draft (server.ServerConfig.NumDraft: 0 for the
// built-in default, negative for off) from the flags, else MLXG_NUM_DRAFT.
func serveNumDraft(f *pflag.FlagSet, n int, getenv func(string) string) (int, error) {
	name := "--num-draft"
	if !numDraftGiven(f) {
		v := strings.TrimSpace(getenv("MLXG_NUM_DRAFT"))
		if v == "" {
			return 0, nil
		}
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			return 0, fmt.Errorf("MLXG_NUM_DRAFT=%q: want a number of tokens (0 turns speculative decoding off)", v)
		}
		name = "MLXG_NUM_DRAFT"
	}
	if err := checkNumDraft(name, n); err != nil {
		return 0, err
	}
	if n == 0 {
		return -1, nil
	}
	return n, nil
}

// serveDraftModel is the server's default draft model (server.ServerConfig.DraftModel) from
// --draft-model, else MLXG_DRAFT_MODEL; "" is none. The name is checked here; whether the model
// is in the store, when a request needs it.
func serveDraftModel(f *pflag.FlagSet, name string, getenv func(string) string) (string, error) {
	what := "--draft-model"
	if !f.Changed("draft-model") {
		name, what = strings.TrimSpace(getenv("MLXG_DRAFT_MODEL")), "MLXG_DRAFT_MODEL"
	}
	if name == "" {
		return "", nil
	}
	if _, err := registry.ParseName(name); err != nil {
		return "", fmt.Errorf("%s=%q: %w", what, name, err)
	}
	return name, nil
}
