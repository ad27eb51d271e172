package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// DefaultPort is Ollama's port, which mlxg serves on too.
const DefaultPort = "11434"

// Host is the server address from $MLXG_HOST, else $OLLAMA_HOST, parsed by Ollama's rules: surrounding
// spaces and quotes are trimmed; no scheme means http; a missing host is 127.0.0.1; a missing port is 11434
// (80 for an explicit http://, 443 for https://); an invalid port falls back to that default; a path is kept.
func Host() *url.URL {
	s := envValue("MLXG_HOST")
	if s == "" {
		s = envValue("OLLAMA_HOST")
	}
	return ParseHost(s)
}

func envValue(key string) string {
	return strings.Trim(strings.TrimSpace(os.Getenv(key)), `"' `)
}

// ParseHost applies Host's rules to one value ("" gives http://127.0.0.1:11434).
func ParseHost(s string) *url.URL {
	defaultPort := DefaultPort
	scheme, hostport, ok := strings.Cut(s, "://")
	switch {
	case !ok:
		scheme, hostport = "http", s
	case scheme == "http":
		defaultPort = "80"
	case scheme == "https":
		defaultPort = "443"
	}
	hostport, path, _ := strings.Cut(hostport, "/")
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = "127.0.0.1", defaultPort
		if ip := net.ParseIP(strings.Trim(hostport, "[]")); ip != nil {
			host = ip.String()
		} else if hostport != "" {
			host = hostport
		}
	}
	if n, err := strconv.ParseInt(port, 10, 32); err != nil || n > 65535 || n < 0 {
		port = defaultPort
	}
	return &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port), Path: path}
}

// Client talks to an mlxg (or Ollama) server.
type Client struct {
	base *url.URL
	http *http.Client
}

// NewClient is a client of the server at base.
func NewClient(base *url.URL, h *http.Client) *Client {
	if h == nil {
		h = http.DefaultClient
	}
	return &Client{base: base, http: h}
}

// ClientFromEnvironment is a client of Host().
func ClientFromEnvironment() (*Client, error) {
	return NewClient(Host(), nil), nil
}

// Base is the server address the client uses.
func (c *Client) Base() *url.URL { return c.base }

// Unreachable reports whether err means no server answered at all (connection refused, no such host),
// the case in which the CLI runs the same code in-process instead.
func Unreachable(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &dns)
}

func (c *Client) newRequest(ctx context.Context, method, path string, data any) (*http.Request, error) {
	var body io.Reader
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	u := c.base.JoinPath(path)
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	return req, nil
}

func statusError(resp *http.Response, body []byte) error {
	var e StatusError
	_ = json.Unmarshal(body, &e)
	if e.ErrorMessage == "" {
		e.ErrorMessage = strings.TrimSpace(string(body))
	}
	e.StatusCode, e.Status = resp.StatusCode, resp.Status
	return e
}

// do sends data as JSON and decodes a JSON answer into out (if not nil).
func (c *Client) do(ctx context.Context, method, path string, data, out any) error {
	req, err := c.newRequest(ctx, method, path, data)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= http.StatusBadRequest {
		return statusError(resp, body)
	}
	if out != nil && len(body) > 0 {
		if err := json.Unmarshal(body, out); err != nil {
			return fmt.Errorf("%s %s: the server's answer is not the expected JSON: %w", method, path, err)
		}
	}
	return nil
}

// stream sends data and calls fn with each NDJSON line of the answer; a line with "error" ends it.
func (c *Client) stream(ctx context.Context, method, path string, data any, fn func([]byte) error) error {
	req, err := c.newRequest(ctx, method, path, data)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= http.StatusBadRequest {
		body, _ := io.ReadAll(resp.Body)
		return statusError(resp, body)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 8<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e struct {
			Error string `json:"error,omitempty"`
		}
		if err := json.Unmarshal(line, &e); err != nil {
			return fmt.Errorf("%s %s: unreadable stream line: %w", method, path, err)
		}
		if e.Error != "" {
			return StatusError{StatusCode: resp.StatusCode, Status: resp.Status, ErrorMessage: e.Error}
		}
		if err := fn(line); err != nil {
			return err
		}
	}
	return sc.Err()
}

// Pull streams POST /api/pull, calling fn with each progress event.
func (c *Client) Pull(ctx context.Context, req *PullRequest, fn func(ProgressResponse) error) error {
	return c.stream(ctx, http.MethodPost, "/api/pull", req, func(b []byte) error {
		var p ProgressResponse
		if err := json.Unmarshal(b, &p); err != nil {
			return err
		}
		return fn(p)
	})
}

// List is GET /api/tags.
func (c *Client) List(ctx context.Context) (*ListResponse, error) {
	var out ListResponse
	return &out, c.do(ctx, http.MethodGet, "/api/tags", nil, &out)
}

// Show is POST /api/show.
func (c *Client) Show(ctx context.Context, req *ShowRequest) (*ShowResponse, error) {
	var out ShowResponse
	return &out, c.do(ctx, http.MethodPost, "/api/show", req, &out)
}

// Delete is DELETE /api/delete.
func (c *Client) Delete(ctx context.Context, req *DeleteRequest) error {
	return c.do(ctx, http.MethodDelete, "/api/delete", req, nil)
}

// Copy is POST /api/copy.
func (c *Client) Copy(ctx context.Context, req *CopyRequest) error {
	return c.do(ctx, http.MethodPost, "/api/copy", req, nil)
}

// Version is GET /api/version's "version": the Ollama API version the server follows.
func (c *Client) Version(ctx context.Context) (string, error) {
	v, err := c.Versions(ctx)
	if err != nil {
		return "", err
	}
	return v.Version, nil
}

// Versions is GET /api/version whole: the Ollama API version and, from an mlxg server, mlxg's own.
func (c *Client) Versions(ctx context.Context) (*VersionResponse, error) {
	var v VersionResponse
	if err := c.do(ctx, http.MethodGet, "/api/version", nil, &v); err != nil {
		return nil, err
	}
	return &v, nil
}

// Heartbeat is HEAD /: nil when a server answers.
func (c *Client) Heartbeat(ctx context.Context) error {
	return c.do(ctx, http.MethodHead, "/", nil, nil)
}
