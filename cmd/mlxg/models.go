package main

import (
	"context"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/server"
)

// modelService is what pull, list, show, rm and cp need: api.Client (a running server) and
// server.Models (the same code in-process) both provide it.
type modelService interface {
	Pull(ctx context.Context, req *api.PullRequest, fn func(api.ProgressResponse) error) error
	List(ctx context.Context) (*api.ListResponse, error)
	Show(ctx context.Context, req *api.ShowRequest) (*api.ShowResponse, error)
	Delete(ctx context.Context, req *api.DeleteRequest) error
	Copy(ctx context.Context, req *api.CopyRequest) error
}

// withModels runs fn against the server at MLXG_HOST/OLLAMA_HOST and, when no server answers there
// (connection refused), against the local store in-process.
func withModels(ctx context.Context, fn func(modelService) error) error {
	c, err := api.ClientFromEnvironment()
	if err != nil {
		return err
	}
	if err := fn(c); err == nil || !api.Unreachable(err) {
		return err
	}
	m, err := server.NewModels()
	if err != nil {
		return err
	}
	return fn(m)
}
