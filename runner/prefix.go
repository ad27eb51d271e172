package runner

import (
	"log/slog"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/model"
)

// The engine's use of the prefix cache (kvstore.PrefixCache, LoadOptions.Prefix): a
// request restores the longest cached prefix of its prompt into its fresh caches, by
// reference and without copying, prefills only the rest, and saves its blocks for later
// requests: after the prompt, and again when generation ends (the end of the turn).

// prefixEngine is the engine's prefix cache and the checkpoint's identity for model keys.
type prefixEngine struct {
	cache    *kvstore.PrefixCache
	identity string
	log      *slog.Logger
}

// newPrefixEngine identifies the checkpoint in dir; nil (no prefix caching) without a
// cache or when the checkpoint cannot be identified.
func newPrefixEngine(c *kvstore.PrefixCache, dir string, log *slog.Logger) *prefixEngine {
	if c == nil {
		return nil
	}
	id, err := kvstore.CheckpointIdentity(dir)
	if err != nil {
		log.Warn("prefix cache off for this model: its weights cannot be identified", "dir", dir, "error", err)
		return nil
	}
	return &prefixEngine{cache: c, identity: id, log: log}
}

// prefixRun is one request's session; nil when the engine has no prefix cache or the
// caches cannot be shared (a float32 reference cache).
type prefixRun struct {
	sess   *kvstore.Session
	caches []kvstore.Layer
	res    *Result
	m      *model.Model // a pipeline stage's workers follow its restores, saves and end
	// restored, when set, is told how many prompt tokens came from the cache (coalesce.go).
	restored func(n int)
}

func (e *Engine) prefixBegin(caches []kvstore.Layer, res *Result) *prefixRun {
	p := e.prefix
	if p == nil {
		return nil
	}
	// A hybrid model's linear-attention layers get their recurrent states now, so that
	// the prefix cache saves and restores them with the attention blocks.
	if err := e.Model.FillCaches(caches); err != nil {
		p.log.Debug("prefix cache off for this request", "error", err)
		return nil
	}
	seq := e.Model.PrefixSeq(caches) // a pipeline stage's own layers: each rank keeps its own
	key, err := kvstore.NewModelKey(p.identity, seq)
	if err != nil {
		p.log.Debug("prefix cache off for this request", "error", err)
		return nil
	}
	res.Prefix = &kvstore.RequestStats{}
	return &prefixRun{sess: p.cache.Begin(key, seq), caches: caches, res: res, m: e.Model}
}

// prefill restores what it can of prompt minus its last token, prefills the rest of it
// with run, saves those blocks (the prompt's end is where the next turn will resume),
// then runs the last token for the logits. A cold request takes the same steps, so a
// hit and a cold run compute the same positions in the same batches.
func (p *prefixRun) prefill(prompt []int32, run func([]int32) ([]float32, error)) ([]float32, error) {
	if p == nil {
		return run(prompt)
	}
	head := prompt[:len(prompt)-1]
	n := p.sess.Restore(head)
	n, err := p.m.PrefixRestore(p.caches, head, n)
	if err != nil {
		return nil, err
	}
	if p.restored != nil {
		p.restored(n)
	}
	if n < len(head) {
		if _, err := run(head[n:]); err != nil {
			return nil, err
		}
	}
	p.sess.Save(head)
	p.m.PrefixSave(p.caches, head)
	p.sess.Stats.Prefilled = len(prompt) - n
	*p.res.Prefix = p.sess.Stats
	return run(prompt[len(prompt)-1:])
}

// finish saves the blocks of seq, what caches hold at the end of generation (skipped
// when a context shift replaced the caches), releases the session's blocks and queues
// the new ones for the SSD tier's background writer.
func (p *prefixRun) finish(seq []int32, caches []kvstore.Layer) {
	if p == nil {
		return
	}
	if len(caches) > 0 && len(p.caches) > 0 && &caches[0] == &p.caches[0] && caches[0] != nil && caches[0].Len() == len(seq) {
		p.sess.Save(seq)
		p.m.PrefixSave(caches, seq)
	}
	p.end()
}

// end releases the session; safe to call twice.
func (p *prefixRun) end() {
	if p == nil || p.sess == nil {
		return
	}
	p.sess.End()
	p.m.PrefixEnd(p.caches)
	p.sess.Stats.Prefilled = p.res.Prefix.Prefilled
	*p.res.Prefix = p.sess.Stats
	p.sess = nil
}
