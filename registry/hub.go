package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
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

// hub is a small client of the Hub's HTTP API, shared by the downloads of one pull.
type hub struct {
	endpoint string
	token    string
	client   *http.Client
	opts     PullOptions    // with defaults
	emit     func(Progress) // may be nil

	mu       sync.Mutex
	until    time.Time // the Hub rate limited this client: no request before this
	quota    string    // the quota the Hub said was used up, if it named one
	counting bool      // a waiter is counting down in the progress events
}

// newHub makes the client of one pull; opts has its defaults.
func newHub(opts PullOptions, emit func(Progress)) *hub {
	c := *opts.HTTPClient
	c.CheckRedirect = tokenStaysHome(opts.HTTPClient.CheckRedirect)
	return &hub{endpoint: opts.Endpoint, token: opts.Token, client: &c, opts: opts, emit: emit}
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
	// For a 429: how long the Hub asked to wait (its RateLimit or Retry-After header; 0 when it did not
	// say), and the quota it said was used up, e.g. `"api" quota of 500 requests per 5m0s`.
	Wait  time.Duration
	Quota string
	// Host is the host:port that answered when it is not the Hub's: the CDN a download was redirected
	// to, whose refusals are about the signed link it was given, never about the token (not sent there).
	Host string
}

func (e *HubError) Error() string {
	if e.Host != "" {
		return e.cdnError()
	}
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
	case e.Status == http.StatusTooManyRequests && e.Wait > 0:
		used := ""
		if e.Quota != "" {
			used = ", " + e.Quota + " used up"
		}
		advice = fmt.Sprintf("the Hub is rate limiting (it asks to wait %s%s); run the pull again then (it resumes)", e.Wait, used)
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

// cdnError describes an error answer of the host a download was redirected to.
func (e *HubError) cdnError() string {
	var advice string
	switch {
	case e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden || e.Status == http.StatusBadRequest:
		advice = fmt.Sprintf("it refused the download link the Hub signed (HF_TOKEN is not sent there and is not the cause); run the pull again for a fresh link (it resumes); if it keeps failing, check the system clock (the links expire) and that no proxy or firewall blocks or rewrites requests to %s", e.Host)
	case e.Status == http.StatusNotFound:
		advice = "the file is not at the link the Hub gave; run the pull again later (it resumes)"
	case e.Status == http.StatusTooManyRequests:
		advice = "it is rate limiting; wait and run the pull again (it resumes)"
	default:
		advice = "the download server failed; run the pull again later (it resumes)"
	}
	said := e.Code
	if e.Message != "" && said != "" {
		said += ": " + e.Message
	} else if e.Message != "" {
		said = e.Message
	}
	if said != "" {
		said = " (" + said + ")"
	}
	return fmt.Sprintf("pulling %s: %s, where the Hub redirected the download, answered HTTP %d%s: %s", e.What, e.Host, e.Status, said, advice)
}

// Is makes errors.Is(err, ErrNotFound) true for the Hub's 404s (a CDN's 404 is not the model missing).
func (e *HubError) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound && e.Host == ""
}

func (h *hub) do(req *http.Request) (*http.Response, error) {
	if h.token != "" {
		req.Header.Set("Authorization", "Bearer "+h.token)
	}
	req.Header.Set("User-Agent", "mlxg")
	return h.client.Do(req)
}

