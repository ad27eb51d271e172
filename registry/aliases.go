package registry

import (
	"fmt"
	"slices"
	"strings"
)

// BuiltinAliases maps short Ollama-style names to popular mlx-community checkpoints (README lists them).
// User aliases made by `mlxg cp` and local models (`mlxg create`) take precedence.
var BuiltinAliases = map[string]string{
	"qwen3:0.6b":    "mlx-community/Qwen3-0.6B-4bit",
	"qwen3:1.7b":    "mlx-community/Qwen3-1.7B-4bit",
	"qwen3:4b":      "mlx-community/Qwen3-4B-4bit",
	"qwen3:8b":      "mlx-community/Qwen3-8B-4bit",
	"qwen3:14b":     "mlx-community/Qwen3-14B-4bit",
	"qwen3:30b-a3b": "mlx-community/Qwen3-30B-A3B-4bit",
	"llama3.2:1b":   "mlx-community/Llama-3.2-1B-Instruct-4bit",
	"llama3.2:3b":   "mlx-community/Llama-3.2-3B-Instruct-4bit",
	"llama3.1:8b":   "mlx-community/Meta-Llama-3.1-8B-Instruct-4bit",
	"gemma3:1b":     "mlx-community/gemma-3-1b-it-4bit",
	"gemma3:4b":     "mlx-community/gemma-3-4b-it-4bit",
	"mistral:7b":    "mlx-community/Mistral-7B-Instruct-v0.3-4bit",
}

// builtin resolves a bare name through BuiltinAliases.
func builtin(bare string) (Name, bool) {
	repo, ok := BuiltinAliases[bare]
	if !ok {
		return Name{}, false
	}
	return Name{Repo: repo, Revision: DefaultRevision}, true
}

// unknownBare is the error for a bare name that nothing resolves.
func unknownBare(bare string) error {
	keys := make([]string, 0, len(BuiltinAliases))
	for k := range BuiltinAliases {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return fmt.Errorf("%w: %q is not a Hub repo (org/name), an alias made with mlxg cp, a model made with mlxg create, or a built-in alias (%s)",
		ErrNotFound, bare, strings.Join(keys, ", "))
}
