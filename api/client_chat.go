package api

import (
	"context"
	"encoding/json"
	"net/http"
)

// Generate streams POST /api/generate, calling fn with each response (one when req.Stream is false).
func (c *Client) Generate(ctx context.Context, req *GenerateRequest, fn func(GenerateResponse) error) error {
	return c.stream(ctx, http.MethodPost, "/api/generate", req, func(b []byte) error {
		var r GenerateResponse
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		return fn(r)
	})
}

// Chat streams POST /api/chat, calling fn with each response (one when req.Stream is false).
func (c *Client) Chat(ctx context.Context, req *ChatRequest, fn func(ChatResponse) error) error {
	return c.stream(ctx, http.MethodPost, "/api/chat", req, func(b []byte) error {
		var r ChatResponse
		if err := json.Unmarshal(b, &r); err != nil {
			return err
		}
		return fn(r)
	})
}

// ListRunning is GET /api/ps.
func (c *Client) ListRunning(ctx context.Context) (*ProcessResponse, error) {
	var out ProcessResponse
	return &out, c.do(ctx, http.MethodGet, "/api/ps", nil, &out)
}

// Embed is POST /api/embed.
func (c *Client) Embed(ctx context.Context, req *EmbedRequest) (*EmbedResponse, error) {
	var out EmbedResponse
	return &out, c.do(ctx, http.MethodPost, "/api/embed", req, &out)
}
