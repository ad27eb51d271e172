// Package hubtest is a fake Hugging Face Hub: an http.Handler that serves every folder DIR/org/name/ as a
// model repo at revision main, through the Hub API shapes mlxg's pull uses, with fault switches for tests
// (cut a download after N bytes, corrupt a byte, answer 401/403/404, go slowly). LFS downloads redirect to
// its "CDN" paths (/lfs/...), on the same server or, with SetCDN, at another address as huggingface.co
// redirects to another host; the same handler serves both. scripts/fakehub runs it as a program; its doc
// comment lists the endpoints and headers reproduced and where their shapes come from.
package hubtest

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// LFSThreshold is the size from which a file is stored in LFS whatever its extension (the Hub's 10 MiB rule).
const LFSThreshold = 10 << 20

// lfsExts are the extensions the Hub's default .gitattributes sends to LFS.
var lfsExts = []string{".safetensors", ".bin", ".gguf", ".pt", ".pth", ".ckpt", ".h5", ".onnx", ".msgpack", ".npz", ".npy", ".model", ".zip"}

// Faults switch on failures. The zero value is a healthy hub.
type Faults struct {
	Status     int           // answer every API and download request with this status (401, 403, 404, 500...)
	Token      string        // if set, requests without "Authorization: Bearer <Token>" get 401 (a gated repo)
	CutFile    string        // file name whose downloads are cut ("" = every file)
	CutAfter   int64         // close the connection after this many body bytes of a download (0 = never)
	CutTimes   int           // how many downloads to cut before serving whole again (0 = every one)
	Corrupt    string        // file name served with one byte flipped (in the middle)
	ChunkDelay time.Duration // sleep this long per 32 KiB of download body (slow network)
	// CDNStatus answers downloads from the CDN (/lfs/) with this status and an S3-style XML error
	// (<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error> for 403).
	CDNStatus int
	// RateLimited answers this many requests to the Hub (not to the CDN) with 429 before serving again,
	// with the headers below when set.
	RateLimited int
	RateLimitOn string // only requests whose path holds this, e.g. "/resolve/" ("" = all to the Hub)
	RetryAfter  string // Retry-After of those 429s: seconds, or an HTTP date
	RateLimit   string // RateLimit of those 429s, as the Hub sends it: "api";r=0;t=55 (quota, remaining, reset seconds)
}

// Server is the fake hub. It is safe for concurrent use; SetFaults may change the faults while it serves.
type Server struct {
	dir string

	mu       sync.Mutex
	faults   Faults
	cdn      string // base URL of LFS redirects; "" = relative, to this server
	cuts     int
	limited  int              // requests answered 429 since SetFaults
	served   map[string]int64 // file name -> body bytes sent, over all downloads
	ranges   []string         // the Range header of every download, "" when none
	requests []Request
	hashes   map[string]hashed
}

// Request is what the server saw of one request.
type Request struct {
	Method string
	Host   string // the Host header, with its port
	Path   string
	Auth   string // the Authorization header, "" when none
}

type hashed struct {
	size    int64
	mtime   time.Time
	sha256  string
	gitSHA1 string
}

// New serves the repos under dir (dir/org/name/...).
func New(dir string) *Server {
	return &Server{dir: dir, served: map[string]int64{}, hashes: map[string]hashed{}}
}

// SetFaults replaces the faults (and restarts the CutTimes count).
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults, s.cuts, s.limited = f, 0, 0
}

// SetCDN makes LFS downloads redirect to base (e.g. "http://127.0.0.1:8091", a second listener serving
// this same handler) instead of to a relative /lfs/ path on the server asked.
func (s *Server) SetCDN(base string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cdn = strings.TrimRight(base, "/")
}

// Requests lists every request so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Served is how many body bytes of file name have been sent, over all downloads.
func (s *Server) Served(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served[name]
}

// Ranges lists the Range header of every download request so far ("" when none).
func (s *Server) Ranges() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ranges)
}

// file is one file of a repo as the Hub describes it.
type file struct {
	Path    string // relative, '/'-separated
	Size    int64
	GitSHA1 string // git blob id of the content (non-LFS) or of the LFS pointer
	SHA256  string // LFS only
	Pointer int64  // LFS pointer size
	abs     string
}

func (f file) lfs() bool { return f.SHA256 != "" }

type repo struct {
	id     string
	commit string
	files  []file
}

