package registry

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gofrs/flock"
)

// ErrNotFound is wrapped by the errors of names that resolve to nothing on this machine or on the Hub.
var ErrNotFound = errors.New("model not found")

// Store is the local model store: the Hugging Face hub cache (models--org--name/{blobs,snapshots,refs})
// shared with huggingface_hub, mlx-lm and huggingface-cli, plus mlxg's own state (aliases, pull times) in Home.
type Store struct {
	HubCache string // the hub cache root, e.g. ~/.cache/huggingface/hub
	Home     string // mlxg's own state, e.g. ~/.mlxg
}

// HubCacheDir is $HF_HUB_CACHE (or its old name $HUGGINGFACE_HUB_CACHE), else HFHome()/hub:
// where huggingface_hub looks.
func HubCacheDir() (string, error) {
	for _, k := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if d := os.Getenv(k); d != "" {
			return d, nil
		}
	}
	home, err := HFHome()
	if err != nil {
		return "", fmt.Errorf("finding the Hugging Face cache: %w (set HF_HUB_CACHE)", err)
	}
	return filepath.Join(home, "hub"), nil
}

// HFHome is $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface, as in huggingface_hub.
func HFHome() (string, error) {
	if d := os.Getenv("HF_HOME"); d != "" {
		return d, nil
	}
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "huggingface"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, ".cache", "huggingface"), nil
}

// HomeDir is $MLXG_HOME, else ~/.mlxg.
func HomeDir() (string, error) {
	if d := os.Getenv("MLXG_HOME"); d != "" {
		return d, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding mlxg's home: %w (set MLXG_HOME)", err)
	}
	return filepath.Join(home, ".mlxg"), nil
}

// DefaultStore is the store the environment names (HubCacheDir, HomeDir).
func DefaultStore() (*Store, error) {
	cache, err := HubCacheDir()
	if err != nil {
		return nil, err
	}
	home, err := HomeDir()
	if err != nil {
		return nil, err
	}
	return &Store{HubCache: cache, Home: home}, nil
}

// LocalModel is one model in the store: a snapshot of a repo at a commit, under the name it was asked by.
type LocalModel struct {
	Name     string    // the name as list shows it: an alias, "foo:latest" for local/foo, or "org/name[:rev]"
	Repo     string    // "org/name"
	Revision string    // the ref (branch or tag) it was resolved through, or the commit itself
	Commit   string    // 40 hex digits
	Dir      string    // the snapshot directory: config.json, *.safetensors, tokenizer files
	Size     int64     // bytes of the files in the snapshot
	Modified time.Time // when it was pulled, created or copied
	// Modelfile is what ollama create added under this bare name (options, system, messages, licenses);
	// nil for none.
	Modelfile *Modelfile
}

// ID is the short commit id list shows.
func (m *LocalModel) ID() string { return m.Commit[:min(12, len(m.Commit))] }

func (s *Store) repoDir(repo string) string { return filepath.Join(s.HubCache, repoFolder(repo)) }

// lockRepo takes the per-repo lock that pull, create and rm hold (the file lives beside huggingface_hub's
// own per-blob locks in .locks/models--org--name/). wait is called once if another process holds it.
func (s *Store) lockRepo(ctx context.Context, repo string, wait func()) (*flock.Flock, error) {
	dir := filepath.Join(s.HubCache, ".locks", repoFolder(repo))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the lock directory: %w", err)
	}
	l := flock.New(filepath.Join(dir, "mlxg-repo.lock"))
	ok, err := l.TryLock()
	if err == nil && !ok {
		if wait != nil {
			wait()
		}
		ok, err = l.TryLockContext(ctx, 100*time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", l.Path(), err)
	}
	if !ok {
		return nil, fmt.Errorf("waiting for another mlxg process using %s: %w", repo, ctx.Err())
	}
	return l, nil
}

// Lookup turns a bare name into the repo name it stands for: a user alias (pinned to a commit),
// a local model (local/name), or a built-in alias, in that order. A repo name is returned as is.
func (s *Store) Lookup(n Name) (Name, error) {
	if !n.IsBare() {
		n.Repo = s.canonicalRepo(n.Repo)
		return n, nil
	}
	st, err := s.readState()
	if err != nil {
		return Name{}, err
	}
	if a, ok := st.Aliases[n.Bare]; ok {
		return Name{Repo: a.Repo, Revision: a.Commit}, nil
	}
	if local := localName(n.Bare); s.hasRef(local.Repo, local.Revision) {
		return local, nil
	}
	if b, ok := builtin(n.Bare); ok {
		return b, nil
	}
	return Name{}, unknownBare(n.Bare)
}

