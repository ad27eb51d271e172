// Package dashboard holds the web dashboard's pages: plain HTML, JavaScript and CSS, embedded in the binary
// (no build step, nothing loaded from elsewhere). The server (api/server) serves them at /dashboard; they
// read /api/status, /api/status/events and /api/ps and talk to models through the public /api/chat.
package dashboard

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// Files are the dashboard's files: index.html, chat.html and the scripts, styles and icon they load.
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embedded tree always has static/
	}
	return sub
}
