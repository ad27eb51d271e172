package server

// The web dashboard at /dashboard (the pages are in api/server/dashboard) and the chat page at
// /dashboard/chat, behind the same Host and Origin checks as the API. Only the embedded files are served:
// no path reaches the file system.

import (
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/mlxg/mlxg/api/server/dashboard"
)

func (s *Server) routeDashboard(g *gin.Engine) {
	files := dashboard.Files()
	serve := func(c *gin.Context) {
		name := strings.TrimPrefix(c.Param("file"), "/")
		switch name {
		case "":
			name = "index.html"
		case "chat":
			name = "chat.html"
		}
		if name != path.Clean(name) || strings.HasPrefix(name, ".") || !fs.ValidPath(name) {
			abort(c, http.StatusNotFound, "404 page not found")
			return
		}
		b, err := fs.ReadFile(files, name)
		if err != nil {
			abort(c, http.StatusNotFound, "404 page not found")
			return
		}
		ct := mime.TypeByExtension(path.Ext(name))
		if ct == "" {
			ct = "application/octet-stream"
		}
		h := c.Writer.Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		// Only this server's own scripts, styles and API: nothing from a CDN or anywhere else.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		c.Data(http.StatusOK, ct, b)
	}
	g.GET("/dashboard", serve)
	g.GET("/dashboard/*file", serve)
}
