// Package server is the HTTP server that `mlxg serve` runs (Server), the model-management operations
// (Models, also run in-process by the CLI when no server answers) and the Loader that turns a model
// directory into a running Model (EngineLoader: the runner engine). Its requests and answers are package
// api's wire types.
//
// The server speaks Ollama's /api/* (generate, chat, embed, embeddings, tags, show, pull, create, delete,
// copy, ps, version, HEAD and GET /) with NDJSON streaming, OpenAI's /v1/* (chat/completions, completions,
// models, embeddings, responses) with SSE and Anthropic's /v1/messages, over the model store (registry)
// and the scheduler (runner/sched). Output goes through text/parser, which splits thinking and tool
// calls. Images (inputs.go) are decoded before the model loads and go to a model whose checkpoint has a
// vision tower mlxg runs; any other model answers them with a 400 that says it reads text only.
package server