// canonicalRepo spells repo as its folder in the store does, since Hub repo names are case-insensitive
// (mlx-community/qwen3-0.6b-4bit is mlx-community/Qwen3-0.6B-4bit); repo itself when no folder matches.
func (s *Store) canonicalRepo(repo string) string {
	if _, err := os.Stat(s.repoDir(repo)); err == nil {
		return repo
	}
	ents, _ := os.ReadDir(s.HubCache)
	for _, e := range ents {
		if e.IsDir() && strings.EqualFold(e.Name(), repoFolder(repo)) {
			org, name, _ := strings.Cut(strings.TrimPrefix(e.Name(), "models--"), "--")
			return org + "/" + name
		}
	}
	return repo
}

// Resolve finds a model on this machine: its snapshot directory, repo, revision and commit.
// It fails with an error wrapping ErrNotFound, saying to pull, when the model is not there.
func (s *Store) Resolve(n Name) (*LocalModel, error) {
	target, err := s.Lookup(n)
	if err != nil {
		return nil, err
	}
	commit := target.Revision
	if !isCommit(commit) {
		if commit, err = s.readRef(target.Repo, target.Revision); err != nil {
			return nil, fmt.Errorf("%w: %s is not on this machine; run mlxg pull %s", ErrNotFound, n, n)
		}
	}
	dir := filepath.Join(s.repoDir(target.Repo), "snapshots", commit)
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%w: %s (commit %s) is not on this machine; run mlxg pull %s", ErrNotFound, n, commit, n)
	}
	m := &LocalModel{Name: n.String(), Repo: target.Repo, Revision: target.Revision, Commit: commit, Dir: dir}
	if !n.IsBare() {
		m.Name = displayName(target.Repo, target.Revision)
	}
	m.Size = snapshotSize(dir)
	st, err := s.readState()
	if err != nil {
		return nil, err
	}
	m.Modified = s.modified(st, n, target, dir)
	if n.IsBare() {
		m.Modelfile = st.Modelfiles[n.Bare]
	}
	return m, nil
}

// modified is when a name was pulled, created or copied, else the snapshot's own time.
func (s *Store) modified(st *state, n Name, target Name, dir string) time.Time {
	if a, ok := st.Aliases[n.Bare]; ok && n.IsBare() {
		return a.Created
	}
	if t, ok := st.Pulled[target.Repo+":"+target.Revision]; ok {
		return t
	}
	if fi, err := os.Lstat(filepath.Join(s.repoDir(target.Repo), "refs", filepath.FromSlash(target.Revision))); err == nil {
		return fi.ModTime()
	}
	if fi, err := os.Stat(dir); err == nil {
		return fi.ModTime()
	}
	return time.Time{}
}

// readRef reads refs/<revision>, which holds a commit hash (no newline, as huggingface_hub writes it).
func (s *Store) readRef(repo, rev string) (string, error) {
	b, err := os.ReadFile(filepath.Join(s.repoDir(repo), "refs", filepath.FromSlash(rev)))
	if err != nil {
		return "", err
	}
	c := strings.TrimSpace(string(b))
	if !isCommit(c) {
		return "", fmt.Errorf("ref %s of %s holds %q, not a commit hash", rev, repo, c)
	}
	return c, nil
}

func (s *Store) hasRef(repo, rev string) bool {
	_, err := s.readRef(repo, rev)
	return err == nil
}

// refs lists a repo's refs as revision -> commit.
func (s *Store) refs(repo string) map[string]string {
	out := map[string]string{}
	root := filepath.Join(s.repoDir(repo), "refs")
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		rev := filepath.ToSlash(rel)
		if c, err := s.readRef(repo, rev); err == nil {
			out[rev] = c
		}
		return nil
	})
	return out
}

// snapshotSize adds the sizes of a snapshot's files (following the symlinks into blobs/).
func snapshotSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// isCheckpoint reports whether a snapshot holds what a model needs: config.json and safetensors.
func isCheckpoint(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return false
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	return len(m) > 0
}

