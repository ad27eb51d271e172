package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
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

// CreateBlob stores r as the blob digest names (in-process, as POST /api/blobs/:digest does).
func (m *Models) CreateBlob(ctx context.Context, digest string, r io.Reader) error {
	p, err := blobPath(m.Store, digest)
	if err != nil {
		return err
	}
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := writeBlob(p, r); err != nil {
		return fmt.Errorf("blob %s: %w", digest, err)
	}
	return nil
}
