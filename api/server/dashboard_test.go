package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestDashboardRoutes: the pages are served from the embedded files only (a path out of them is 404, never a
// file of the machine), behind the Origin check, and NoDashboard turns them off.
func TestDashboardRoutes(t *testing.T) {
	ts, _, _ := statusServer(t, ServerConfig{})
	get := func(path, origin string) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	for _, p := range []string{"/dashboard", "/dashboard/", "/dashboard/chat", "/dashboard/app.js", "/dashboard/chat.js", "/dashboard/style.css", "/dashboard/icon.svg"} {
		code, body, h := get(p, "")
		if code != 200 || body == "" || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Fatalf("%s: %d %.100s %v", p, code, body, h)
		}
	}
	if _, body, h := get("/dashboard/chat", ""); !strings.Contains(body, "<html") || !strings.HasPrefix(h.Get("Content-Type"), "text/html") {
		t.Fatalf("chat page: %s %.200s", h.Get("Content-Type"), body)
	}
	for _, p := range []string{"/dashboard/../go.mod", "/dashboard/%2e%2e/%2e%2e/etc/passwd", "/dashboard/..%2fserver.go",
		"/dashboard//etc/passwd", "/dashboard/nope.html", "/dashboard/.hidden", "/dashboard/dashboard.go"} {
		if code, body, _ := get(p, ""); code != 404 && !(code == 301 || code == 307) || strings.Contains(body, "root:") || strings.Contains(body, "package ") {
			t.Fatalf("%s: %d %.200s", p, code, body)
		}
	}
	if code, _, _ := get("/dashboard", "https://evil.example"); code != http.StatusForbidden {
		t.Fatalf("foreign origin: %d", code)
	}
	if code, _, _ := get("/dashboard", "http://localhost:5173"); code != 200 {
		t.Fatalf("loopback origin: %d", code)
	}

	off, _, _ := statusServer(t, ServerConfig{NoDashboard: true})
	resp, err := http.Get(off.URL + "/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Fatalf("dashboard off: %d", resp.StatusCode)
	}
	if resp, err = http.Get(off.URL + "/api/status"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status with the dashboard off: %v %v", resp, err)
	}
	resp.Body.Close()
}