// repos lists the model repos in the hub cache, from their folder names.
func (s *Store) repos() ([]string, error) {
	ents, err := os.ReadDir(s.HubCache)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the model store %s: %w", s.HubCache, err)
	}
	var out []string
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), "models--")
		if !ok || !e.IsDir() {
			continue
		}
		org, name, ok := strings.Cut(rest, "--")
		if !ok || strings.Contains(name, "--") {
			continue // a repo without an organization: mlxg names always have one
		}
		out = append(out, org+"/"+name)
	}
	return out, nil
}

// List returns every MLX checkpoint in the store, newest first: each ref of each repo (whoever downloaded it),
// each alias, and snapshots that no ref or alias names (listed as org/name:<commit>).
func (s *Store) List() ([]LocalModel, error) {
	st, err := s.readState()
	if err != nil {
		return nil, err
	}
	repos, err := s.repos()
	if err != nil {
		return nil, err
	}
	var out []LocalModel
	add := func(n Name, display string, target Name, commit string) {
		dir := filepath.Join(s.repoDir(target.Repo), "snapshots", commit)
		if !isCheckpoint(dir) {
			return
		}
		out = append(out, LocalModel{Name: display, Repo: target.Repo, Revision: target.Revision, Commit: commit,
			Dir: dir, Size: snapshotSize(dir), Modified: s.modified(st, n, target, dir)})
	}
	named := map[string]bool{} // repo + "@" + commit
	for _, bare := range sortedKeys(st.Aliases) {
		a := st.Aliases[bare]
		add(Name{Bare: bare}, bare, Name{Repo: a.Repo, Revision: a.Commit}, a.Commit)
		named[a.Repo+"@"+a.Commit] = true
	}
	for _, bare := range sortedKeys(st.Library) { // library names pulled as such, while nothing else holds the name
		if _, ok := st.Aliases[bare]; ok {
			continue
		}
		if local := localName(bare); s.hasRef(local.Repo, local.Revision) {
			continue
		}
		if commit, err := s.readRef(st.Library[bare], DefaultRevision); err == nil {
			add(Name{Bare: bare}, bare, Name{Repo: st.Library[bare], Revision: DefaultRevision}, commit)
		}
	}
	for _, repo := range repos {
		refs := s.refs(repo)
		for _, rev := range sortedKeys(refs) {
			n := Name{Repo: repo, Revision: rev}
			add(n, displayName(repo, rev), n, refs[rev])
			named[repo+"@"+refs[rev]] = true
		}
		snaps, _ := os.ReadDir(filepath.Join(s.repoDir(repo), "snapshots"))
		for _, e := range snaps {
			if c := e.Name(); isCommit(c) && !named[repo+"@"+c] {
				n := Name{Repo: repo, Revision: c}
				add(n, n.String(), n, c)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b LocalModel) int { return b.Modified.Compare(a.Modified) })
	return out, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Copy makes dst, a bare name, an alias of the model src resolves to, pinned to its commit
// (like `ollama cp`: later pulls of src do not move it). An existing alias dst is replaced.
func (s *Store) Copy(src, dst Name) (*LocalModel, error) {
	if !dst.IsBare() {
		return nil, fmt.Errorf("cp makes an alias: the destination %q must be a name without '/', such as mymodel or mymodel:v1", dst)
	}
	m, err := s.Resolve(src)
	if err != nil {
		return nil, err
	}
	if local := localName(dst.Bare); s.hasRef(local.Repo, local.Revision) {
		return nil, fmt.Errorf("%s is a model made with mlxg create (%s); remove it first (mlxg rm %s) or copy to another name", dst, local, dst)
	}
	err = s.updateState(func(st *state) error {
		st.Aliases[dst.Bare] = alias{Repo: m.Repo, Commit: m.Commit, Created: time.Now().UTC()}
		if m.Modelfile != nil { // a copy keeps what create added, as ollama cp does
			if st.Modelfiles == nil {
				st.Modelfiles = map[string]*Modelfile{}
			}
			st.Modelfiles[dst.Bare] = m.Modelfile
		} else {
			delete(st.Modelfiles, dst.Bare)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.Resolve(dst)
}

// Removed says what Remove deleted.
type Removed struct {
	Alias     bool     // the name was a user alias, and only the alias went
	Snapshots []string // commits whose snapshot went
	Blobs     int      // blob files deleted
	Bytes     int64    // their size
}

// Remove deletes a model: a user alias is just unnamed; a repo revision loses its ref, then its snapshot
// if no other ref or alias names that commit, then the blobs no remaining snapshot uses. The repo folder
// goes when nothing is left in it. A snapshot that only the removed alias named goes too.
func (s *Store) Remove(ctx context.Context, n Name) (*Removed, error) {
	st, err := s.readState()
	if err != nil {
		return nil, err
	}
	if a, ok := st.Aliases[n.Bare]; ok && n.IsBare() {
		err := s.updateState(func(st *state) error { delete(st.Aliases, n.Bare); delete(st.Modelfiles, n.Bare); return nil })
		if err != nil {
			return nil, err
		}
		r, err := s.collect(ctx, a.Repo, nil, a.Commit)
		if err != nil {
			return nil, err
		}
		r.Alias = true
		return r, nil
	}
	m, err := s.Resolve(n)
	if err != nil {
		return nil, err
	}
	refs := []string{m.Revision}
	if isCommit(m.Revision) { // by commit: every ref that points at it goes too
		refs = nil
		for rev, c := range s.refs(m.Repo) {
			if c == m.Commit {
				refs = append(refs, rev)
			}
		}
	}
	r, err := s.collect(ctx, m.Repo, refs, m.Commit)
	if err != nil {
		return nil, err
	}
	return r, s.updateState(func(st *state) error {
		delete(st.Pulled, m.Repo+":"+m.Revision)
		if n.IsBare() {
			delete(st.Modelfiles, n.Bare)
		}
		for bare, repo := range st.Library { // library names whose checkpoint went with it
			if !s.hasRef(repo, DefaultRevision) {
				delete(st.Library, bare)
			}
		}
		return nil
	})
}

// collect removes the refs drop from repo, then commit's snapshot unless a ref or alias still names it,
// then the blobs no snapshot uses.
func (s *Store) collect(ctx context.Context, repo string, drop []string, commit string) (*Removed, error) {
	lock, err := s.lockRepo(ctx, repo, nil)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	dir := s.repoDir(repo)
	r := &Removed{}
	refs := s.refs(repo)
	for _, ref := range drop {
		if err := os.Remove(filepath.Join(dir, "refs", filepath.FromSlash(ref))); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("removing ref %s of %s: %w", ref, repo, err)
		}
		delete(refs, ref)
	}
	removeEmptyDirs(filepath.Join(dir, "refs"))
	st, err := s.readState()
	if err != nil {
		return nil, err
	}
	used := false
	for _, c := range refs {
		used = used || c == commit
	}
	for _, a := range st.Aliases {
		used = used || (a.Repo == repo && a.Commit == commit)
	}
	if !used {
		if err := os.RemoveAll(filepath.Join(dir, "snapshots", commit)); err != nil {
			return nil, fmt.Errorf("removing snapshot %s of %s: %w", commit, repo, err)
		}
		_ = os.RemoveAll(filepath.Join(dir, ".no_exist", commit))
		r.Snapshots = append(r.Snapshots, commit)
	}
	if err := s.removeUnusedBlobs(dir, r); err != nil {
		return nil, err
	}
	if snaps, _ := os.ReadDir(filepath.Join(dir, "snapshots")); len(snaps) == 0 && len(refs) == 0 {
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("removing %s: %w", dir, err)
		}
		_ = os.Remove(filepath.Join(s.HubCache, ".locks", repoFolder(repo), "mlxg-repo.lock"))
		_ = os.Remove(filepath.Join(s.HubCache, ".locks", repoFolder(repo)))
	}
	return r, nil
}

// removeUnusedBlobs deletes the blobs no snapshot links to (partial .incomplete downloads stay for resuming).
func (s *Store) removeUnusedBlobs(dir string, r *Removed) error {
	used := map[string]bool{}
	_ = filepath.WalkDir(filepath.Join(dir, "snapshots"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSymlink != 0 {
			if target, err := os.Readlink(p); err == nil {
				used[filepath.Base(target)] = true
			}
		}
		return nil
	})
	blobs, _ := os.ReadDir(filepath.Join(dir, "blobs"))
	for _, b := range blobs {
		if used[b.Name()] || strings.HasSuffix(b.Name(), ".incomplete") {
			continue
		}
		p := filepath.Join(dir, "blobs", b.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if err := os.Remove(p); err != nil {
			return fmt.Errorf("removing blob %s: %w", p, err)
		}
		r.Blobs++
		r.Bytes += fi.Size()
	}
	return nil
}

// removeEmptyDirs removes the empty folders under root (nested refs such as refs/pr/1), not root itself.
func removeEmptyDirs(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && p != root {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = os.Remove(dirs[i]) // fails, harmlessly, when not empty
	}
}