func hubError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	if code != "" {
		w.Header().Set("X-Error-Code", code)
	}
	w.Header().Set("X-Error-Message", msg)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f := s.faults
	s.requests = append(s.requests, Request{Method: r.Method, Host: r.Host, Path: r.URL.Path, Auth: r.Header.Get("Authorization")})
	p := r.URL.Path
	limit := s.limited < f.RateLimited && !strings.HasPrefix(p, "/lfs/") && strings.Contains(p, f.RateLimitOn)
	if limit {
		s.limited++
	}
	s.mu.Unlock()
	if limit {
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		if f.RateLimit != "" {
			w.Header().Set("RateLimit", f.RateLimit)
			quota, _, _ := strings.Cut(strings.TrimPrefix(f.RateLimit, `"`), `"`)
			w.Header().Set("RateLimit-Policy", fmt.Sprintf(`"fixed window";%q;q=%d;w=300`, quota, map[string]int{"api": 500, "resolvers": 3000, "pages": 100}[quota]))
		}
		hubError(w, http.StatusTooManyRequests, "", "fakehub: rate limited")
		return
	}
	if f.Status != 0 {
		code := map[int]string{401: "GatedRepo", 403: "GatedRepo", 404: "RepoNotFound"}[f.Status]
		hubError(w, f.Status, code, fmt.Sprintf("fakehub: fault %d for %s", f.Status, r.URL.Path))
		return
	}
	// A CDN link is signed by the Hub that gave it: the CDN itself takes no token.
	if f.Token != "" && r.Header.Get("Authorization") != "Bearer "+f.Token && !strings.HasPrefix(p, "/lfs/") {
		hubError(w, http.StatusUnauthorized, "GatedRepo", "Access to this repo is restricted: you must be authenticated to access it.")
		return
	}
	switch {
	case strings.HasPrefix(p, "/api/models/"):
		s.serveAPI(w, r, strings.TrimPrefix(p, "/api/models/"))
	case strings.HasPrefix(p, "/lfs/"):
		s.serveLFS(w, r, strings.TrimPrefix(p, "/lfs/"))
	default:
		s.serveResolve(w, r, strings.TrimPrefix(p, "/"))
	}
}