// statusError reads an error answer: the Hub puts its reason in X-Error-Code and X-Error-Message or a JSON
// "error", a CDN on S3 or CloudFront in an XML <Error> with <Code> and <Message>.
func (h *hub) statusError(resp *http.Response, what string) *HubError {
	e := &HubError{Status: resp.StatusCode, Code: resp.Header.Get("X-Error-Code"), Message: resp.Header.Get("X-Error-Message"), What: what, Token: h.token != ""}
	if resp.Request != nil && resp.Request.URL != nil {
		if home, err := url.Parse(h.endpoint); err == nil && !sameOrigin(resp.Request.URL, home) {
			e.Host = resp.Request.URL.Host
		}
	}
	if resp.StatusCode == http.StatusTooManyRequests {
		e.Wait, e.Quota = rateLimitWait(resp.Header, h.opts.clock.Now())
	}
	if e.Message == "" || e.Code == "" {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var body struct {
			Error string `json:"error"`
		}
		var s3 struct {
			Code    string
			Message string
		}
		if json.Unmarshal(b, &body) == nil && e.Message == "" {
			e.Message = body.Error
		} else if xml.Unmarshal(b, &s3) == nil {
			e.Code = cmp.Or(e.Code, strings.TrimSpace(s3.Code))
			e.Message = cmp.Or(e.Message, strings.TrimSpace(s3.Message))
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

// RateLimitedStatus begins the progress status of a pull waiting out the Hub's rate limit, one event a
// second: "rate limited by the Hub (HTTP 429, "api" quota of 500 requests per 5m0s used up): retrying in 55s".
const RateLimitedStatus = "rate limited by the Hub"

// maxRateLimitWait is the longest wait a 429 is waited out for: the Hub counts requests over 5-minute
// windows, so a longer wait is not one to sit through; the pull fails saying when to come back.
const maxRateLimitWait = 5 * time.Minute

// rateLimitWait reads how long a 429 asks to wait: the Hub's RateLimit header (IETF draft
// ratelimit-headers: `"api";r=0;t=55` is quota "api", 0 requests left, reset in 55 seconds), else
// Retry-After (seconds, or an HTTP date). quota describes the quota used up when the Hub named it (with
// RateLimit-Policy's size and window). wait is 0 when the headers say nothing usable or the time is past.
func rateLimitWait(h http.Header, now time.Time) (wait time.Duration, quota string) {
	reset := -1
	for _, v := range h.Values("RateLimit") {
		for item := range strings.SplitSeq(v, ",") {
			name, params := rateLimitItem(item)
			if params["r"] == "0" {
				if t, err := strconv.Atoi(params["t"]); err == nil && t >= 0 && t > reset && len(name) == 1 {
					reset, quota = t, name[0]
				}
			}
		}
	}
	if reset >= 0 {
		return time.Duration(reset) * time.Second, describeQuota(h, quota)
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, ""
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), ""
	}
	return 0, ""
}

// rateLimitItem splits one item of a RateLimit or RateLimit-Policy header into its quoted names and its
// key=value parameters.
func rateLimitItem(item string) (names []string, params map[string]string) {
	params = map[string]string{}
	for part := range strings.SplitSeq(item, ";") {
		part = strings.TrimSpace(part)
		if len(part) >= 2 && part[0] == '"' && part[len(part)-1] == '"' {
			names = append(names, part[1:len(part)-1])
		} else if k, v, ok := strings.Cut(part, "="); ok {
			params[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return names, params
}

// describeQuota names a quota, with its size and window from RateLimit-Policy when that lists it
// (the Hub sends `"fixed window";"api";q=500;w=300`).
func describeQuota(h http.Header, name string) string {
	if name == "" {
		return ""
	}
	for _, v := range h.Values("RateLimit-Policy") {
		for item := range strings.SplitSeq(v, ",") {
			names, params := rateLimitItem(item)
			q, qerr := strconv.Atoi(params["q"])
			w, werr := strconv.Atoi(params["w"])
			if slices.Contains(names, name) && qerr == nil && werr == nil {
				return fmt.Sprintf("%q quota of %d requests per %s", name, q, time.Duration(w)*time.Second)
			}
		}
	}
	return fmt.Sprintf("%q quota", name)
}

// holdOff stops this pull's requests for wait, for the quota named.
func (h *hub) holdOff(wait time.Duration, quota string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if until := h.opts.clock.Now().Add(wait); until.After(h.until) {
		h.until, h.quota = until, quota
	}
}

// pause returns once no rate limit holds. One waiter at a time counts down in the progress events,
// one event a second; the others wait quietly.
func (h *hub) pause(ctx context.Context) error {
	lead := false
	defer func() {
		if lead {
			h.mu.Lock()
			h.counting = false
			h.mu.Unlock()
		}
	}()
	for {
		h.mu.Lock()
		left := h.until.Sub(h.opts.clock.Now())
		if left > 0 && !h.counting {
			h.counting, lead = true, true
		}
		quota := h.quota
		h.mu.Unlock()
		if left <= 0 {
			return nil
		}
		step := min(left, time.Second)
		if lead {
			// Ticks fall on whole seconds of the wait, so the count goes 55s, 54s, ... 1s.
			if step = left % time.Second; step == 0 {
				step = time.Second
			}
			if quota != "" {
				quota = ", " + quota + " used up"
			}
			if h.emit != nil {
				h.emit(Progress{Status: fmt.Sprintf("%s (HTTP 429%s): retrying in %s", RateLimitedStatus, quota, (left + time.Second - 1).Truncate(time.Second))})
			}
		}
		if err := h.opts.clock.Sleep(ctx, step); err != nil {
			return err
		}
	}
}
