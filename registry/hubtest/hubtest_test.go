package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func setup(t *testing.T) (*Server, *httptest.Server, []byte) {
	t.Helper()
	dir := t.TempDir()
	weights := make([]byte, 100_000)
	for i := range weights {
		weights[i] = byte(i * 17)
	}
	for name, body := range map[string][]byte{
		"org/m/config.json":       []byte(`{"model_type":"x"}`),
		"org/m/model.safetensors": weights,
		"org/m/sub/notes.txt":     []byte("hi"),
	} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, body, 0o644)
	}
	h := New(dir)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return h, srv, weights
}

func noRedirect() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func TestModelInfoAndTree(t *testing.T) {
	_, srv, weights := setup(t)
	var info struct {
		ID       string `json:"id"`
		SHA      string `json:"sha"`
		Siblings []struct {
			RFilename string `json:"rfilename"`
			BlobID    string `json:"blobId"`
			Size      int64  `json:"size"`
			LFS       *struct {
				SHA256      string `json:"sha256"`
				Size        int64  `json:"size"`
				PointerSize int64  `json:"pointerSize"`
			} `json:"lfs"`
		} `json:"siblings"`
	}
	resp, err := http.Get(srv.URL + "/api/models/org/m/revision/main?blobs=true")
	if err != nil {
		t.Fatal(err)
	}
	json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if info.ID != "org/m" || len(info.SHA) != 40 || len(info.Siblings) != 3 {
		t.Fatalf("info = %+v", info)
	}
	sum := sha256.Sum256(weights)
	for _, s := range info.Siblings {
		switch s.RFilename {
		case "model.safetensors":
			if s.LFS == nil || s.LFS.SHA256 != hex.EncodeToString(sum[:]) || s.LFS.Size != int64(len(weights)) || s.Size != int64(len(weights)) {
				t.Errorf("LFS sibling %+v", s)
			}
		case "config.json":
			h := sha1.New()
			fmt.Fprintf(h, "blob %d\x00%s", len(`{"model_type":"x"}`), `{"model_type":"x"}`)
			if s.LFS != nil || s.BlobID != hex.EncodeToString(h.Sum(nil)) {
				t.Errorf("git sibling %+v", s)
			}
		}
	}
	var tree []map[string]any
	resp, _ = http.Get(srv.URL + "/api/models/org/m/tree/main")
	json.NewDecoder(resp.Body).Decode(&tree)
	resp.Body.Close()
	kinds := map[any]int{}
	for _, e := range tree {
		kinds[e["type"]]++
	}
	if kinds["file"] != 2 || kinds["directory"] != 1 {
		t.Errorf("tree (not recursive) = %v", tree)
	}
	resp, _ = http.Get(srv.URL + "/api/models/org/m/tree/main?recursive=true")
	tree = nil
	json.NewDecoder(resp.Body).Decode(&tree)
	resp.Body.Close()
	if len(tree) != 3 || tree[2]["path"] != "sub/notes.txt" {
		t.Errorf("tree (recursive) = %v", tree)
	}
	resp, _ = http.Get(srv.URL + "/api/models/org/m/revision/nope")
	if resp.StatusCode != 404 || resp.Header.Get("X-Error-Code") != "RevisionNotFound" {
		t.Errorf("bad revision: %d %q", resp.StatusCode, resp.Header.Get("X-Error-Code"))
	}
	resp, _ = http.Get(srv.URL + "/api/models/org/none")
	if resp.StatusCode != 404 || resp.Header.Get("X-Error-Code") != "RepoNotFound" {
		t.Errorf("bad repo: %d %q", resp.StatusCode, resp.Header.Get("X-Error-Code"))
	}
}

func TestResolveHeadersAndRanges(t *testing.T) {
	h, srv, weights := setup(t)
	req, _ := http.NewRequest(http.MethodHead, srv.URL+"/org/m/resolve/main/model.safetensors", nil)
	resp, err := noRedirect().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(weights)
	if resp.StatusCode != http.StatusFound || resp.Header.Get("X-Linked-Etag") != `"`+hex.EncodeToString(sum[:])+`"` ||
		resp.Header.Get("X-Linked-Size") != fmt.Sprint(len(weights)) || len(resp.Header.Get("X-Repo-Commit")) != 40 ||
		!strings.HasPrefix(resp.Header.Get("Location"), "/lfs/org/m/") {
		t.Errorf("LFS resolve: %d %v", resp.StatusCode, resp.Header)
	}
	get := func(rng string) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/org/m/resolve/main/model.safetensors", nil)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	resp, b := get("bytes=1000-")
	if resp.StatusCode != http.StatusPartialContent || string(b) != string(weights[1000:]) ||
		resp.Header.Get("Content-Range") != fmt.Sprintf("bytes 1000-%d/%d", len(weights)-1, len(weights)) {
		t.Errorf("range: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Content-Range"), len(b))
	}
	if resp, _ := get(fmt.Sprintf("bytes=%d-", len(weights))); resp.StatusCode != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("range past the end: %d", resp.StatusCode)
	}
	h.SetFaults(Faults{Corrupt: "model.safetensors"})
	if _, b := get(""); string(b) == string(weights) || len(b) != len(weights) {
		t.Error("corrupt fault did not flip exactly within the file")
	}
	h.SetFaults(Faults{CutAfter: 5000, CutTimes: 1})
	req, _ = http.NewRequest(http.MethodGet, srv.URL+"/org/m/resolve/main/model.safetensors", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || len(b) != 5000 {
		t.Errorf("cut: read %d bytes, err %v; want 5000 and an error", len(b), err)
	}
	if _, b := get(""); string(b) != string(weights) {
		t.Error("second download after CutTimes 1 was not whole")
	}
	h.SetFaults(Faults{Token: "s"})
	if resp, _ := get(""); resp.StatusCode != 401 || resp.Header.Get("X-Error-Code") != "GatedRepo" {
		t.Errorf("gated: %d", resp.StatusCode)
	}
}

// LFS downloads can redirect to a CDN at another address; the CDN takes no token, and another spelling of
// a repo name gets a relative 307 to the Hub's.
func TestCDNAndRelativeRedirect(t *testing.T) {
	h, srv, weights := setup(t)
	cdn := httptest.NewServer(h)
	defer cdn.Close()
	h.SetCDN(cdn.URL + "/")
	h.SetFaults(Faults{Token: "s"})
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ORG/M/resolve/main/model.safetensors", nil)
	req.Header.Set("Authorization", "Bearer s")
	resp, err := noRedirect().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "/org/m/resolve/main/model.safetensors" {
		t.Fatalf("other spelling: %d, Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	req.URL, _ = req.URL.Parse(resp.Header.Get("Location"))
	resp, err = noRedirect().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc, cdn.URL+"/lfs/org/m/") {
		t.Fatalf("LFS resolve with a CDN: %d, Location %q", resp.StatusCode, loc)
	}
	resp, err = http.Get(loc) // no token: the CDN link is enough
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != string(weights) {
		t.Errorf("CDN download: %d, %d bytes", resp.StatusCode, len(b))
	}
	reqs := h.Requests()
	if last := reqs[len(reqs)-1]; last.Host != strings.TrimPrefix(cdn.URL, "http://") || last.Auth != "" || !strings.HasPrefix(last.Path, "/lfs/") {
		t.Errorf("last request seen: %+v", last)
	}
}
