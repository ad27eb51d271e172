package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"
)

// state is mlxg's own bookkeeping, in $MLXG_HOME/state.json: what the hub cache cannot hold.
type state struct {
	Aliases map[string]alias     `json:"aliases"` // bare "name:tag" -> pinned snapshot
	Pulled  map[string]time.Time `json:"pulled"`  // "org/name:revision" -> last pull or create
	// Modelfiles: bare "name:tag" -> what ollama create added (an alias's or a local model's).
	Modelfiles map[string]*Modelfile `json:"modelfiles,omitempty"`
	// Library: Ollama library names pulled by that name ("qwen3:latest") -> the repo, for list.
	Library map[string]string `json:"library,omitempty"`
}

type alias struct {
	Repo    string    `json:"repo"`
	Commit  string    `json:"commit"`
	Created time.Time `json:"created"`
}

func (s *Store) statePath() string { return filepath.Join(s.Home, "state.json") }

func (s *Store) readState() (*state, error) {
	st := &state{Aliases: map[string]alias{}, Pulled: map[string]time.Time{}}
	b, err := os.ReadFile(s.statePath())
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading mlxg state: %w", err)
	}
	if err := json.Unmarshal(b, st); err != nil {
		return nil, fmt.Errorf("mlxg state %s is not valid JSON (%v); fix or delete it (aliases and pull times are lost, models are not)", s.statePath(), err)
	}
	if st.Aliases == nil {
		st.Aliases = map[string]alias{}
	}
	if st.Pulled == nil {
		st.Pulled = map[string]time.Time{}
	}
	return st, nil
}

// updateState is a read-modify-write of state.json under a file lock, written atomically.
func (s *Store) updateState(change func(*state) error) error {
	if err := os.MkdirAll(s.Home, 0o755); err != nil {
		return fmt.Errorf("creating mlxg's home: %w (set MLXG_HOME)", err)
	}
	l := flock.New(filepath.Join(s.Home, "state.lock"))
	if err := l.Lock(); err != nil {
		return fmt.Errorf("locking mlxg state: %w", err)
	}
	defer l.Unlock()
	st, err := s.readState()
	if err != nil {
		return err
	}
	if err := change(st); err != nil {
		return err
	}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.statePath(), append(b, '\n'))
}

// writeFileAtomic writes a small file through a temporary file and a rename, so readers never see half of it.
func writeFileAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// recordPull notes when repo:revision was pulled or created (list's MODIFIED).
func (s *Store) recordPull(repo, rev string, t time.Time) error {
	return s.updateState(func(st *state) error { st.Pulled[repo+":"+rev] = t.UTC(); return nil })
}
