package registry

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mlxg/mlxg/registry/hubtest"
)

// fakeRepo writes a small MLX-style repo under root/org/name and returns its files' contents.
func fakeRepo(t *testing.T, root, repo string, weights int) map[string][]byte {
	t.Helper()
	r := rand.New(rand.NewPCG(1, uint64(weights)))
	w := make([]byte, weights)
	for i := range w {
		w[i] = byte(r.Uint32())
	}
	files := map[string][]byte{
		"config.json":              []byte(`{"model_type":"qwen3","quantization":{"group_size":64,"bits":4}}`),
		"model.safetensors":        w,
		"tokenizer.json":           []byte(`{"model":{}}`),
		"tokenizer_config.json":    []byte(`{"chat_template":"{{ messages }}"}`),
		"README.md":                []byte("---\nlicense: apache-2.0\n---\n# tiny\n"),
		"model.gguf":               []byte("not wanted"),
		"consolidated.safetensors": []byte("Mistral's own layout: not wanted"),
		"extra/notes.txt":          []byte("not wanted either"),
	}
	for name, b := range files {
		p := filepath.Join(root, repo, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return files
}

type pullEnv struct {
	root  string // the fake hub's folder
	store *Store
	hub   *hubtest.Server
	srv   *httptest.Server // serving hub
	opts  PullOptions
	files map[string][]byte
}

func newPullEnv(t *testing.T) *pullEnv {
	t.Helper()
	root := t.TempDir()
	files := fakeRepo(t, root, "org/tiny", 700_000)
	h := hubtest.New(root)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Setenv("HF_TOKEN", "")
	t.Setenv("HUGGING_FACE_HUB_TOKEN", "")
	t.Setenv("HF_TOKEN_PATH", filepath.Join(root, "no-token"))
	return &pullEnv{root: root, store: testStore(t), hub: h, srv: srv, files: files,
		opts: PullOptions{Endpoint: srv.URL, Retries: -1, Backoff: time.Millisecond}}
}

func (e *pullEnv) pull(t *testing.T, name string) (*LocalModel, []Progress, error) {
	t.Helper()
	var events []Progress
	m, err := e.store.Pull(context.Background(), mustParse(t, name), e.opts, func(p Progress) { events = append(events, p) })
	return m, events, err
}

func gitBlobID(b []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(b))
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

func TestPullLayout(t *testing.T) {
	e := newPullEnv(t)
	m, events, err := e.pull(t, "org/tiny")
	if err != nil {
		t.Fatal(err)
	}
	repoDir := filepath.Join(e.store.HubCache, "models--org--tiny")
	ref, err := os.ReadFile(filepath.Join(repoDir, "refs", "main"))
	if err != nil || string(ref) != m.Commit || !isCommit(m.Commit) {
		t.Fatalf("refs/main = %q (%v), model commit %q", ref, err, m.Commit)
	}
	if m.Dir != filepath.Join(repoDir, "snapshots", m.Commit) {
		t.Errorf("dir = %s", m.Dir)
	}
	got, _ := snapshotFiles(m.Dir)
	want := []string{"README.md", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}
	if !slices.Equal(got, want) {
		t.Fatalf("snapshot files = %v, want %v", got, want)
	}
	var size int64
	for _, name := range want {
		body := e.files[name]
		size += int64(len(body))
		blob := gitBlobID(body)
		if strings.HasSuffix(name, ".safetensors") {
			s := sha256.Sum256(body)
			blob = hex.EncodeToString(s[:])
		}
		link, err := os.Readlink(filepath.Join(m.Dir, name))
		if err != nil || link != "../../blobs/"+blob {
			t.Errorf("%s -> %q (%v), want ../../blobs/%s", name, link, err, blob)
		}
		b, err := os.ReadFile(filepath.Join(m.Dir, name))
		if err != nil || string(b) != string(body) {
			t.Errorf("%s content differs (%v)", name, err)
		}
	}
	if m.Size != size {
		t.Errorf("size = %d, want %d", m.Size, size)
	}
	blobs, _ := os.ReadDir(filepath.Join(repoDir, "blobs"))
	if len(blobs) != len(want) {
		t.Errorf("%d blobs, want %d (no .incomplete left)", len(blobs), len(want))
	}
	if events[0].Status != "pulling manifest" || events[len(events)-1].Status != "success" {
		t.Errorf("events from %q to %q", events[0].Status, events[len(events)-1].Status)
	}
	done := map[string]bool{}
	for _, p := range events {
		if p.Digest != "" && p.Completed == p.Total {
			done[p.Status] = true
		}
	}
	if len(done) != len(want) {
		t.Errorf("completed files in progress events: %v", done)
	}
	// A second pull downloads nothing.
	before := e.hub.Served("model.safetensors")
	if _, _, err := e.pull(t, "hf.co/org/tiny"); err != nil {
		t.Fatal(err)
	}
	if e.hub.Served("model.safetensors") != before {
		t.Error("a second pull downloaded the weights again")
	}
	list, err := e.store.List()
	if err != nil || len(list) != 1 || list[0].Name != "org/tiny" || list[0].Commit != m.Commit {
		t.Fatalf("list = %+v, %v", list, err)
	}
}

func TestPullResumesAfterCut(t *testing.T) {
	e := newPullEnv(t)
	const cut = 300_000
	e.hub.SetFaults(hubtest.Faults{CutFile: "model.safetensors", CutAfter: cut, CutTimes: 1})
	_, _, err := e.pull(t, "org/tiny")
	if err == nil || !strings.Contains(err.Error(), "cut at byte") {
		t.Fatalf("pull through a cut, no retries: %v", err)
	}
	s := sha256.Sum256(e.files["model.safetensors"])
	inc := filepath.Join(e.store.HubCache, "models--org--tiny", "blobs", hex.EncodeToString(s[:])+".incomplete")
	fi, err := os.Stat(inc)
	if err != nil || fi.Size() != cut {
		t.Fatalf(".incomplete: %v, %v; want %d bytes kept", fi, err, cut)
	}
	if _, err := os.Stat(filepath.Join(e.store.HubCache, "models--org--tiny", "refs", "main")); err == nil {
		t.Error("refs/main written by a failed pull")
	}
	// The command runs again: it resumes where the cut left it.
	if _, _, err := e.pull(t, "org/tiny"); err != nil {
		t.Fatal(err)
	}
	if got := e.hub.Served("model.safetensors"); got != int64(len(e.files["model.safetensors"])) {
		t.Errorf("served %d bytes of the weights in all, want %d (nothing fetched twice)", got, len(e.files["model.safetensors"]))
	}
	if r := e.hub.Ranges(); !slices.Contains(r, fmt.Sprintf("bytes=%d-", cut)) {
		t.Errorf("ranges asked: %q", r)
	}
}

func TestPullRetriesACut(t *testing.T) {
	e := newPullEnv(t)
	e.opts.Retries = 3
	e.hub.SetFaults(hubtest.Faults{CutFile: "model.safetensors", CutAfter: 100_000, CutTimes: 2})
	m, _, err := e.pull(t, "org/tiny")
	if err != nil {
		t.Fatal(err)
	}
	if got := e.hub.Served("model.safetensors"); got != int64(len(e.files["model.safetensors"])) {
		t.Errorf("served %d bytes, want %d", got, len(e.files["model.safetensors"]))
	}
	b, _ := os.ReadFile(filepath.Join(m.Dir, "model.safetensors"))
	if string(b) != string(e.files["model.safetensors"]) {
		t.Error("weights differ after two resumed cuts")
	}
}

// Cuts that each come after some progress do not use up the retries: a long download on a flaky link
// finishes however many times it is cut, as long as every attempt advances.
func TestPullRetriesResetOnProgress(t *testing.T) {
	e := newPullEnv(t)
	e.opts.Retries = 2
	const cuts = 6 // more than Retries
	e.hub.SetFaults(hubtest.Faults{CutFile: "model.safetensors", CutAfter: 60_000, CutTimes: cuts})
	m, _, err := e.pull(t, "org/tiny")
	if err != nil {
		t.Fatalf("%d cuts, each after progress, %d retries: %v", cuts, e.opts.Retries, err)
	}
	b, err := os.ReadFile(filepath.Join(m.Dir, "model.safetensors"))
	if err != nil || sha256.Sum256(b) != sha256.Sum256(e.files["model.safetensors"]) {
		t.Fatalf("weights differ from the source (%v)", err)
	}
	if got := e.hub.Served("model.safetensors"); got != int64(len(e.files["model.safetensors"])) {
		t.Errorf("served %d bytes, want %d (every retry resumed)", got, len(e.files["model.safetensors"]))
	}
	var want, got []string
	for i := 1; i <= cuts; i++ {
		want = append(want, fmt.Sprintf("bytes=%d-", i*60_000))
	}
	for _, r := range e.hub.Ranges() {
		if r != "" {
			got = append(got, r)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("ranges asked: %q, want %q", got, want)
	}
}

func TestRetryCountsOnlyFailuresWithoutProgress(t *testing.T) {
	opts := PullOptions{Retries: 2, Backoff: time.Microsecond}
	calls := 0
	cut := errors.New("cut")
	// Ten cuts after progress, then success: the retry limit is never reached.
	h := newHub(opts.withDefaults(), nil)
	err := h.retry(context.Background(), func() error {
		if calls++; calls <= 10 {
			return &retryable{err: cut, progressed: true}
		}
		return nil
	})
	if err != nil || calls != 11 {
		t.Errorf("after 10 cuts with progress: %v, %d calls", err, calls)
	}
	// Then failures without progress: Retries more attempts after the last one with progress.
	calls = 0
	err = h.retry(context.Background(), func() error {
		calls++
		return &retryable{err: cut, progressed: calls <= 10}
	})
	if !errors.Is(err, cut) || calls != 12 {
		t.Errorf("failures without progress: %v after %d calls, want 12", err, calls)
	}
}

// fakeClock is a clock whose sleeps return at once, moving it on.
type fakeClock struct {
	mu    sync.Mutex
	t     time.Time
	slept time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t, c.slept = c.t.Add(d), c.slept+d
	return ctx.Err()
}

// A 429 waits as long as the Hub says, by its RateLimit header (the Hub's) or Retry-After (seconds or a
// date), counting down in the progress events, then carries on; a wait past the Hub's 5-minute window
// fails at once, saying when to come back.
func TestPullRateLimited(t *testing.T) {
	start := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		faults hubtest.Faults
		wait   time.Duration // each 429's wait, with the 1 s margin
	}{
		{"RateLimit", hubtest.Faults{RateLimited: 2, RateLimit: `"api";r=0;t=55`, RetryAfter: "1"}, 56 * time.Second},
		{"Retry-After seconds", hubtest.Faults{RateLimited: 2, RetryAfter: "7"}, 8 * time.Second},
		{"Retry-After date", hubtest.Faults{RateLimited: 1, RetryAfter: start.Add(30 * time.Second).Format(http.TimeFormat)}, 31 * time.Second},
		{"RateLimit with requests left", hubtest.Faults{RateLimited: 1, RateLimit: `"resolvers";r=10;t=200`, RetryAfter: "3"}, 4 * time.Second},
		{"a download", hubtest.Faults{RateLimited: 1, RateLimitOn: "/resolve/", RateLimit: `"resolvers";r=0;t=20`}, 21 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newPullEnv(t)
			e.opts.Retries = 3
			clock := &fakeClock{t: start}
			e.opts.clock = clock
			e.hub.SetFaults(c.faults)
			m, events, err := e.pull(t, "org/tiny")
			if err != nil {
				t.Fatal(err)
			}
			want := time.Duration(c.faults.RateLimited) * c.wait
			if clock.slept < want || clock.slept > want+time.Second {
				t.Errorf("slept %s, want %s", clock.slept, want)
			}
			var countdown []string
			for _, p := range events {
				if strings.HasPrefix(p.Status, RateLimitedStatus) {
					countdown = append(countdown, p.Status)
				}
			}
			secs := int(c.wait / time.Second)
			if len(countdown) != c.faults.RateLimited*secs || !strings.HasSuffix(countdown[0], fmt.Sprintf("retrying in %ds", secs)) ||
				!strings.HasSuffix(countdown[len(countdown)-1], "retrying in 1s") {
				t.Errorf("%d countdown events (want %d): first %q, last %q", len(countdown), c.faults.RateLimited*secs, countdown[0], countdown[len(countdown)-1])
			}
			if strings.Contains(c.faults.RateLimit, "r=0") && !strings.Contains(countdown[0], " quota of ") {
				t.Errorf("countdown does not name the quota: %q", countdown[0])
			}
			b, _ := os.ReadFile(filepath.Join(m.Dir, "model.safetensors"))
			if string(b) != string(e.files["model.safetensors"]) {
				t.Error("weights differ")
			}
		})
	}
	t.Run("parallel downloads", func(t *testing.T) {
		// Two downloads at once are limited: both wait, one counts down.
		e := newPullEnv(t)
		e.opts.Retries = 3
		clock := &fakeClock{t: start}
		e.opts.clock = clock
		e.hub.SetFaults(hubtest.Faults{RateLimited: 2, RateLimitOn: "tokenizer", RateLimit: `"resolvers";r=0;t=20`})
		m, events, err := e.pull(t, "org/tiny")
		if err != nil {
			t.Fatal(err)
		}
		last := 0
		for _, p := range events {
			var secs int
			if _, err := fmt.Sscanf(p.Status[strings.LastIndex(p.Status, " ")+1:], "%ds", &secs); err != nil || !strings.HasPrefix(p.Status, RateLimitedStatus) {
				continue
			}
			if last != 0 && secs >= last && secs != 21 {
				t.Errorf("countdown went from %ds to %ds", last, secs)
			}
			last = secs
		}
		// The waiters may wake before the countdown posts its last second (the fake clock
		// jumps), so only a countdown seen and going down is required, not its final tick.
		if last == 0 {
			t.Error("no countdown was posted")
		}
		for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
			if b, _ := os.ReadFile(filepath.Join(m.Dir, name)); string(b) != string(e.files[name]) {
				t.Errorf("%s differs", name)
			}
		}
	})
	t.Run("past the window", func(t *testing.T) {
		e := newPullEnv(t)
		e.opts.Retries = 3
		clock := &fakeClock{t: start}
		e.opts.clock = clock
		e.hub.SetFaults(hubtest.Faults{RateLimited: 1, RetryAfter: "3600"})
		_, _, err := e.pull(t, "org/tiny")
		var he *HubError
		if !errors.As(err, &he) || he.Status != http.StatusTooManyRequests || !strings.Contains(err.Error(), "wait 1h0m0s") {
			t.Errorf("an hour's wait: %v", err)
		}
		if clock.slept != 0 {
			t.Errorf("slept %s before failing", clock.slept)
		}
	})
	t.Run("no retries", func(t *testing.T) {
		e := newPullEnv(t) // Retries: -1
		e.hub.SetFaults(hubtest.Faults{RateLimited: 1, RateLimit: `"api";r=0;t=55`})
		if _, _, err := e.pull(t, "org/tiny"); err == nil || !strings.Contains(err.Error(), "wait 55s") || !strings.Contains(err.Error(), `"api"`) {
			t.Errorf("429 without retries: %v", err)
		}
	})
}

