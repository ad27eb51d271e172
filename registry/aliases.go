package registry

import (
	"fmt"
	"slices"
	"strings"
)

// LibraryModel is one name of Ollama's model library that mlxg resolves, and the mlx-community 4-bit
// checkpoint it stands for.
type LibraryModel struct {
	Name string // "family:tag", as Ollama's library spells it
	Repo string // the Hub repo pulled and run for it
	// Latest marks the tag Ollama's library serves as family:latest (and so for the bare family name).
	Latest bool
}

// Library is the one table of Ollama library names (README's "Library names" lists it). A family's
// bare name and family:latest resolve to the row marked Latest, which is the size Ollama's library
// tags latest. User aliases made by `mlxg cp` and models made by `mlxg create` take precedence.
var Library = []LibraryModel{
	{"qwen3:0.6b", "mlx-community/Qwen3-0.6B-4bit", false},
	{"qwen3:1.7b", "mlx-community/Qwen3-1.7B-4bit", false},
	{"qwen3:4b", "mlx-community/Qwen3-4B-4bit", false},
	{"qwen3:8b", "mlx-community/Qwen3-8B-4bit", true},
	{"qwen3:14b", "mlx-community/Qwen3-14B-4bit", false},
	{"qwen3:32b", "mlx-community/Qwen3-32B-4bit", false},
	{"qwen3:30b", "mlx-community/Qwen3-30B-A3B-4bit", false},
	{"qwen3:30b-a3b", "mlx-community/Qwen3-30B-A3B-4bit", false},
	{"qwen3-coder:30b", "mlx-community/Qwen3-Coder-30B-A3B-Instruct-4bit", true},
	{"qwen2.5:0.5b", "mlx-community/Qwen2.5-0.5B-Instruct-4bit", false},
	{"qwen2.5:1.5b", "mlx-community/Qwen2.5-1.5B-Instruct-4bit", false},
	{"qwen2.5:3b", "mlx-community/Qwen2.5-3B-Instruct-4bit", false},
	{"qwen2.5:7b", "mlx-community/Qwen2.5-7B-Instruct-4bit", true},
	{"qwen2.5:14b", "mlx-community/Qwen2.5-14B-Instruct-4bit", false},
	{"qwen2.5:32b", "mlx-community/Qwen2.5-32B-Instruct-4bit", false},
	{"qwen2.5:72b", "mlx-community/Qwen2.5-72B-Instruct-4bit", false},
	{"qwen2.5-coder:0.5b", "mlx-community/Qwen2.5-Coder-0.5B-Instruct-4bit", false},
	{"qwen2.5-coder:1.5b", "mlx-community/Qwen2.5-Coder-1.5B-Instruct-4bit", false},
	{"qwen2.5-coder:3b", "mlx-community/Qwen2.5-Coder-3B-Instruct-4bit", false},
	{"qwen2.5-coder:7b", "mlx-community/Qwen2.5-Coder-7B-Instruct-4bit", true},
	{"qwen2.5-coder:14b", "mlx-community/Qwen2.5-Coder-14B-Instruct-4bit", false},
	{"qwen2.5-coder:32b", "mlx-community/Qwen2.5-Coder-32B-Instruct-4bit", false},
	{"deepseek-r1:1.5b", "mlx-community/DeepSeek-R1-Distill-Qwen-1.5B-4bit", false},
	{"deepseek-r1:7b", "mlx-community/DeepSeek-R1-Distill-Qwen-7B-4bit", false},
	{"deepseek-r1:8b", "mlx-community/DeepSeek-R1-0528-Qwen3-8B-4bit", true},
	{"deepseek-r1:14b", "mlx-community/DeepSeek-R1-Distill-Qwen-14B-4bit", false},
	{"deepseek-r1:32b", "mlx-community/DeepSeek-R1-Distill-Qwen-32B-4bit", false},
	{"deepseek-r1:70b", "mlx-community/DeepSeek-R1-Distill-Llama-70B-4bit", false},
	{"llama3.2:1b", "mlx-community/Llama-3.2-1B-Instruct-4bit", false},
	{"llama3.2:3b", "mlx-community/Llama-3.2-3B-Instruct-4bit", true},
	{"llama3.1:8b", "mlx-community/Meta-Llama-3.1-8B-Instruct-4bit", true},
	{"llama3.1:70b", "mlx-community/Meta-Llama-3.1-70B-Instruct-4bit", false},
	{"llama3.3:70b", "mlx-community/Llama-3.3-70B-Instruct-4bit", true},
	{"llama3:8b", "mlx-community/Meta-Llama-3-8B-Instruct-4bit", true},
	{"gemma3:1b", "mlx-community/gemma-3-1b-it-4bit", false},
	{"gemma3:4b", "mlx-community/gemma-3-4b-it-4bit", true},
	{"gemma3:12b", "mlx-community/gemma-3-12b-it-4bit", false},
	{"gemma3:27b", "mlx-community/gemma-3-27b-it-4bit", false},
	{"mistral:7b", "mlx-community/Mistral-7B-Instruct-v0.3-4bit", true},
}

// LibraryRepo gives the repo a library name stands for: "family:tag", or "family:latest" for the
// family's Latest row. Names are compared as ParseName gives them (lower case).
func LibraryRepo(bare string) (string, bool) {
	family, tag, _ := strings.Cut(bare, ":")
	for _, m := range Library {
		if m.Name == bare || (tag == DefaultTag && m.Latest && strings.HasPrefix(m.Name, family+":")) {
			return m.Repo, true
		}
	}
	return "", false
}

// builtin resolves a bare name through Library.
func builtin(bare string) (Name, bool) {
	repo, ok := LibraryRepo(bare)
	if !ok {
		return Name{}, false
	}
	return Name{Repo: repo, Revision: DefaultRevision}, true
}

// unknownBare is the error for a bare name that nothing resolves; it lists the library's families.
func unknownBare(bare string) error {
	var families []string
	for _, m := range Library {
		if f, _, _ := strings.Cut(m.Name, ":"); !slices.Contains(families, f) {
			families = append(families, f)
		}
	}
	slices.Sort(families)
	return fmt.Errorf("%w: %q is not a Hub repo (org/name), an alias made with mlxg cp, a model made with mlxg create, or an Ollama library name mlxg knows (%s, with their tags: see README's Library names)",
		ErrNotFound, bare, strings.Join(families, ", "))
}
