// Package api holds the wire types of Ollama's API (and, in api/openai, OpenAI's), api.Client, the
// model-management operations (Models, also run in-process by the CLI when no server answers) and the HTTP
// server (Server) that `mlxg serve` runs.
//
// The server speaks Ollama's /api/* (generate, chat, embed, embeddings, tags, show, pull, delete, copy, ps,
// version, HEAD and GET /) with NDJSON streaming, and OpenAI's /v1/* (chat/completions, completions, models,
// embeddings) with SSE, over the model store (registry), the scheduler (runner/sched) and a Loader that turns
// a model directory into a running Model (EngineLoader: the runner engine). Output goes through
// runner/parser, which splits thinking and tool calls. Not supported: images (text-only models) and
// format/response_format (structured outputs); both are refused with a 400 that says so.
package api