func TestParseRateLimit(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		rateLimit, policy, retryAfter string
		wait                          time.Duration
		quota                         string
	}{
		{`"api";r=0;t=55`, `"fixed window";"api";q=500;w=300`, "", 55 * time.Second, `"api" quota of 500 requests per 5m0s`},
		{`"api";r=3;t=55`, "", "", 0, ""},
		{`"api";r=3;t=55, "resolvers";r=0;t=12`, "", "", 12 * time.Second, `"resolvers" quota`},
		{`"api" ; r = 0 ; t = 9`, "", "100", 9 * time.Second, `"api" quota`},
		{"", "", "20", 20 * time.Second, ""},
		{"", "", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, ""},
		{"", "", now.Add(-90 * time.Second).Format(http.TimeFormat), 0, ""},
		{"", "", "soon", 0, ""},
		{"garbage", "", "", 0, ""},
	} {
		h := http.Header{}
		for k, v := range map[string]string{"RateLimit": c.rateLimit, "RateLimit-Policy": c.policy, "Retry-After": c.retryAfter} {
			if v != "" {
				h.Set(k, v)
			}
		}
		wait, quota := rateLimitWait(h, now)
		if wait != c.wait || quota != c.quota {
			t.Errorf("%v: wait %s, quota %q; want %s, %q", h, wait, quota, c.wait, c.quota)
		}
	}
}

