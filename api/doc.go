// Package api holds the wire types of Ollama's API (requests, responses, options; api/openai and
// api/anthropic hold OpenAI's and Anthropic's), the Modelfile parser and api.Client, which talks to an mlxg
// (or Ollama) server. It links none of the engine: a client program importing it gets no runner, kvstore or
// metal package (TestNoEngineDeps holds that). The server, its engine wiring and the in-process model
// operations are in api/server.
package api