// serveAPI answers model info (org/name, org/name/revision/REV) and tree listings (org/name/tree/REV[/path]).
func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, rest string) {
	parts := strings.SplitN(rest, "/", 4)
	if len(parts) < 2 {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return
	}
	rp, ok := s.load(w, parts[0]+"/"+parts[1])
	if !ok {
		return
	}
	kind, rev, sub := "info", "main", ""
	if len(parts) >= 3 {
		kind = parts[2]
		if len(parts) == 4 {
			rev, sub, _ = strings.Cut(parts[3], "/")
		}
	}
	if rev, _ = url.PathUnescape(rev); rev != "main" && rev != rp.commit {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	switch kind {
	case "info", "revision":
		blobs := r.URL.Query().Get("blobs")
		withBlobs := blobs != "" && blobs != "0" && !strings.EqualFold(blobs, "false")
		siblings := []map[string]any{}
		for _, f := range rp.files {
			sib := map[string]any{"rfilename": f.Path}
			if withBlobs {
				sib["blobId"], sib["size"] = f.GitSHA1, f.Size
				if f.lfs() {
					sib["lfs"] = map[string]any{"sha256": f.SHA256, "size": f.Size, "pointerSize": f.Pointer}
				}
			}
			siblings = append(siblings, sib)
		}
		enc.Encode(map[string]any{
			"_id": rp.commit[:24], "id": rp.id, "modelId": rp.id, "sha": rp.commit,
			"private": false, "gated": false, "disabled": false, "library_name": "mlx", "tags": []string{"mlx", "safetensors"},
			"lastModified": time.Unix(0, 0).UTC().Format(time.RFC3339), "siblings": siblings,
		})
	case "tree":
		recursive := r.URL.Query().Get("recursive") != ""
		out := []map[string]any{}
		dirs := map[string]bool{}
		for _, f := range rp.files {
			rel, ok := strings.CutPrefix(f.Path, sub)
			if sub != "" && (!ok || !strings.HasPrefix(rel, "/")) {
				continue
			}
			rel = strings.TrimPrefix(rel, "/")
			if d, _, nested := strings.Cut(rel, "/"); nested && !recursive {
				if !dirs[d] {
					dirs[d] = true
					out = append(out, map[string]any{"type": "directory", "oid": rp.commit, "size": 0, "path": path.Join(sub, d)})
				}
				continue
			}
			e := map[string]any{"type": "file", "oid": f.GitSHA1, "size": f.Size, "path": f.Path}
			if f.lfs() {
				e["lfs"] = map[string]any{"oid": f.SHA256, "size": f.Size, "pointerSize": f.Pointer}
			}
			out = append(out, e)
		}
		enc.Encode(out)
	default:
		hubError(w, http.StatusNotFound, "", "Not found")
	}
}

// serveResolve answers HEAD/GET org/name/resolve/REV/FILE: non-LFS files directly, LFS files by a 302 to /lfs/
// (on the CDN if one is set), and a repo name spelled otherwise than the Hub's by a relative 307 to its
// spelling, as the Hub answers for renamed repos and other casings.
func (s *Server) serveResolve(w http.ResponseWriter, r *http.Request, rest string) {
	parts := strings.SplitN(rest, "/", 5)
	if len(parts) != 5 || parts[2] != "resolve" {
		hubError(w, http.StatusNotFound, "", "Not found")
		return
	}
	rp, ok := s.load(w, parts[0]+"/"+parts[1])
	if !ok {
		return
	}
	if parts[0]+"/"+parts[1] != rp.id {
		w.Header().Set("Location", (&url.URL{Path: "/" + rp.id + "/resolve/" + parts[3] + "/" + parts[4]}).EscapedPath())
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	if rev, _ := url.PathUnescape(parts[3]); rev != "main" && rev != rp.commit {
		hubError(w, http.StatusNotFound, "RevisionNotFound", "Invalid rev id: "+rev)
		return
	}
	i := slices.IndexFunc(rp.files, func(f file) bool { return f.Path == parts[4] })
	if i < 0 {
		hubError(w, http.StatusNotFound, "EntryNotFound", parts[4]+" does not exist on \"main\"")
		return
	}
	f := rp.files[i]
	h := w.Header()
	h.Set("X-Repo-Commit", rp.commit)
	if f.lfs() {
		h.Set("ETag", `"`+f.GitSHA1+`"`)
		h.Set("X-Linked-Etag", `"`+f.SHA256+`"`)
		h.Set("X-Linked-Size", fmt.Sprint(f.Size))
		s.mu.Lock()
		cdn := s.cdn
		s.mu.Unlock()
		h.Set("Location", cdn+"/lfs/"+rp.id+"/"+f.SHA256+"?file="+url.QueryEscape(f.Path))
		w.WriteHeader(http.StatusFound)
		return
	}
	h.Set("ETag", `"`+f.GitSHA1+`"`)
	s.serveFile(w, r, f)
}

// serveLFS is the "CDN" an LFS redirect points to: org/name/SHA256?file=PATH.
func (s *Server) serveLFS(w http.ResponseWriter, r *http.Request, rest string) {
	s.mu.Lock()
	status := s.faults.CDNStatus
	s.mu.Unlock()
	if status != 0 {
		e, ok := map[int][2]string{
			400: {"InvalidArgument", "Invalid argument"},
			403: {"AccessDenied", "Request has expired"},
			404: {"NoSuchKey", "The specified key does not exist."},
		}[status]
		if !ok {
			e = [2]string{"InternalError", "We encountered an internal error. Please try again."}
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>", e[0], e[1])
		return
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 {
		http.NotFound(w, r)
		return
	}
	rp, ok := s.load(w, parts[0]+"/"+parts[1])
	if !ok {
		return
	}
	i := slices.IndexFunc(rp.files, func(f file) bool { return f.SHA256 == parts[2] && f.Path == r.URL.Query().Get("file") })
	if i < 0 {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("ETag", `"`+rp.files[i].SHA256+`"`)
	s.serveFile(w, r, rp.files[i])
}

// serveFile sends a file's bytes with Range support, applying the cut, corrupt and slow faults.
func (s *Server) serveFile(w http.ResponseWriter, r *http.Request, f file) {
	fh, err := os.Open(f.abs)
	if err != nil {
		hubError(w, http.StatusInternalServerError, "", err.Error())
		return
	}
	defer fh.Close()
	s.mu.Lock()
	faults := s.faults
	cut := faults.CutAfter > 0 && (faults.CutFile == "" || faults.CutFile == f.Path) &&
		(faults.CutTimes == 0 || s.cuts < faults.CutTimes)
	if cut && r.Method == http.MethodGet {
		s.cuts++
	}
	if r.Method == http.MethodGet {
		s.ranges = append(s.ranges, r.Header.Get("Range"))
	}
	s.mu.Unlock()
	var content io.ReaderAt = fh
	if faults.Corrupt == f.Path && f.Size > 0 {
		content = flipped{fh, f.Size / 2}
	}
	cw := &countingWriter{ResponseWriter: w, s: s, name: f.Path, delay: faults.ChunkDelay, limit: -1}
	if cut {
		cw.limit = faults.CutAfter
	}
	w.Header().Set("Accept-Ranges", "bytes")
	http.ServeContent(cw, r, "", time.Time{}, io.NewSectionReader(content, 0, f.Size))
}

// flipped reads like r but with the byte at off inverted.
type flipped struct {
	r   io.ReaderAt
	off int64
}

func (f flipped) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.r.ReadAt(p, off)
	if f.off >= off && f.off < off+int64(n) {
		p[f.off-off] ^= 0xff
	}
	return n, err
}

// countingWriter counts body bytes, sleeps per chunk, and aborts the connection after limit bytes.
type countingWriter struct {
	http.ResponseWriter
	s     *Server
	name  string
	delay time.Duration
	limit int64 // -1: no cut
	sent  int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.limit >= 0 && c.sent+int64(len(p)) > c.limit {
		p = p[:c.limit-c.sent]
		n, _ := c.ResponseWriter.Write(p)
		c.add(n)
		http.NewResponseController(c.ResponseWriter).Flush()
		panic(http.ErrAbortHandler) // the client sees the connection drop mid-body
	}
	if c.delay > 0 {
		time.Sleep(c.delay * time.Duration(1+len(p)/(32<<10)))
	}
	n, err := c.ResponseWriter.Write(p)
	c.add(n)
	return n, err
}

func (c *countingWriter) add(n int) {
	c.sent += int64(n)
	c.s.mu.Lock()
	c.s.served[c.name] += int64(n)
	c.s.mu.Unlock()
}

// load lists and hashes a repo's files (hashes are cached by size and modification time).
func (s *Server) load(w http.ResponseWriter, id string) (*repo, bool) {
	org, name, _ := strings.Cut(id, "/")
	if org == "" || name == "" || strings.HasPrefix(org, ".") || strings.HasPrefix(name, ".") || strings.ContainsAny(id, `\`) {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil, false
	}
	// Repo names are case-insensitive on the Hub, which answers with its own spelling.
	org, name, ok := s.findRepo(org, name)
	if !ok {
		hubError(w, http.StatusNotFound, "RepoNotFound", "Repository not found")
		return nil, false
	}
	root := filepath.Join(s.dir, org, name)
	rp := &repo{id: org + "/" + name}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasPrefix(d.Name(), ".") && p != root {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		f, err := s.describe(p, filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		rp.files = append(rp.files, f)
		return nil
	})
	if err != nil {
		hubError(w, http.StatusInternalServerError, "", err.Error())
		return nil, false
	}
	// The commit id stands for the content: the same files give the same commit.
	h := sha1.New()
	for _, f := range rp.files {
		fmt.Fprintf(h, "%s %s\n", f.GitSHA1, f.Path)
	}
	rp.commit = hex.EncodeToString(h.Sum(nil))
	return rp, true
}

// findRepo finds the folder org/name, ignoring case, and returns its spelling.
func (s *Server) findRepo(org, name string) (string, string, bool) {
	match := func(dir, want string) (string, bool) {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			if e.IsDir() && strings.EqualFold(e.Name(), want) {
				return e.Name(), true
			}
		}
		return "", false
	}
	o, ok := match(s.dir, org)
	if !ok {
		return "", "", false
	}
	n, ok := match(filepath.Join(s.dir, o), name)
	return o, n, ok
}

func (s *Server) describe(abs, rel string) (file, error) {
	fi, err := os.Stat(abs)
	if err != nil {
		return file{}, err
	}
	s.mu.Lock()
	c, ok := s.hashes[abs]
	s.mu.Unlock()
	if !ok || c.size != fi.Size() || !c.mtime.Equal(fi.ModTime()) {
		fh, err := os.Open(abs)
		if err != nil {
			return file{}, err
		}
		defer fh.Close()
		s256, g := sha256.New(), sha1.New()
		fmt.Fprintf(g, "blob %d\x00", fi.Size())
		if _, err := io.Copy(io.MultiWriter(s256, g), fh); err != nil {
			return file{}, err
		}
		c = hashed{size: fi.Size(), mtime: fi.ModTime(), sha256: hex.EncodeToString(s256.Sum(nil)), gitSHA1: hex.EncodeToString(g.Sum(nil))}
		s.mu.Lock()
		s.hashes[abs] = c
		s.mu.Unlock()
	}
	f := file{Path: rel, Size: fi.Size(), GitSHA1: c.gitSHA1, abs: abs}
	if fi.Size() >= LFSThreshold || slices.Contains(lfsExts, strings.ToLower(path.Ext(rel))) {
		pointer := fmt.Sprintf("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n", c.sha256, fi.Size())
		g := sha1.New()
		fmt.Fprintf(g, "blob %d\x00%s", len(pointer), pointer)
		f.SHA256, f.Pointer, f.GitSHA1 = c.sha256, int64(len(pointer)), hex.EncodeToString(g.Sum(nil))
	}
	return f, nil
}
