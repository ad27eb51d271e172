package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// DefaultEndpoint is the Hub mlxg pulls from unless $HF_ENDPOINT says otherwise.
const DefaultEndpoint = "https://huggingface.co"

// Endpoint is $HF_ENDPOINT, else DefaultEndpoint.
func Endpoint() string {
	if e := strings.TrimRight(os.Getenv("HF_ENDPOINT"), "/"); e != "" {
		return e
	}
	return DefaultEndpoint
}

// Token is $HF_TOKEN (or its old name $HUGGING_FACE_HUB_TOKEN), else the token `hf auth login` saved
// ($HF_TOKEN_PATH, else HFHome()/token), else "".
func Token() string {
	for _, k := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := strings.TrimSpace(os.Getenv(k)); t != "" {
			return t
		}
	}
	p := os.Getenv("HF_TOKEN_PATH")
	if p == "" {
		home, err := HFHome()
		if err != nil {
			return ""
		}
		p = filepath.Join(home, "token")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// hub is a small client of the Hub's HTTP API.
type hub struct {
	endpoint string
	token    string
	client   *http.Client
}

func newHub(endpoint, token string, client *http.Client) *hub {
	c := *client
	c.CheckRedirect = tokenStaysHome(client.CheckRedirect)
	return &hub{endpoint: endpoint, token: token, client: &c}
}

// tokenStaysHome wraps a redirect policy (nil: Go's default, at most 10 redirects) so that the
// Authorization header follows a redirect only while every URL of the chain has the first one's scheme,
// host and port. Go's own policy keeps it for the same host at another port and for subdomains, and the
// Hub sends LFS downloads to CDN hosts that must never see the token.
func tokenStaysHome(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		home := sameOrigin(req.URL, via[0].URL)
		for _, r := range via[1:] {
			home = home && sameOrigin(r.URL, via[0].URL)
		}
		if !home {
			req.Header.Del("Authorization")
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}

// sameOrigin reports whether two URLs have the same scheme, host and port (a missing port being the
// scheme's default).
func sameOrigin(a, b *url.URL) bool {
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		switch strings.ToLower(u.Scheme) {
		case "http":
			return "80"
		case "https":
			return "443"
		}
		return ""
	}
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Hostname(), b.Hostname()) && port(a) == port(b)
}

// repoInfo is the part of GET /api/models/{repo}/revision/{rev}?blobs=true that pull needs.
type repoInfo struct {
	ID       string    `json:"id"`
	SHA      string    `json:"sha"`
	Siblings []sibling `json:"siblings"`
}

type sibling struct {
	RFilename string `json:"rfilename"`
	Size      int64  `json:"size"`
	BlobID    string `json:"blobId"` // git blob id (of the LFS pointer for LFS files)
	LFS       *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs"`
}

// etag is the blob name huggingface_hub gives a file: the sha256 for LFS files, else the git blob id.
func (s sibling) etag() string {
	if s.LFS != nil {
		return s.LFS.SHA256
	}
	return s.BlobID
}

// digest names the file in progress events: "sha256:<hex>" for LFS files, else the git blob id.
func (s sibling) digest() string {
	if s.LFS != nil {
		return "sha256:" + s.LFS.SHA256
	}
	return s.BlobID
}

func (s sibling) size() int64 {
	if s.LFS != nil {
		return s.LFS.Size
	}
	return s.Size
}

// HubError is an error answer of the Hub, with what to do about it.
type HubError struct {
	Status  int    // HTTP status
	Code    string // the Hub's X-Error-Code, e.g. GatedRepo, RepoNotFound, RevisionNotFound, EntryNotFound
	Message string // the Hub's own message
	What    string // what was asked, e.g. "mlx-community/Qwen3-0.6B-4bit at main"
	Token   bool   // whether a token was sent
}