// A sharded checkpoint whose index names a shard the repo lacks fails, naming the shard, before the
// weights are downloaded and without a snapshot; a complete one pulls.
func TestPullChecksIndexShards(t *testing.T) {
	e := newPullEnv(t)
	dir := filepath.Join(e.root, "org", "tiny")
	if err := os.Rename(filepath.Join(dir, "model.safetensors"), filepath.Join(dir, "model-00001-of-00002.safetensors")); err != nil {
		t.Fatal(err)
	}
	index := `{"metadata":{"total_size":700000},"weight_map":{"a.weight":"model-00001-of-00002.safetensors","b.weight":"model-00002-of-00002.safetensors"}}`
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(index), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.pull(t, "org/tiny")
	if err == nil || !strings.Contains(err.Error(), "model-00002-of-00002.safetensors") || !strings.Contains(err.Error(), "model.safetensors.index.json") {
		t.Fatalf("a shard missing upstream: %v", err)
	}
	if got := e.hub.Served("model-00001-of-00002.safetensors"); got != 0 {
		t.Errorf("%d bytes of the weights downloaded before the index was checked", got)
	}
	repoDir := filepath.Join(e.store.HubCache, "models--org--tiny")
	if snaps, _ := os.ReadDir(filepath.Join(repoDir, "snapshots")); len(snaps) != 0 {
		t.Errorf("snapshots written: %v", snaps)
	}
	// A shard in a subfolder is not beside the index: refused too.
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map":{"a.weight":"../x/model-00001-of-00002.safetensors"}}`), 0o644)
	if _, _, err := e.pull(t, "org/tiny"); err == nil || !strings.Contains(err.Error(), "../x/model-00001-of-00002.safetensors") {
		t.Errorf("a shard outside: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(`{"weight_map":`), 0o644)
	if _, _, err := e.pull(t, "org/tiny"); err == nil || !strings.Contains(err.Error(), "model.safetensors.index.json") {
		t.Errorf("a broken index: %v", err)
	}
	// The second shard arrives upstream: the pull completes.
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(index), 0o644)
	if err := os.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), []byte("second shard"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, _, err := e.pull(t, "org/tiny")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "model.safetensors.index.json"} {
		if _, err := os.Stat(filepath.Join(m.Dir, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// An error from the CDN a download was redirected to says which host answered and what it said; it is
// not reported as the Hub refusing the token or failing.
func TestPullCDNErrors(t *testing.T) {
	e := newPullEnv(t)
	cdn := httptest.NewServer(e.hub)
	defer cdn.Close()
	e.hub.SetCDN(cdn.URL)
	e.opts.Token = "secret"
	host := strings.TrimPrefix(cdn.URL, "http://")
	for status, want := range map[int]string{
		403: "AccessDenied: Request has expired",
		400: "InvalidArgument: Invalid argument",
		404: "NoSuchKey",
		502: "InternalError",
	} {
		e.hub.SetFaults(hubtest.Faults{CDNStatus: status})
		_, _, err := e.pull(t, "org/tiny")
		if err == nil {
			t.Fatalf("CDN %d: no error", status)
		}
		msg := err.Error()
		if !strings.Contains(msg, host) || !strings.Contains(msg, fmt.Sprintf("HTTP %d", status)) || !strings.Contains(msg, want) ||
			!strings.Contains(msg, "model.safetensors") {
			t.Errorf("CDN %d: %v", status, err)
		}
		if strings.Contains(msg, "HF_TOKEN has no access") || strings.Contains(msg, "the Hub failed") || strings.Contains(msg, "no such repo") {
			t.Errorf("CDN %d reported as the Hub's: %v", status, err)
		}
		var he *HubError
		if !errors.As(err, &he) || he.Host != host || errors.Is(err, ErrNotFound) {
			t.Errorf("CDN %d: HubError %+v, not found %v", status, he, errors.Is(err, ErrNotFound))
		}
	}
	// The same answers from the Hub itself still read as the Hub's.
	e.hub.SetFaults(hubtest.Faults{Status: 403})
	if _, _, err := e.pull(t, "org/tiny"); err == nil || !strings.Contains(err.Error(), "HF_TOKEN has no access") {
		t.Errorf("Hub 403: %v", err)
	}
}

func TestPullRejectsCorruptFile(t *testing.T) {
	e := newPullEnv(t)
	e.hub.SetFaults(hubtest.Faults{Corrupt: "model.safetensors"})
	_, _, err := e.pull(t, "org/tiny")
	if err == nil || !strings.Contains(err.Error(), "failed verification") || !strings.Contains(err.Error(), "model.safetensors") {
		t.Fatalf("corrupt download: %v", err)
	}
	repoDir := filepath.Join(e.store.HubCache, "models--org--tiny")
	sum := sha256.Sum256(e.files["model.safetensors"])
	if _, err := os.Stat(filepath.Join(repoDir, "blobs", hex.EncodeToString(sum[:])+".incomplete")); !os.IsNotExist(err) {
		t.Errorf("the corrupt partial file is still there (%v)", err)
	}
	if _, err := os.Stat(filepath.Join(repoDir, "blobs", hex.EncodeToString(sum[:]))); !os.IsNotExist(err) {
		t.Errorf("the corrupt file went into blobs/ (%v)", err)
	}
	if snaps, _ := os.ReadDir(filepath.Join(repoDir, "snapshots")); len(snaps) != 0 {
		t.Errorf("snapshots written: %v", snaps)
	}
	e.hub.SetFaults(hubtest.Faults{})
	if _, _, err := e.pull(t, "org/tiny"); err != nil {
		t.Fatalf("pull after the corruption went: %v", err)
	}
}

func TestPullHubErrors(t *testing.T) {
	e := newPullEnv(t)
	e.hub.SetFaults(hubtest.Faults{Status: 401})
	_, _, err := e.pull(t, "org/tiny")
	var he *HubError
	if !errors.As(err, &he) || he.Status != 401 || !strings.Contains(err.Error(), "set HF_TOKEN") {
		t.Errorf("401: %v", err)
	}
	e.hub.SetFaults(hubtest.Faults{Status: 403})
	if _, _, err := e.pull(t, "org/tiny"); err == nil || !strings.Contains(err.Error(), "gated or private") {
		t.Errorf("403: %v", err)
	}
	e.hub.SetFaults(hubtest.Faults{})
	if _, _, err := e.pull(t, "org/nosuch"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no such repo") {
		t.Errorf("404 repo: %v", err)
	}
	if _, _, err := e.pull(t, "org/tiny:nosuchbranch"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "no such revision") {
		t.Errorf("404 revision: %v", err)
	}
	// A gated repo with the right token pulls.
	e.hub.SetFaults(hubtest.Faults{Token: "secret"})
	if _, _, err := e.pull(t, "org/tiny"); err == nil || !strings.Contains(err.Error(), "HF_TOKEN") {
		t.Errorf("gated without token: %v", err)
	}
	e.opts.Token = "secret"
	if _, _, err := e.pull(t, "org/tiny"); err != nil {
		t.Errorf("gated with token: %v", err)
	}
}

// The token goes to the Hub only: a redirect to another scheme, host or port (the CDN of LFS files) drops
// it, as huggingface_hub does, where Go's client would keep it for the same host at another port and for
// subdomains.
func TestPullTokenStaysWithTheHub(t *testing.T) {
	check := func(t *testing.T, e *pullEnv, cdnHost string) {
		t.Helper()
		e.opts.Token = "secret"
		e.hub.SetFaults(hubtest.Faults{Token: "secret"})
		m, _, err := e.pull(t, "org/tiny")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(m.Dir, "model.safetensors"))
		if string(b) != string(e.files["model.safetensors"]) {
			t.Error("weights differ")
		}
		var cdn, hub int
		for _, r := range e.hub.Requests() {
			switch {
			case strings.HasPrefix(r.Path, "/lfs/"):
				cdn++
				if r.Host != cdnHost || r.Auth != "" {
					t.Errorf("CDN request %s to %s with Authorization %q", r.Path, r.Host, r.Auth)
				}
			case r.Auth != "Bearer secret":
				t.Errorf("Hub request %s to %s with Authorization %q", r.Path, r.Host, r.Auth)
			default:
				hub++
			}
		}
		if cdn == 0 || hub == 0 {
			t.Errorf("%d CDN and %d Hub requests", cdn, hub)
		}
	}
	t.Run("other port", func(t *testing.T) {
		e := newPullEnv(t)
		cdn := httptest.NewServer(e.hub)
		defer cdn.Close()
		e.hub.SetCDN(cdn.URL)
		check(t, e, strings.TrimPrefix(cdn.URL, "http://"))
	})
	t.Run("subdomain", func(t *testing.T) {
		e := newPullEnv(t)
		_, port, _ := net.SplitHostPort(e.srv.Listener.Addr().String())
		// Both names reach the one fake server.
		e.opts.HTTPClient = &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, e.srv.Listener.Addr().String())
			},
		}}
		e.opts.Endpoint = "http://hf.test:" + port
		e.hub.SetCDN("http://cdn.hf.test:" + port)
		check(t, e, "cdn.hf.test:"+port)
	})
	t.Run("relative redirect keeps it", func(t *testing.T) {
		// A folder in another spelling than the Hub's: downloads ask for that spelling and the Hub
		// redirects, relatively, to its own; same origin, so the token goes along.
		e := newPullEnv(t)
		if err := os.MkdirAll(filepath.Join(e.store.HubCache, "models--ORG--Tiny"), 0o755); err != nil {
			t.Fatal(err)
		}
		e.opts.Token = "secret"
		e.hub.SetFaults(hubtest.Faults{Token: "secret"})
		if _, _, err := e.pull(t, "org/tiny"); err != nil {
			t.Fatal(err)
		}
		redirected := false
		for _, r := range e.hub.Requests() {
			redirected = redirected || strings.HasPrefix(r.Path, "/ORG/Tiny/resolve/")
		}
		if !redirected {
			t.Error("no download asked for the folder's spelling")
		}
	})
}

