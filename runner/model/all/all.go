// Package all registers every architecture mlxg supports: import it for its side effect.
package all

import (
	_ "github.com/mlxg/mlxg/runner/gemma3"
	_ "github.com/mlxg/mlxg/runner/gemma4"
	_ "github.com/mlxg/mlxg/runner/glm4moe"
	_ "github.com/mlxg/mlxg/runner/gptoss"
	_ "github.com/mlxg/mlxg/runner/llama"
	_ "github.com/mlxg/mlxg/runner/mistral"
	_ "github.com/mlxg/mlxg/runner/phi3"
	_ "github.com/mlxg/mlxg/runner/qwen2"
	_ "github.com/mlxg/mlxg/runner/qwen25vl"
	_ "github.com/mlxg/mlxg/runner/qwen3"
	_ "github.com/mlxg/mlxg/runner/qwen3moe"
	_ "github.com/mlxg/mlxg/runner/qwen3next"
)
