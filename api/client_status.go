package api

import (
	"context"
	"net/http"
)

// Status reads the server's status (GET /api/status, an mlxg extension).
func (c *Client) Status(ctx context.Context) (*StatusResponse, error) {
	var out StatusResponse
	return &out, c.do(ctx, http.MethodGet, "/api/status", nil, &out)
}
