package server

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mlxg/mlxg/registry"
	"github.com/mlxg/mlxg/runner/sched"
)

func TestHostAllowed(t *testing.T) {
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 11434}
	loop6 := &net.TCPAddr{IP: net.IPv6loopback, Port: 11434}
	any4 := &net.TCPAddr{IP: net.IPv4zero, Port: 11434}
	lan := &net.TCPAddr{IP: net.IPv4(192, 168, 1, 20), Port: 11434}
	name, _ := os.Hostname()
	for _, c := range []struct {
		listen net.Addr
		host   string
		want   bool
	}{
		{loop, "localhost:11434", true},
		{loop, "LOCALHOST", true},
		{loop, "localhost.:11434", true},
		{loop, "127.0.0.1:11434", true},
		{loop, "[::1]:11434", true},
		{loop, "[::1]", true},
		{loop, "0.0.0.0:11434", true},
		{loop, "10.0.0.5:11434", true},      // private
		{loop, "192.168.1.9", true},         // private
		{loop, "app.localhost:11434", true}, // local TLDs
		{loop, "printer.local", true},
		{loop, "svc.internal:80", true},
		{loop, "", true}, // HTTP/1.0 without Host
		{loop, strings.ToUpper(name), name != ""},
		{loop, "evil.example.com", false}, // DNS rebinding: a public name resolved to 127.0.0.1
		{loop, "evil.example.com:11434", false},
		{loop, "localhost.evil.com", false},
		{loop, "8.8.8.8:11434", false}, // a public address that is not this machine's
		{loop6, "evil.example.com", false},
		{loop6, "localhost", true},
		{any4, "evil.example.com", true}, // bound to every address: any name
		{lan, "my-server.example.com", true},
		{nil, "evil.example.com", true}, // a handler used without Serve
	} {
		if got := hostAllowed(c.listen, c.host); got != c.want {
			t.Errorf("listening on %v, Host %q: allowed %v, want %v", c.listen, c.host, got, c.want)
		}
	}
}

// Through a real listener on loopback: a rebinding name gets a JSON 403 in each API's error shape,
// local names pass; bound to 0.0.0.0, any name passes.
func TestHostCheckServe(t *testing.T) {
	for _, bind := range []string{"127.0.0.1:0", "0.0.0.0:0"} {
		tmp := t.TempDir()
		store := &registry.Store{HubCache: tmp + "/hub", Home: tmp + "/home"}
		srv, err := NewServer(ServerConfig{Store: store, Loader: &EngineLoader{Threads: 1}, Sched: sched.Config{}, Version: "test", Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := net.Listen("tcp", bind)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, l, time.Second) }()
		port := l.Addr().(*net.TCPAddr).Port
		get := func(path, host string) (int, map[string]any) {
			req, _ := http.NewRequest("GET", "http://127.0.0.1:"+itoa(port)+path, nil)
			req.Host = host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			return resp.StatusCode, body
		}
		loopback := bind == "127.0.0.1:0"
		for _, host := range []string{"localhost:" + itoa(port), "127.0.0.1:" + itoa(port), "ui.localhost"} {
			if code, _ := get("/api/version", host); code != 200 {
				t.Errorf("bound to %s, Host %q: status %d", bind, host, code)
			}
		}
		code, body := get("/api/version", "attacker.example.com")
		switch {
		case loopback && (code != 403 || !strings.Contains(body["error"].(string), "attacker.example.com")):
			t.Errorf("bound to loopback, a foreign Host: %d %v", code, body)
		case !loopback && code != 200:
			t.Errorf("bound to 0.0.0.0, a foreign Host: %d %v", code, body)
		}
		if loopback {
			code, body = get("/v1/models", "attacker.example.com")
			e, _ := body["error"].(map[string]any)
			if code != 403 || e == nil || !strings.Contains(e["message"].(string), "not allowed") {
				t.Errorf("/v1/models with a foreign Host: %d %v, want OpenAI's error shape", code, body)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
