package registry

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gofrs/flock"

	"github.com/mlxg/mlxg/registry/safetensors"
)

// Progress is one event of a pull. The CLI draws bars from it and /api/pull streams it as NDJSON
// (the fields and JSON names of Ollama's api.ProgressResponse). Statuses, in order: "pulling manifest",
// "waiting for another pull of REPO", "pulling FILE" (Digest is the file's blob name: "sha256:<hex>" for
// LFS files, the git blob id otherwise; Total and Completed are bytes), "warning: ...",
// "verifying sha256 digest", "writing manifest", "success"; and at any point, while the Hub rate limits
// the pull, a countdown once a second that begins with RateLimitedStatus.
type Progress struct {
	Status    string `json:"status"`
	Digest    string `json:"digest,omitempty"`
	Total     int64  `json:"total,omitempty"`
	Completed int64  `json:"completed,omitempty"`
}

// PullOptions tune Pull; the zero value uses the environment and sensible defaults.
type PullOptions struct {
	Endpoint string // the Hub; default Endpoint() ($HF_ENDPOINT or https://huggingface.co)
	Token    string // bearer token; default Token() ($HF_TOKEN or the saved login)
	Parallel int    // files downloaded at once; default 4
	// Retries is how many times in a row a failed request is retried (a download resuming where it was
	// cut); an attempt that received bytes before failing starts the count again. 0 means 5, a negative
	// value none.
	Retries int
	Backoff time.Duration // first retry delay, doubling each time up to 30s; default 1s
	// StallTimeout ends a download attempt (then retried, resuming) when no byte arrives for this long;
	// default 30s.
	StallTimeout time.Duration
	HTTPClient   *http.Client // default: http.Client with no overall timeout

	clock clock // what retries and rate-limit waits read and wait on; tests set a fake one
}

