package server

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// Mount serves h at path, for every method, behind the server's Host, Origin and body-size checks (serve
// mounts the MCP server at /mcp). Call it before Serve.
func (s *Server) Mount(path string, h http.Handler) { s.gin.Any(path, gin.WrapH(h)) }
