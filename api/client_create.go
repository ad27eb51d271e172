package api

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
)

// Create is POST /api/create, calling fn with each progress line.
func (c *Client) Create(ctx context.Context, req *CreateRequest, fn func(ProgressResponse) error) error {
	return c.stream(ctx, http.MethodPost, "/api/create", req, func(b []byte) error {
		var p ProgressResponse
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		return fn(p)
	})
}

// CreateBlob is POST /api/blobs/<digest>: it uploads r, which the server checks against digest.
func (c *Client) CreateBlob(ctx context.Context, digest string, r io.Reader) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base.JoinPath("/api/blobs/"+digest).String(), r)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode >= 300 {
		return statusError(resp, body)
	}
	return nil
}
