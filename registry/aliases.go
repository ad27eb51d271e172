package registry

import (
	"fmt"
	"slices"
	"strings"
)

// LibraryModel is one name of Ollama's model library that mlxg resolves, and the mlx-community MLX
// checkpoint it stands for (4-bit affine, or for gpt-oss the MXFP4 experts OpenAI ships with 8-bit
// attention).
type LibraryModel struct {
	Name string // "family:tag", as Ollama's library spells it
	Repo string // the Hub repo pulled and run for it
	// Latest marks the tag Ollama's library serves as family:latest (and so for the bare family name).
	Latest bool
}

// Library is the one table of Ollama library names (docs/models.md's "Library names" lists it). A family's
// bare name and family:latest resolve to the row marked Latest, which is the size Ollama's library
// tags latest. User aliases made by `mlxg cp` and models made by `mlxg create` take precedence.
//
// Each repo is spelled as mlx-community names it (the Hub compares names without case). The rows added
// for the late-2026 families were checked against public sources (Hugging Face model pages, issues and
// code that load the repo), and each family's latest against what Ollama's library serves (the default
// the size of its latest download shows); the comments say where a row rests on less.
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
	// Qwen3.5 (qwen3_5, qwen3_5_moe; latest is the 9B, 6.6 GB on Ollama). mlx-community also has
	// -MLX-4bit conversions of the small sizes; these are its plain -4bit ones.
	{"qwen3.5:0.8b", "mlx-community/Qwen3.5-0.8B-4bit", false},
	{"qwen3.5:2b", "mlx-community/Qwen3.5-2B-4bit", false},
	{"qwen3.5:4b", "mlx-community/Qwen3.5-4B-4bit", false},
	{"qwen3.5:9b", "mlx-community/Qwen3.5-9B-4bit", true},
	{"qwen3.5:27b", "mlx-community/Qwen3.5-27B-4bit", false},
	{"qwen3.5:35b", "mlx-community/Qwen3.5-35B-A3B-4bit", false},
	{"qwen3.5:35b-a3b", "mlx-community/Qwen3.5-35B-A3B-4bit", false},
	{"qwen3.5:122b", "mlx-community/Qwen3.5-122B-A10B-4bit", false},
	{"qwen3.5:122b-a10b", "mlx-community/Qwen3.5-122B-A10B-4bit", false},
	// Qwen3.6 (qwen3_5, qwen3_5_moe; latest is the 35B-A3B, 24 GB on Ollama).
	{"qwen3.6:27b", "mlx-community/Qwen3.6-27B-4bit", false},
	{"qwen3.6:35b", "mlx-community/Qwen3.6-35B-A3B-4bit", true},
	{"qwen3.6:35b-a3b", "mlx-community/Qwen3.6-35B-A3B-4bit", false},
	// Qwen3-Next (qwen3_next). Ollama's 80b (latest) is the thinking model, served as reasoning; the
	// instruct model has its own tag.
	{"qwen3-next:80b", "mlx-community/Qwen3-Next-80B-A3B-Thinking-4bit", true},
	{"qwen3-next:80b-a3b-thinking", "mlx-community/Qwen3-Next-80B-A3B-Thinking-4bit", false},
	{"qwen3-next:80b-a3b-instruct", "mlx-community/Qwen3-Next-80B-A3B-Instruct-4bit", false},
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
	// Gemma 4 (gemma4; the 12B, released after the others, is gemma4_unified). latest is the E4B
	// (9.6 GB on Ollama). The 12b tag is in use with Ollama, though the library page seen (from before
	// the 12B's release) lists e2b, e4b, 26b and 31b only.
	{"gemma4:e2b", "mlx-community/gemma-4-e2b-it-4bit", false},
	{"gemma4:e4b", "mlx-community/gemma-4-e4b-it-4bit", true},
	{"gemma4:12b", "mlx-community/gemma-4-12B-it-4bit", false},
	{"gemma4:26b", "mlx-community/gemma-4-26b-a4b-it-4bit", false},
	{"gemma4:31b", "mlx-community/gemma-4-31b-it-4bit", false},
	// gpt-oss (gpt_oss; latest is the 20B): MXFP4 experts as OpenAI ships them, the rest at 8 bits.
	{"gpt-oss:20b", "mlx-community/gpt-oss-20b-MXFP4-Q8", true},
	{"gpt-oss:120b", "mlx-community/gpt-oss-120b-MXFP4-Q8", false},
	// GLM-4.7-Flash (glm4_moe_lite): one size on Ollama, tagged latest (and by quantization).
	{"glm-4.7-flash:latest", "mlx-community/GLM-4.7-Flash-4bit", true},
	{"mistral:7b", "mlx-community/Mistral-7B-Instruct-v0.3-4bit", true},
	// Mistral Small 3.2 and Magistral Small (mistral3 wrapping a mistral text model), Devstral Small 2 and
	// Ministral 3 (mistral3 wrapping ministral3): one 24B size each, Ministral 3 in three (latest 8B).
	// Ollama's magistral is taken to be Magistral Small 1.2 (2509), its newest release.
	{"mistral-small3.2:24b", "mlx-community/Mistral-Small-3.2-24B-Instruct-2506-4bit", true},
	{"magistral:24b", "mlx-community/Magistral-Small-2509-4bit", true},
	{"devstral-small-2:24b", "mlx-community/Devstral-Small-2-24B-Instruct-2512-4bit", true},
	{"ministral-3:3b", "mlx-community/Ministral-3-3B-Instruct-2512-4bit", false},
	{"ministral-3:8b", "mlx-community/Ministral-3-8B-Instruct-2512-4bit", true},
	{"ministral-3:14b", "mlx-community/Ministral-3-14B-Instruct-2512-4bit", false},
	// Phi-4 and Phi-4-mini (phi3).
	{"phi4:14b", "mlx-community/phi-4-4bit", true},
	{"phi4-mini:3.8b", "mlx-community/Phi-4-mini-instruct-4bit", true},
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
	return fmt.Errorf("%w: %q is not a Hub repo (org/name), an alias made with mlxg cp, a model made with mlxg create, or an Ollama library name mlxg knows (%s, with their tags: see docs/models.md, Library names)",
		ErrNotFound, bare, strings.Join(families, ", "))
}