// clock tells the time and waits. Sleep returns early, with ctx's error, when ctx ends.
type clock interface {
	Now() time.Time
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// wantedFile reports whether pull downloads a repo file: what an MLX checkpoint needs, and README/LICENSE.
func wantedFile(name string) bool {
	if strings.Contains(name, "/") {
		return false // checkpoints keep their files at the top level
	}
	switch name {
	case "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
		"special_tokens_map.json", "chat_template.jinja", "chat_template.json",
		"preprocessor_config.json", "processor_config.json": // a vision tower's image preprocessing
		return true
	}
	lower := strings.ToLower(name)
	if strings.HasPrefix(name, "consolidated") {
		// Mistral's repos also carry the weights in mistral-inference's own layout
		// (consolidated.safetensors), as large as the checkpoint itself and read by nothing here.
		return false
	}
	return strings.HasSuffix(name, ".safetensors") || strings.HasSuffix(name, ".safetensors.index.json") ||
		strings.HasPrefix(lower, "readme") || strings.HasPrefix(lower, "license")
}

// Pull downloads a model into the store, as huggingface_hub would: it resolves the revision to a commit,
// downloads the files a checkpoint needs (several at once) into blobs/, each resumed from a .incomplete file
// with a Range request, retried with backoff after a network failure (the count starting again whenever
// bytes arrived; config.json first, and a model_type this program does not run, CheckArchitecture, ends
// the pull there with an error wrapping ErrUnsupported), and verified (sha256 for LFS files, size and git blob id for the rest) before an atomic
// rename; it checks that every shard a model.safetensors.index.json names is there, then links
// snapshots/<commit>/ and writes refs/<revision>. A 429 is waited out as long as the Hub asks (up to 5
// minutes). The token is sent to the Hub's own scheme, host and port only, never to a CDN it redirects
// to. A per-repo file lock serializes pulls of one repo across processes. progress, if not nil, gets
// every event, from one goroutine at a time.
func (s *Store) Pull(ctx context.Context, n Name, opts PullOptions, progress func(Progress)) (*LocalModel, error) {
	var mu sync.Mutex
	emit := func(p Progress) {
		if progress != nil {
			mu.Lock()
			defer mu.Unlock()
			progress(p)
		}
	}
	target, err := s.Lookup(n)
	if err != nil {
		return nil, err
	}
	if org, _, _ := strings.Cut(target.Repo, "/"); org == LocalOrg && n.IsBare() {
		return nil, fmt.Errorf("%s was made on this machine (mlxg create), there is nothing to pull", n)
	}
	opts = opts.withDefaults()
	h := newHub(opts, emit)

	emit(Progress{Status: "pulling manifest"})
	var info *repoInfo
	err = h.retry(ctx, func() error {
		var err error
		info, err = h.info(ctx, target.Repo, target.Revision)
		return err
	})
	if err != nil {
		return nil, err
	}
	files, err := checkpointFiles(target, info)
	if err != nil {
		return nil, err
	}
	// A new repo gets the Hub's own spelling of its name (names are case-insensitive there), as other
	// tools mostly use it; an existing folder keeps its own.
	if _, err := os.Stat(s.repoDir(target.Repo)); err != nil && strings.EqualFold(info.ID, target.Repo) {
		target.Repo = info.ID
	}
	lock, err := s.lockRepo(ctx, target.Repo, func() {
		emit(Progress{Status: "waiting for another pull of " + target.Repo})
	})
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()

	repoDir := s.repoDir(target.Repo)
	if err := os.MkdirAll(filepath.Join(repoDir, "blobs"), 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", repoDir, err)
	}
	// Every file up front, with what is already on disk, so that a progress bar knows the whole size.
	for _, f := range files {
		have := int64(0)
		blob := filepath.Join(repoDir, "blobs", f.etag())
		if fi, err := os.Stat(blob); err == nil && fi.Size() == f.size() {
			have = f.size()
		} else if fi, err := os.Stat(blob + ".incomplete"); err == nil && fi.Size() <= f.size() {
			have = fi.Size()
		}
		emit(Progress{Status: "pulling " + f.RFilename, Digest: f.digest(), Total: f.size(), Completed: have})
	}
	dl := &downloader{hub: h, opts: opts, repo: target.Repo, commit: info.SHA, repoDir: repoDir,
		locks: filepath.Join(s.HubCache, ".locks", repoFolder(target.Repo)), emit: emit}
	// config.json first, alone: it says whether the checkpoint is one MLX can load.
	if err := dl.fetch(ctx, files[0]); err != nil {
		return nil, err
	}
	configPath := filepath.Join(repoDir, "blobs", files[0].etag())
	if w := quantizationWarning(configPath); w != "" {
		emit(Progress{Status: "warning: " + w})
	}
	// An architecture this program does not run fails the pull here, before gigabytes of weights it
	// could not load download.
	if config, err := os.ReadFile(configPath); err != nil {
		return nil, err
	} else if err := CheckArchitecture(config); err != nil {
		return nil, fmt.Errorf("pulling %s: %w", target.Repo, err)
	}
	rest := files[1:]
	// A sharded checkpoint's index next, alone too: a shard it names that the Hub does not list fails
	// the pull before gigabytes of the others download, and the shards are checked on disk at the end.
	var shards map[string]sibling
	if i := slices.IndexFunc(rest, func(f sibling) bool { return f.RFilename == safetensors.IndexFile }); i >= 0 {
		index := rest[i]
		rest = slices.Delete(slices.Clone(rest), i, i+1)
		if err := dl.fetch(ctx, index); err != nil {
			return nil, err
		}
		if shards, err = indexedShards(filepath.Join(repoDir, "blobs", index.etag()), files); err != nil {
			return nil, fmt.Errorf("pulling %s at %s: %w", target.Repo, info.SHA, err)
		}
	}
	if err := parallel(ctx, opts.Parallel, rest, dl.fetch); err != nil {
		return nil, err
	}
	for _, name := range slices.Sorted(maps.Keys(shards)) {
		f := shards[name]
		if fi, err := os.Stat(filepath.Join(repoDir, "blobs", f.etag())); err != nil || fi.Size() != f.size() {
			return nil, fmt.Errorf("pulling %s at %s: shard %s, named by %s, is not in the cache after the download; run the pull again", target.Repo, info.SHA, name, safetensors.IndexFile)
		}
	}
	emit(Progress{Status: "verifying sha256 digest"})
	links := map[string]string{}
	for _, f := range files {
		links[f.RFilename] = f.etag()
	}
	emit(Progress{Status: "writing manifest"})
	if err := linkSnapshot(repoDir, info.SHA, links); err != nil {
		return nil, err
	}
	if target.Revision != info.SHA {
		if err := writeFileAtomic(filepath.Join(repoDir, "refs", filepath.FromSlash(target.Revision)), []byte(info.SHA)); err != nil {
			return nil, err
		}
	}
	if err := s.recordPull(target.Repo, target.Revision, time.Now()); err != nil {
		return nil, err
	}
	if b, ok := builtin(n.Bare); ok && n.IsBare() && strings.EqualFold(b.Repo, target.Repo) && target.Revision == DefaultRevision {
		// Pulled by an Ollama library name: list shows that name too, as Ollama lists what was pulled.
		err := s.updateState(func(st *state) error {
			if st.Library == nil {
				st.Library = map[string]string{}
			}
			st.Library[n.Bare] = target.Repo
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	emit(Progress{Status: "success"})
	return s.Resolve(n)
}

func (o PullOptions) withDefaults() PullOptions {
	if o.Endpoint == "" {
		o.Endpoint = Endpoint()
	}
	o.Endpoint = strings.TrimRight(o.Endpoint, "/")
	if o.Token == "" {
		o.Token = Token()
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.Retries == 0 {
		o.Retries = 5
	}
	if o.Backoff <= 0 {
		o.Backoff = time.Second
	}
	if o.StallTimeout <= 0 {
		o.StallTimeout = 30 * time.Second
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{}
	}
	if o.clock == nil {
		o.clock = realClock{}
	}
	return o
}

// retry runs try until it succeeds, fails for good, or has failed opts.Retries times in a row without
// progress: a failed attempt that got further than the one before (a download cut after some bytes,
// resumed by the next) starts the count and the backoff again, as huggingface_hub does, so that a flaky
// connection does not fail a long download that keeps advancing. A 429 that says how long to wait holds
// every request of the pull for that long (see pause), up to maxRateLimitWait; other failures back off
// from opts.Backoff, doubling up to 30s.
func (h *hub) retry(ctx context.Context, try func() error) error {
	delay := h.opts.Backoff
	for failures := 0; ; {
		if err := h.pause(ctx); err != nil {
			return err
		}
		err := try()
		var r *retryable
		if errors.As(err, &r) && r.progressed {
			failures, delay = 0, h.opts.Backoff
		}
		if err == nil || r == nil || failures >= h.opts.Retries || ctx.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		failures++
		var he *HubError
		if errors.As(err, &he) && he.Status == http.StatusTooManyRequests && he.Wait > 0 {
			if he.Wait > maxRateLimitWait {
				return err
			}
			// A second more: the headers count whole seconds, rounded down.
			h.holdOff(he.Wait+time.Second, he.Quota)
			continue
		}
		if err := h.opts.clock.Sleep(ctx, delay); err != nil {
			return err
		}
		delay = min(2*delay, 30*time.Second)
	}
}

// checkpointFiles picks the files to download, config.json first, and refuses repos MLX cannot load.
func checkpointFiles(target Name, info *repoInfo) ([]sibling, error) {
	var files []sibling
	var names []string
	hasWeights := false
	for _, f := range info.Siblings {
		names = append(names, f.RFilename)
		if !wantedFile(f.RFilename) {
			continue
		}
		if !isBlobName(f.etag()) {
			return nil, fmt.Errorf("pulling %s: the Hub listed %s without a usable blob id (%q)", target, f.RFilename, f.etag())
		}
		hasWeights = hasWeights || strings.HasSuffix(f.RFilename, ".safetensors")
		files = append(files, f)
	}
	if slices.Contains(names, "tekken.json") && !slices.Contains(names, "tokenizer.json") {
		return nil, fmt.Errorf("%s at %s has Mistral's tekken.json but no tokenizer.json, which mlxg reads: pull a repo that ships tokenizer.json (mlx-community's conversions do)", target.Repo, target.Revision)
	}
	i := slices.IndexFunc(files, func(f sibling) bool { return f.RFilename == "config.json" })
	switch {
	case i < 0 || !hasWeights:
		why := "it has no config.json"
		if i >= 0 {
			why = "it has no *.safetensors weights"
		}
		var kinds []string
		for _, n := range names {
			for _, ext := range []string{".gguf", ".bin", ".pt", ".pth", ".onnx"} {
				if strings.HasSuffix(n, ext) && !slices.Contains(kinds, ext) {
					kinds = append(kinds, ext)
				}
			}
		}
		if len(kinds) > 0 {
			why += " (its weights are " + strings.Join(kinds, ", ") + " files)"
		}
		return nil, fmt.Errorf("%s at %s is not an MLX checkpoint: %s; look for an MLX conversion, e.g. on https://huggingface.co/mlx-community", target.Repo, target.Revision, why)
	}
	files[0], files[i] = files[i], files[0]
	slices.SortFunc(files[1:], func(a, b sibling) int { return int(min(max(a.size()-b.size(), -1), 1)) })
	return files, nil
}

// indexedShards reads a downloaded model.safetensors.index.json and returns the files it names, each
// with its listing; a name that is not a file beside the index, or that the Hub does not list, is an
// error naming it: the checkpoint could not load without it.
func indexedShards(path string, listed []sibling) (map[string]sibling, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(b, &index); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %w", safetensors.IndexFile, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("%s has no weight_map", safetensors.IndexFile)
	}
	shards := map[string]sibling{}
	var missing []string
	for _, name := range index.WeightMap {
		if _, ok := shards[name]; ok || slices.Contains(missing, name) {
			continue
		}
		if i := slices.IndexFunc(listed, func(f sibling) bool { return f.RFilename == name }); i >= 0 {
			shards[name] = listed[i]
		} else {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("%s names %s, which the repo does not hold beside it at this commit: the checkpoint is incomplete upstream and cannot load; tell its authors, or pull another revision (org/name:REVISION)",
			safetensors.IndexFile, strings.Join(missing, ", "))
	}
	return shards, nil
}

// isBlobName accepts what the Hub gives as a blob name: a git blob id (40 hex digits) or a sha256 (64).
func isBlobName(s string) bool { return (len(s) == 40 || len(s) == 64) && isHex(s) }

// quantizationWarning explains a config.json that MLX cannot load as is (PyTorch quantization formats).
func quantizationWarning(configPath string) string {
	b, err := os.ReadFile(configPath)
	if err != nil {
		return ""
	}
	var cfg struct {
		Quantization       json.RawMessage `json:"quantization"`
		QuantizationConfig *struct {
			QuantMethod string `json:"quant_method"`
		} `json:"quantization_config"`
	}
	if json.Unmarshal(b, &cfg) != nil {
		return "config.json is not valid JSON"
	}
	if cfg.QuantizationConfig != nil && cfg.Quantization == nil {
		return fmt.Sprintf("not an MLX checkpoint: config.json has a quantization_config (quant_method %q), a PyTorch quantization MLX does not load; look for an mlx-community conversion", cfg.QuantizationConfig.QuantMethod)
	}
	return ""
}

// downloader fetches the files of one repo at one commit into its blobs/.
type downloader struct {
	hub     *hub
	opts    PullOptions
	repo    string
	commit  string
	repoDir string
	locks   string
	emit    func(Progress)
}

// diskWrite writes downloaded bytes; a variable so that tests can fill the disk.
var diskWrite = func(f *os.File, p []byte) (int, error) { return f.Write(p) }

// fetch makes blobs/<etag> hold the file, verified, downloading what is missing.
func (d *downloader) fetch(ctx context.Context, f sibling) error {
	etag, size, digest := f.etag(), f.size(), f.digest()
	status := "pulling " + f.RFilename
	blob := filepath.Join(d.repoDir, "blobs", etag)
	if fi, err := os.Stat(blob); err == nil && fi.Size() == size {
		d.emit(Progress{Status: status, Digest: digest, Total: size, Completed: size})
		return nil
	}
	// huggingface_hub's own per-blob lock, so that it and mlxg never write one blob at once.
	if err := os.MkdirAll(d.locks, 0o755); err != nil {
		return err
	}
	lock, err := lockFile(ctx, filepath.Join(d.locks, etag+".lock"))
	if err != nil {
		return err
	}
	defer lock.Unlock()
	if fi, err := os.Stat(blob); err == nil && fi.Size() == size {
		d.emit(Progress{Status: status, Digest: digest, Total: size, Completed: size})
		return nil
	}
	inc := blob + ".incomplete"
	var sum hash.Hash
	last := time.Time{}
	report := func(done int64, force bool) {
		if force || time.Since(last) >= 100*time.Millisecond {
			last = time.Now()
			d.emit(Progress{Status: status, Digest: digest, Total: size, Completed: done})
		}
	}
	err = d.hub.retry(ctx, func() error {
		var err error
		sum, err = d.download(ctx, f, inc, report)
		return err
	})
	if err != nil {
		if fi, serr := os.Stat(inc); serr == nil && fi.Size() == 0 {
			os.Remove(inc) // nothing to resume
		}
		return err
	}
	report(size, true)
	if got := hex.EncodeToString(sum.Sum(nil)); got != etag {
		os.Remove(inc)
		return fmt.Errorf("pulling %s: %s failed verification (got %s, want %s); the download was deleted, run the pull again", d.repo, f.RFilename, got, etag)
	}
	if err := os.Rename(inc, blob); err != nil {
		return fmt.Errorf("pulling %s: storing %s: %w", d.repo, f.RFilename, err)
	}
	return nil
}

// newVerifier hashes a file the way its blob name was made: sha256 for LFS, git's blob sha1 otherwise.
func newVerifier(f sibling) hash.Hash {
	if f.LFS != nil {
		return sha256.New()
	}
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", f.Size)
	return h
}

// download appends the missing bytes of a file to its .incomplete file and returns the hash of all of it.
func (d *downloader) download(ctx context.Context, f sibling, inc string, report func(int64, bool)) (sum hash.Hash, err error) {
	name, size := f.RFilename, f.size()
	out, err := os.OpenFile(inc, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pulling %s: opening %s: %w", d.repo, inc, err)
	}
	defer out.Close()
	sum = newVerifier(f)
	have, err := io.Copy(sum, out) // what an earlier attempt left, hashed again
	if err != nil {
		return nil, fmt.Errorf("pulling %s: reading %s: %w", d.repo, inc, err)
	}
	restart := func() error { // the partial file is not ours to resume: start over
		sum, have = newVerifier(f), 0
		return out.Truncate(0)
	}
	if have > size {
		if err := restart(); err != nil {
			return nil, err
		}
	}
	report(have, true)
	if have == size {
		return sum, nil
	}
	start := have
	defer func() {
		var r *retryable
		if errors.As(err, &r) && have > start {
			r.progressed = true
		}
	}()
	// A connection that stays open but sends nothing is a cut too: a watchdog cancels the attempt
	// when no byte arrives for StallTimeout, and the retry resumes.
	attempt, cancel := context.WithCancel(ctx)
	defer cancel()
	watchdog := time.AfterFunc(d.opts.StallTimeout, cancel)
	defer watchdog.Stop()
	stalled := func(err error) error {
		if ctx.Err() == nil && attempt.Err() != nil {
			return &retryable{err: fmt.Errorf("pulling %s: download of %s stalled at byte %d of %d: nothing received for %s", d.repo, name, have, size, d.opts.StallTimeout)}
		}
		return &retryable{err: err}
	}
	req, err := http.NewRequestWithContext(attempt, http.MethodGet, d.hub.resolveURL(d.repo, d.commit, name), nil)
	if err != nil {
		return nil, err
	}
	// The bytes as stored, never a compressed encoding: Range offsets and hashes are of the file itself
	// (huggingface_hub asks the same).
	req.Header.Set("Accept-Encoding", "identity")
	if have > 0 {
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", have))
	}
	resp, err := d.hub.do(req)
	if err != nil {
		return nil, stalled(fmt.Errorf("pulling %s: downloading %s: %w", d.repo, name, err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		var start int64
		if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-", &start); err != nil || start != have {
			return nil, &retryable{err: fmt.Errorf("pulling %s: %s: the server resumed at %q, not at byte %d", d.repo, name, resp.Header.Get("Content-Range"), have)}
		}
	case resp.StatusCode == http.StatusOK:
		if have > 0 { // the server ignored the Range: take the whole file
			if err := restart(); err != nil {
				return nil, err
			}
		}
	default:
		e := d.hub.statusError(resp, d.repo+" file "+name)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestedRangeNotSatisfiable {
			if resp.StatusCode == http.StatusRequestedRangeNotSatisfiable {
				os.Remove(inc) // the partial file disagrees with the server: start over next time
			}
			return nil, &retryable{err: e}
		}
		return nil, e
	}
	if _, err := out.Seek(have, io.SeekStart); err != nil {
		return nil, err
	}
	buf := make([]byte, 256<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		watchdog.Reset(d.opts.StallTimeout)
		if n > 0 {
			if have+int64(n) > size {
				return nil, &retryable{err: fmt.Errorf("pulling %s: %s is longer than the %d bytes the Hub listed", d.repo, name, size)}
			}
			if _, err := diskWrite(out, buf[:n]); err != nil {
				if errors.Is(err, syscall.ENOSPC) {
					return nil, fmt.Errorf("pulling %s: the disk is full writing %s (%s); free some space and run the pull again: the %d bytes already downloaded are kept and the download resumes",
						d.repo, name, inc, have)
				}
				return nil, fmt.Errorf("pulling %s: writing %s: %w", d.repo, inc, err)
			}
			sum.Write(buf[:n])
			have += int64(n)
			report(have, false)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return nil, stalled(fmt.Errorf("pulling %s: download of %s cut at byte %d of %d: %w", d.repo, name, have, size, rerr))
		}
	}
	if have != size {
		return nil, &retryable{err: fmt.Errorf("pulling %s: download of %s ended at byte %d of %d", d.repo, name, have, size)}
	}
	return sum, out.Sync()
}

// parallel runs fn on every item, at most n at once, and returns the first error (cancelling the rest).
func parallel[T any](ctx context.Context, n int, items []T, fn func(context.Context, T) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for _, it := range items {
		sem <- struct{}{}
		if ctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, it); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return first
}

// lockFile takes an exclusive file lock, waiting as long as ctx allows.
func lockFile(ctx context.Context, path string) (*flock.Flock, error) {
	l := flock.New(path)
	ok, err := l.TryLockContext(ctx, 100*time.Millisecond)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if !ok {
		return nil, ctx.Err()
	}
	return l, nil
}
