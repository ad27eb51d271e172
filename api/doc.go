// Package api holds the wire types of Ollama's and OpenAI's APIs, api.Client, and the HTTP server.
package api