func TestPullConcurrentSameRepo(t *testing.T) {
	e := newPullEnv(t)
	e.hub.SetFaults(hubtest.Faults{ChunkDelay: 10 * time.Millisecond})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	waited := make([]bool, 2)
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each Pull opens its own lock file descriptor, as two processes would.
			_, errs[i] = e.store.Pull(context.Background(), mustParse(t, "org/tiny"), e.opts, func(p Progress) {
				waited[i] = waited[i] || strings.HasPrefix(p.Status, "waiting for another pull")
			})
		}()
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("concurrent pulls: %v, %v", errs[0], errs[1])
	}
	if waited[0] == waited[1] {
		t.Errorf("waited: %v; want exactly one pull to wait for the other", waited)
	}
	if got := e.hub.Served("model.safetensors"); got != int64(len(e.files["model.safetensors"])) {
		t.Errorf("weights served %d bytes in all, want %d", got, len(e.files["model.safetensors"]))
	}
}

func TestPullDiskFull(t *testing.T) {
	e := newPullEnv(t)
	const room = 200_000
	s := sha256.Sum256(e.files["model.safetensors"])
	weights := hex.EncodeToString(s[:])
	var mu sync.Mutex
	written := int64(0)
	orig := diskWrite
	diskWrite = func(f *os.File, p []byte) (int, error) {
		if strings.Contains(f.Name(), weights) { // only the weights fill the disk
			mu.Lock()
			defer mu.Unlock()
			if written+int64(len(p)) > room {
				return 0, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
			}
			written += int64(len(p))
		}
		return orig(f, p)
	}
	_, _, err := e.pull(t, "org/tiny")
	diskWrite = orig
	if err == nil || !strings.Contains(err.Error(), "disk is full") || !strings.Contains(err.Error(), "resumes") {
		t.Fatalf("disk full: %v", err)
	}
	fi, err := os.Stat(filepath.Join(e.store.HubCache, "models--org--tiny", "blobs", weights+".incomplete"))
	if err != nil || fi.Size() == 0 {
		t.Fatalf("partial file not kept: %v", err)
	}
	kept := fi.Size()
	if _, _, err := e.pull(t, "org/tiny"); err != nil {
		t.Fatal(err)
	}
	if r := e.hub.Ranges(); !slices.Contains(r, fmt.Sprintf("bytes=%d-", kept)) {
		t.Errorf("after keeping %d bytes, ranges asked: %q", kept, r)
	}
}

