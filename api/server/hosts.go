package server

// The Host-header check against DNS rebinding, decided as Ollama's allowed-hosts middleware decides it:
// a web page on an attacker's domain can make a browser resolve that domain to 127.0.0.1 and then talk to
// a server on loopback with its own Host header; the browser's same-origin rules do not stop it, so a
// server that only listens on loopback answers only requests that name a local host.

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"

	"github.com/gin-gonic/gin"
)

// hostGuard holds the address the server listens on (set by Serve; nil for a handler used without it,
// which then accepts any Host, as Ollama's does without an address).
type hostGuard struct{ addr atomic.Value }

func (g *hostGuard) listen(a net.Addr) { g.addr.Store(&a) }

func (g *hostGuard) get() net.Addr {
	if p, ok := g.addr.Load().(*net.Addr); ok {
		return *p
	}
	return nil
}

// checkHost answers 403 to a request whose Host header names no local host while the server listens on a
// loopback address. Bound to any other address (0.0.0.0, ::, a LAN address), the server is meant to be
// reached by other names, and every Host passes.
func (s *Server) checkHost(c *gin.Context) {
	listen := s.hosts.get()
	if hostAllowed(listen, c.Request.Host) {
		c.Next()
		return
	}
	abort(c, http.StatusForbidden, fmt.Sprintf("host %q is not allowed: the server listens on %s (loopback only), so it answers only requests "+
		"for localhost, this machine's name or a local address; to serve other names, listen on 0.0.0.0 (MLXG_HOST or OLLAMA_HOST)",
		c.Request.Host, listen))
}

// hostAllowed decides whether a Host header may reach a server listening on listen.
func hostAllowed(listen net.Addr, hostHeader string) bool {
	if listen == nil {
		return true
	}
	if ap, err := netip.ParseAddrPort(listen.String()); err == nil && !ap.Addr().IsLoopback() {
		return true
	}
	host := hostHeader
	if h, _, err := net.SplitHostPort(hostHeader); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		ip = ip.Unmap()
		return ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() || localIP(ip)
	}
	if host == "" || host == "localhost" {
		return true
	}
	if name, err := os.Hostname(); err == nil && host == strings.ToLower(name) {
		return true
	}
	for _, tld := range []string{".localhost", ".local", ".internal"} {
		if strings.HasSuffix(host, tld) {
			return true
		}
	}
	return false
}

// localIP reports whether ip is one of this machine's interface addresses.
func localIP(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().Unmap() == ip {
			return true
		}
	}
	return false
}