func (e *HubError) Error() string {
	var advice string
	switch {
	case e.Status == http.StatusUnauthorized && !e.Token:
		advice = "the repo is gated or private, or does not exist: set HF_TOKEN to a token that can read it (https://huggingface.co/settings/tokens), and accept the model's terms on its Hub page if it is gated"
	case e.Status == http.StatusUnauthorized:
		advice = "the Hub refused HF_TOKEN, or the repo does not exist: check the name, and that the token is valid and can read it"
	case e.Status == http.StatusForbidden:
		advice = "HF_TOKEN has no access: the repo is gated or private; request access on its Hub page, or use a token with read access"
	case e.Status == http.StatusNotFound && e.Code == "RevisionNotFound":
		advice = "no such revision: check the branch, tag or commit after ':'"
	case e.Status == http.StatusNotFound && e.Code == "EntryNotFound":
		advice = "the file is not in the repo at this revision"
	case e.Status == http.StatusNotFound:
		advice = "no such repo or revision on the Hub: check the name (org/name) and the revision"
	case e.Status == http.StatusTooManyRequests:
		advice = "the Hub is rate limiting; wait and run the pull again (it resumes)"
	default:
		advice = "the Hub failed; run the pull again later (it resumes)"
	}
	msg := ""
	if e.Message != "" {
		msg = " (" + e.Message + ")"
	}
	return fmt.Sprintf("pulling %s: HTTP %d%s: %s", e.What, e.Status, msg, advice)
}

// Is makes errors.Is(err, ErrNotFound) true for 404s.
func (e *HubError) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

func (h *hub) do(req *http.Request) (*http.Response, error) {
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	req.Header.Set("User-Agent", "mlxg")
	return h.client.Do(req)
}

// statusError reads an error answer: the Hub puts its reason in X-Error-Message or a JSON "error".
func (h *hub) statusError(resp *http.Response, what string) *HubError {
	e := &HubError{Status: resp.StatusCode, Code: resp.Header.Get("X-Error-Code"), Message: resp.Header.Get("X-Error-Message"), What: what, Token: h.token != ""}
	if e.Message == "" {
		var body struct {
			Error string `json:"error"`
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if json.Unmarshal(b, &body) == nil {
			e.Message = body.Error
		}
	}
	return e
}

// info resolves a revision to a commit and lists the repo's files with sizes and LFS sha256.
func (h *hub) info(ctx context.Context, repo, rev string) (*repoInfo, error) {
	u := fmt.Sprintf("%s/api/models/%s/revision/%s?blobs=true", h.endpoint, repo, url.PathEscape(rev))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := h.do(req)
	if err != nil {
		return nil, &retryable{err: fmt.Errorf("reaching the Hub at %s: %w (check the network, or HF_ENDPOINT)", h.endpoint, err)}
	}
	defer resp.Body.Close()
	what := repo + " at " + rev
	if resp.StatusCode != http.StatusOK {
		e := h.statusError(resp, what)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return nil, &retryable{err: e}
		}
		return nil, e
	}
	var info repoInfo
	if err := json.NewDecoder(resp.Body).Decode(&info); err != nil {
		return nil, fmt.Errorf("pulling %s: the Hub's answer is not the expected JSON: %w", what, err)
	}
	if !isCommit(info.SHA) {
		return nil, fmt.Errorf("pulling %s: the Hub gave no commit hash for the revision (got %q)", what, info.SHA)
	}
	return &info, nil
}

// retryable marks an error a retry may cure (network cut, 5xx, 429).
type retryable struct {
	err error
	// progressed: the failed attempt got further than the one before (bytes arrived), so the retry count
	// starts again.
	progressed bool
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

func isRetryable(err error) bool {
	var r *retryable
	return errors.As(err, &r)
}

// resolveURL is where a file of a repo at a commit is downloaded from (LFS files redirect to a CDN).
func (h *hub) resolveURL(repo, commit, file string) string {
	parts := strings.Split(file, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return fmt.Sprintf("%s/%s/resolve/%s/%s", h.endpoint, repo, commit, strings.Join(parts, "/"))
}
