package registry

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ImportDir stores a model directory built on this machine (mlxg create) under name n: every regular
// top-level file becomes a blob named by its sha256, a snapshot whose commit id is the sha1 of the sorted
// (sha256, file name) list (so the same content gets the same id), and refs/<revision>. A bare name
// "foo[:tag]" goes to the repo local/foo at revision tag ("latest" is "main") and is then known as foo:tag;
// a repo name org/name[:branch] is used as given. The directory is copied, not moved.
func (s *Store) ImportDir(ctx context.Context, n Name, dir string) (*LocalModel, error) {
	target := n
	if n.IsBare() {
		target = localName(n.Bare)
	}
	if isCommit(target.Revision) {
		return nil, fmt.Errorf("cannot create %s: a commit hash is not a revision one can write; use a branch or tag name", n)
	}
	if !isCheckpoint(dir) {
		return nil, fmt.Errorf("cannot import %s: it needs config.json and at least one *.safetensors file", dir)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", dir, err)
	}
	lock, err := s.lockRepo(ctx, target.Repo, nil)
	if err != nil {
		return nil, err
	}
	defer lock.Unlock()
	repoDir := s.repoDir(target.Repo)
	blobs := filepath.Join(repoDir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", blobs, err)
	}
	files := map[string]string{} // file name -> blob name
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		sum, err := importBlob(filepath.Join(dir, e.Name()), blobs)
		if err != nil {
			return nil, err
		}
		files[e.Name()] = sum
	}
	manifest := sha1.New()
	for _, name := range sortedKeys(files) {
		fmt.Fprintf(manifest, "%s %s\n", files[name], name)
	}
	commit := hex.EncodeToString(manifest.Sum(nil))
	if err := linkSnapshot(repoDir, commit, files); err != nil {
		return nil, err
	}
	if err := writeFileAtomic(filepath.Join(repoDir, "refs", filepath.FromSlash(target.Revision)), []byte(commit)); err != nil {
		return nil, err
	}
	// The name now means this model: an alias of the same name made by cp goes.
	err = s.updateState(func(st *state) error {
		delete(st.Aliases, n.Bare)
		delete(st.Modelfiles, n.Bare) // new weights: what create added to the old ones goes too
		st.Pulled[target.Repo+":"+target.Revision] = time.Now().UTC()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.Resolve(n)
}

// importBlob copies src into blobs/<sha256>, hashing as it copies, through a temporary file and a rename.
func importBlob(src, blobs string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(blobs, ".import-*")
	if err != nil {
		return "", fmt.Errorf("creating a blob in %s: %w", blobs, err)
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(tmp, h), in)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("copying %s into the store: %w", src, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(tmp.Name(), filepath.Join(blobs, sum)); err != nil {
		return "", fmt.Errorf("storing %s: %w", src, err)
	}
	return sum, nil
}

// linkSnapshot makes snapshots/<commit>/<file> a relative symlink to ../../blobs/<blob> for every file,
// each through a temporary link and a rename, as huggingface_hub lays the cache out.
func linkSnapshot(repoDir, commit string, files map[string]string) error {
	snap := filepath.Join(repoDir, "snapshots", commit)
	for _, name := range sortedKeys(files) {
		dst := filepath.Join(snap, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("creating snapshot %s: %w", snap, err)
		}
		rel, err := filepath.Rel(filepath.Dir(dst), filepath.Join(repoDir, "blobs", files[name]))
		if err != nil {
			return err
		}
		if cur, err := os.Readlink(dst); err == nil && cur == rel {
			continue
		}
		tmp := dst + ".tmp-link"
		_ = os.Remove(tmp)
		if err := os.Symlink(rel, tmp); err != nil {
			return fmt.Errorf("linking %s: %w", dst, err)
		}
		if err := os.Rename(tmp, dst); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("linking %s: %w", dst, err)
		}
	}
	return nil
}
