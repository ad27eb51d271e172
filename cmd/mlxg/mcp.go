package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/url"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/mlxg/mlxg/api"
	"github.com/mlxg/mlxg/api/mcpserver"
	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/kvstore/sysmem"
	"github.com/mlxg/mlxg/registry"
)

// newMCPCmd is `mlxg mcp`: the MCP server over stdio, for an MCP host to start (Claude Code, Codex...). It
// talks to the running server at MLXG_HOST or OLLAMA_HOST and starts none.
func newMCPCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the MCP (Model Context Protocol) tools over stdio",
		Long: `mcp speaks the Model Context Protocol on stdin and stdout, for an MCP host to start:
    claude mcp add mlxg -- mlxg mcp
Its tools (generate, chat, list_models, running, memory_status, pull, unload, fit) go to the mlxg server
running at MLXG_HOST or OLLAMA_HOST (default 127.0.0.1:11434); it starts none. A running server also
serves the same tools over streamable HTTP at /mcp.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := api.ClientFromEnvironment()
			if err != nil {
				return err
			}
			s := mcpserver.New(mcpOptions(c))
			return s.Run(cmd.Context(), &mcp.StdioTransport{})
		},
	}
}

func mcpOptions(c *api.Client) mcpserver.Options {
	return mcpserver.Options{Client: c, Version: version, Fit: fitForMCP}
}

// fitForMCP is `mlxg fit MODEL --ctx N` for a model of the store, on this machine's memory. It takes names
// only, not directories, so that a tool call reads no file outside the store.
func fitForMCP(_ context.Context, model string, numCtx int) (string, error) {
	name, err := registry.ParseName(model)
	if err != nil {
		return "", err
	}
	store, err := registry.DefaultStore()
	if err != nil {
		return "", err
	}
	m, err := store.Resolve(name)
	if err != nil {
		return "", err
	}
	shape, err := readShape(m.Dir)
	if err != nil {
		return "", err
	}
	var opts kvstore.Options
	if err := opts.ApplyEnv(os.Getenv); err != nil {
		return "", err
	}
	mem, err := sysmem.System().Read()
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := printFit(&b, model, shape, mem, numCtx, opts); err != nil {
		return "", err
	}
	return b.String(), nil
}

// selfClient is a client of the server listening on addr, for the tools the server serves at /mcp: an
// unspecified address (0.0.0.0, ::) is reached on loopback.
func selfClient(addr net.Addr) *api.Client {
	host := addr.String()
	if ta, ok := addr.(*net.TCPAddr); ok && ta.IP.IsUnspecified() {
		host = net.JoinHostPort("127.0.0.1", fmt.Sprint(ta.Port))
	}
	return api.NewClient(&url.URL{Scheme: "http", Host: host}, nil)
}
