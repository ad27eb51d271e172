// Command fakehub serves a folder of model repos through the Hugging Face Hub's HTTP API, so that
// `mlxg pull` can be tried and tested without the internet:
//
//	go run ./scripts/fakehub -addr 127.0.0.1:8090 -dir DIR
//	HF_ENDPOINT=http://127.0.0.1:8090 mlxg pull org/name
//
// Every folder DIR/org/name/ is a model repo with one revision, main, whose commit id is a hash of its
// files' names and contents (change a file, get a new commit). Files under hidden folders are skipped.
//
// What it reproduces (the handler is github.com/mlxg/mlxg/registry/hubtest):
//   - GET /api/models/{org}/{name} and /api/models/{org}/{name}/revision/{rev}: the model info JSON
//     (id, modelId, sha = the commit, siblings[].rfilename; with ?blobs=true also siblings[].size,
//     .blobId and .lfs{sha256,size,pointerSize}). rev is "main" or the commit.
//   - GET /api/models/{org}/{name}/tree/{rev}[/{path}][?recursive=true]: the tree listing
//     ([{type, oid, size, path, lfs{oid,size,pointerSize}}]).
//   - HEAD/GET /{org}/{name}/resolve/{rev}/{file}: X-Repo-Commit on every answer; small files are served
//     directly with ETag = their git blob id; LFS files (*.safetensors and the other extensions of the Hub's
//     default .gitattributes, or any file of 10 MiB and more) answer 302 with ETag = the pointer's git blob
//     id, X-Linked-Etag = the sha256, X-Linked-Size = the size, and Location = a "CDN" URL under /lfs/:
//     relative, or with -cdn ADDR absolute to a second listener at ADDR, another host:port as on
//     huggingface.co (whose CDN hosts must not be sent the token; the CDN takes none). A repo name spelled
//     otherwise than the folder answers a relative 307 to the folder's spelling, as the Hub does for
//     renamed repos and other casings. Downloads honour Range (206 with Content-Range, 416 past the end)
//     and send Accept-Ranges: bytes.
//   - Errors as the Hub sends them: the status, X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound,
//     GatedRepo), X-Error-Message, and a JSON {"error": ...} body.
//
// Where the shapes come from: huggingface_hub's sources (file_download.py: hf_hub_download, the HEAD-then-GET
// of /resolve/ with X-Repo-Commit, X-Linked-Etag, X-Linked-Size and ETag normalization, relative redirects,
// Range resumes from blobs/<etag>.incomplete, and the cache layout; hf_api.py: model_info with blobs=True
// and RepoSibling/BlobLfsInfo, list_repo_tree and RepoFile; utils/_http.py: X-Error-Code and
// X-Error-Message), and the git-lfs pointer format (version/oid sha256/size lines).
// Not reproduced: authentication beyond one bearer token, pagination of tree listings, branches other than
// main, datasets and spaces, Xet storage.
//
// Fault switches, for tests and demos: -status 401|403|404|500 answers every request with that status;
// -token T makes the repos gated (401 without "Authorization: Bearer T"); -cut-after N closes the connection
// after N bytes of a download (-cut-file F: only that file; -cut-times K: only the first K downloads);
// -cdn-status S answers CDN downloads with status S and an S3-style XML error body;
// -corrupt F flips one byte of file F; -chunk-delay D sleeps D per 32 KiB sent; -rate-limited N answers
// the first N requests to the Hub (the CDN is not limited) with 429, with -retry-after V as Retry-After
// and -ratelimit V as the IETF RateLimit header the Hub sends ('"api";r=0;t=55': quota "api", 0 requests
// left, reset in 55 seconds; RateLimit-Policy goes along).
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/mlxg/mlxg/registry/hubtest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8090", "address to listen on")
	dir := flag.String("dir", ".", "folder holding org/name/ repo folders")
	var f hubtest.Faults
	flag.IntVar(&f.Status, "status", 0, "answer every request with this HTTP status (401, 403, 404, 500)")
	flag.StringVar(&f.Token, "token", "", "require Authorization: Bearer TOKEN (a gated repo)")
	flag.Int64Var(&f.CutAfter, "cut-after", 0, "close the connection after this many bytes of a download")
	flag.StringVar(&f.CutFile, "cut-file", "", "cut only downloads of this file (default: every file)")
	flag.IntVar(&f.CutTimes, "cut-times", 0, "cut only this many downloads (default: all)")
	flag.StringVar(&f.Corrupt, "corrupt", "", "serve this file with one byte flipped")
	flag.DurationVar(&f.ChunkDelay, "chunk-delay", 0, "sleep this long per 32 KiB sent (a slow network)")
	flag.IntVar(&f.CDNStatus, "cdn-status", 0, "answer CDN downloads (/lfs/) with this status and an S3-style XML error (400, 403, 404, 500)")
	flag.IntVar(&f.RateLimited, "rate-limited", 0, "answer this many requests to the Hub (not the CDN) with 429 first")
	flag.StringVar(&f.RetryAfter, "retry-after", "", "Retry-After header of those 429s (seconds or an HTTP date)")
	flag.StringVar(&f.RateLimit, "ratelimit", "", `RateLimit header of those 429s, e.g. '"api";r=0;t=55'`)
	cdn := flag.String("cdn", "", "also listen on this address (e.g. 127.0.0.1:8091) and redirect LFS downloads there")
	quiet := flag.Bool("quiet", false, "do not log each request")
	flag.Parse()
	if fi, err := os.Stat(*dir); err != nil || !fi.IsDir() {
		fmt.Fprintf(os.Stderr, "fakehub: -dir %s is not a folder\n", *dir)
		os.Exit(2)
	}
	h := hubtest.New(*dir)
	h.SetFaults(f)
	log.Printf("fakehub: serving %s on http://%s (use HF_ENDPOINT=http://%s)", *dir, *addr, *addr)
	var handler http.Handler = h
	if !*quiet {
		handler = logRequests(h)
	}
	if *cdn != "" {
		h.SetCDN("http://" + *cdn)
		log.Printf("fakehub: LFS downloads redirect to http://%s", *cdn)
		go func() { log.Fatal(http.ListenAndServe(*cdn, handler)) }()
	}
	log.Fatal(http.ListenAndServe(*addr, handler))
}

// logRequests logs one line per request: method, path, Range, status and body bytes sent.
func logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			log.Printf("%s %s%s range=%q auth=%v -> %d, %d bytes", r.Method, r.Host, r.URL.Path, r.Header.Get("Range"), r.Header.Get("Authorization") != "", rec.status, rec.bytes)
		}()
		next.ServeHTTP(rec, r)
	})
}

type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(code int) { r.status = code; r.ResponseWriter.WriteHeader(code) }

func (r *recorder) Write(p []byte) (int, error) {
	n, err := r.ResponseWriter.Write(p)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() { http.NewResponseController(r.ResponseWriter).Flush() }