func TestPullNotMLX(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{
		"org/gguf/config.json":         "{}",
		"org/gguf/model-q4.gguf":       "gguf",
		"org/gptq/config.json":         `{"quantization_config":{"quant_method":"gptq"}}`,
		"org/gptq/model.safetensors":   "weights",
		"org/tekken/config.json":       `{"model_type":"mistral"}`,
		"org/tekken/model.safetensors": "weights",
		"org/tekken/tekken.json":       "{}",
	} {
		p := filepath.Join(root, filepath.FromSlash(name))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
	}
	srv := httptest.NewServer(hubtest.New(root))
	defer srv.Close()
	s := testStore(t)
	opts := PullOptions{Endpoint: srv.URL, Token: "test", Retries: -1}
	_, err := s.Pull(context.Background(), mustParse(t, "org/gguf"), opts, nil)
	if err == nil || !strings.Contains(err.Error(), "not an MLX checkpoint") || !strings.Contains(err.Error(), ".gguf") {
		t.Errorf("gguf repo: %v", err)
	}
	_, err = s.Pull(context.Background(), mustParse(t, "org/tekken"), opts, nil)
	if err == nil || !strings.Contains(err.Error(), "tekken.json but no tokenizer.json") {
		t.Errorf("a repo with tekken.json alone: %v", err)
	}
	var warned string
	_, err = s.Pull(context.Background(), mustParse(t, "org/gptq"), opts, func(p Progress) {
		if strings.HasPrefix(p.Status, "warning:") {
			warned = p.Status
		}
	})
	if err != nil || !strings.Contains(warned, "gptq") {
		t.Errorf("gptq repo: %v, warning %q", err, warned)
	}
}

