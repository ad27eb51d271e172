package quality

import (
	"context"
	"fmt"

	"github.com/mlxg/mlxg/kvstore"
)

// Restored returns s with caches that come from the SSD tier of a prefix cache in dir:
// it feeds s tokens[:n] on a fresh set of its caches, saves their blocks to a prefix
// cache over dir and waits until they are on disk. Each call of the returned side's
// Caches then opens a new prefix cache over dir, whose RAM tier is empty, restores
// tokens[:n] into fresh caches of s (every block read back from disk and verified) and
// fails unless all n positions came back from disk. Compared with s itself, the
// restored side must score exactly as the live one (Report.Identical = Positions).
func Restored(ctx context.Context, s Side, tokens []int32, n int, dir string) (Side, error) {
	if n <= 0 || n > len(tokens) {
		return Side{}, fmt.Errorf("quality: restore %d of %d tokens", n, len(tokens))
	}
	if s.Model == nil || s.Caches == nil {
		return Side{}, fmt.Errorf("quality: side %q has no model or no caches", s.Name)
	}
	identity, err := kvstore.CheckpointIdentity(s.Model.Dir)
	if err != nil {
		return Side{}, err
	}
	begin := func(p *kvstore.PrefixCache, caches []kvstore.Layer) (*kvstore.Session, error) {
		if err := s.Model.FillCaches(caches); err != nil {
			return nil, err
		}
		seq := s.Model.PrefixSeq(caches)
		key, err := kvstore.NewModelKey(identity, seq)
		if err != nil {
			return nil, err
		}
		return p.Begin(key, seq), nil
	}

	caches, err := s.Caches()
	if err != nil {
		return Side{}, err
	}
	r := &runner{Side: s, caches: caches}
	if err := r.advance(ctx, tokens, n, 64); err != nil {
		return Side{}, err
	}
	p, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: dir})
	if err != nil {
		return Side{}, err
	}
	sess, err := begin(p, caches)
	if err != nil {
		p.Close()
		return Side{}, err
	}
	sess.Save(tokens[:n])
	sess.End()
	p.Flush()
	if err := p.Close(); err != nil {
		return Side{}, err
	}
	if st := p.Stats(); st.BlocksWritten == 0 {
		return Side{}, fmt.Errorf("quality: side %q: no prefix block was written to %s", s.Name, dir)
	}

	out := s
	out.Name = s.Name + " (restored)"
	out.Caches = func() ([]kvstore.Layer, error) {
		caches, err := s.Caches()
		if err != nil {
			return nil, err
		}
		p, err := kvstore.NewPrefixCache(kvstore.PrefixConfig{Dir: dir})
		if err != nil {
			return nil, err
		}
		defer p.Close()
		sess, err := begin(p, caches)
		if err != nil {
			return nil, err
		}
		defer sess.End()
		got := sess.Restore(tokens[:n])
		if got, err = s.Model.PrefixRestore(caches, tokens[:n], got); err != nil {
			return nil, err
		}
		if got != n || sess.Stats.RAMHits > 0 {
			return nil, fmt.Errorf("quality: side %q: restored %d of %d positions from %s (%d blocks from disk, %d from RAM)",
				s.Name, got, n, dir, sess.Stats.DiskHits, sess.Stats.RAMHits)
		}
		return caches, nil
	}
	return out, nil
}