// A new commit upstream: the ref moves, unchanged blobs are reused, the old snapshot stays listed by commit.
func TestPullNewCommit(t *testing.T) {
	e := newPullEnv(t)
	old, _, err := e.pull(t, "org/tiny")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.root, "org", "tiny", "tokenizer.json"), []byte(`{"model":{"v":2}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	served := e.hub.Served("model.safetensors")
	m, _, err := e.pull(t, "org/tiny")
	if err != nil {
		t.Fatal(err)
	}
	if m.Commit == old.Commit || e.hub.Served("model.safetensors") != served {
		t.Errorf("commit %s (was %s); weights served again: %v", m.Commit, old.Commit, e.hub.Served("model.safetensors") != served)
	}
	b, _ := os.ReadFile(filepath.Join(m.Dir, "tokenizer.json"))
	if string(b) != `{"model":{"v":2}}` {
		t.Errorf("new snapshot's tokenizer.json = %s", b)
	}
	list, _ := e.store.List()
	names := []string{}
	for _, l := range list {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"org/tiny", "org/tiny:" + old.Commit}) {
		t.Errorf("list = %v", names)
	}
	r, err := e.store.Remove(context.Background(), mustParse(t, "org/tiny:"+old.Commit))
	if err != nil || r.Blobs != 1 {
		t.Errorf("rm of the old snapshot: %+v, %v (want only the old tokenizer.json blob gone)", r, err)
	}
}

// A connection that goes silent is cut by the stall watchdog, and the next attempt resumes.
func TestPullStall(t *testing.T) {
	e := newPullEnv(t)
	e.opts.StallTimeout = 100 * time.Millisecond
	e.hub.SetFaults(hubtest.Faults{ChunkDelay: 600 * time.Millisecond})
	start := time.Now()
	_, _, err := e.pull(t, "org/tiny")
	if err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("silent hub: %v", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("the stall took %s to notice", took)
	}
	e.hub.SetFaults(hubtest.Faults{})
	if _, _, err := e.pull(t, "org/tiny"); err != nil {
		t.Fatalf("pull after the stall: %v", err)
	}
}

// Hub names are case-insensitive: a pull takes the Hub's spelling, and any spelling finds the model.
func TestPullCaseInsensitiveName(t *testing.T) {
	e := newPullEnv(t)
	m, _, err := e.pull(t, "ORG/Tiny")
	if err != nil {
		t.Fatal(err)
	}
	if m.Repo != "org/tiny" || !strings.Contains(m.Dir, "models--org--tiny") {
		t.Errorf("pulled into %s as %s", m.Dir, m.Repo)
	}
	got, err := e.store.Resolve(mustParse(t, "Org/TINY"))
	if err != nil || got.Dir != m.Dir {
		t.Fatalf("resolve in another spelling: %+v, %v", got, err)
	}
	if _, _, err := e.pull(t, "org/TINY"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(e.store.HubCache); len(ents) != 2 { // models--org--tiny and .locks
		t.Errorf("cache holds %d entries, want the one repo folder and .locks", len(ents))
	}
}

// snapshotFiles lists a snapshot's files, relative, with '/' separators.
func snapshotFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(out)
	return out, err
}

func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"https://huggingface.co/a", "https://huggingface.co:443/b?x=1", true},
		{"http://HF.test/a", "http://hf.test:80/b", true},
		{"https://huggingface.co/a", "http://huggingface.co/a", false},
		{"https://huggingface.co/a", "https://huggingface.co:8443/a", false},
		{"https://huggingface.co/a", "https://cdn-lfs.huggingface.co/a", false},
		{"https://huggingface.co/a", "https://cas-bridge.xethub.hf.co/a", false},
	} {
		a, _ := url.Parse(c.a)
		b, _ := url.Parse(c.b)
		if got := sameOrigin(a, b); got != c.same {
			t.Errorf("sameOrigin(%s, %s) = %v", c.a, c.b, got)
		}
	}
}

func TestStatusErrorHost(t *testing.T) {
	h := newHub(PullOptions{Endpoint: "https://huggingface.co", Token: "t"}.withDefaults(), nil)
	answer := func(u, body string, hdr http.Header) *HubError {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		resp := &http.Response{StatusCode: 403, Header: hdr, Request: req, Body: io.NopCloser(strings.NewReader(body))}
		return h.statusError(resp, "org/m file model.safetensors")
	}
	e := answer("https://cas-bridge.xethub.hf.co/xet-bridge-us/abc?X-Amz-Signature=x", "denied",
		http.Header{"X-Error-Code": {"SignatureExpired"}, "X-Error-Message": {"link expired"}})
	if e.Host != "cas-bridge.xethub.hf.co" || !strings.Contains(e.Error(), "cas-bridge.xethub.hf.co") ||
		!strings.Contains(e.Error(), "(SignatureExpired: link expired)") || strings.Contains(e.Error(), "HF_TOKEN has no access") {
		t.Errorf("CDN 403: %+v: %v", e, e)
	}
	e = answer("https://huggingface.co/org/m/resolve/abc/model.safetensors", `{"error":"Access to model org/m is restricted"}`,
		http.Header{"X-Error-Code": {"GatedRepo"}})
	if e.Host != "" || !strings.Contains(e.Error(), "HF_TOKEN has no access") || e.Message != "Access to model org/m is restricted" {
		t.Errorf("Hub 403: %+v: %v", e, e)
	}
}
