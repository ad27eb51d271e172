package model

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/mlxg/mlxg/kvstore"
	"github.com/mlxg/mlxg/runner/compute"
)

// Unwrap returns the backend's own context, so that compute.Ext finds the optional
// operations (mixture of experts, linear attention) it implements.
func (c *cancellable) Unwrap() compute.Context { return c.Context }

// AttentionSinks stops a pass once ctx is done, as Attention does.
func (c *cancellable) AttentionSinks(q, k, v compute.Tensor, cache kvstore.Layer, heads int, scale float32, sinks compute.Vector) compute.Tensor {
	if c.ctx.Err() != nil {
		return stopped{}
	}
	sc, ok := compute.Ext[compute.SinkAttentionContext](c.Context)
	if !ok {
		return compute.Unsupported(c.Context, "attention sinks")
	}
	return sc.AttentionSinks(q, k, v, cache, heads, scale, sinks)
}

// LatentAttention stops a pass once ctx is done, as Attention does.
func (c *cancellable) LatentAttention(qRope, qLatent, kRope, latent compute.Tensor, cache kvstore.Layer, heads int, scale float32) compute.Tensor {
	if c.ctx.Err() != nil {
		return stopped{}
	}
	lc, ok := compute.Ext[compute.LatentAttentionContext](c.Context)
	if !ok {
		return compute.Unsupported(c.Context, "latent attention")
	}
	return lc.LatentAttention(qRope, qLatent, kRope, latent, cache, heads, scale)
}

// MultiLinear is the backend's (compute.LatentAttentionContext, which cancellable
// implements for LatentAttention's sake).
func (c *cancellable) MultiLinear(x compute.Tensor, w compute.Weight, heads int) compute.Tensor {
	lc, ok := compute.Ext[compute.LatentAttentionContext](c.Context)
	if !ok {
		return compute.Unsupported(c.Context, "latent attention")
	}
	return lc.MultiLinear(x, w, heads)
}

// AttentionShared stops a pass once ctx is done, as Attention does.
func (c *cancellable) AttentionShared(q compute.Tensor, cache kvstore.Layer, heads int, scale float32, spans []kvstore.Span) compute.Tensor {
	if c.ctx.Err() != nil {
		return stopped{}
	}
	sc, ok := compute.Ext[compute.SharedKVContext](c.Context)
	if !ok {
		return compute.Unsupported(c.Context, "attention over another layer's KV")
	}
	return sc.AttentionShared(q, cache, heads, scale, spans)
}

// CacheMaker is implemented by networks whose layers need caches of their own kinds
// (sliding-window layers, the recurrent state of linear-attention layers); NewCaches
// asks them instead of making a full-attention cache per layer.
type CacheMaker interface {
	NewCaches(fp32 bool) ([]kvstore.Layer, error)
}

// Network returns the built architecture, for tests and tools that inspect it (the
// expert routing of a mixture-of-experts layer, say).
func (m *Model) Network() Network { return m.net }

// FillCaches gives the layers that have no cache (kvstore.NewCaches leaves nil where a
// layer keeps no keys and values: a hybrid model's linear-attention layers) the
// network's own cache for them, in place, so that the caches the KV policy makes work
// for hybrid models. Forward calls it; a caller that hands the caches to the prefix
// cache calls it first and passes Seq(caches), so the recurrent states are carried.
func (m *Model) FillCaches(caches []kvstore.Layer) error {
	if err := m.fillCaches(caches); err != nil {
		return err
	}
	return m.linkShared(caches)
}

// KVSharer is implemented by networks some of whose layers attend over another layer's
// keys and values (Gemma 4's last layers): KVSource is the layer whose cache layer i
// reads, i itself for a layer with its own.
type KVSharer interface {
	KVSource(layer int) int
}

// linkShared makes the cache of each layer that reads another's a kvstore.Shared of that
// layer's cache in the same list (the KV policy plans none for it, and a list the prefix
// cache restored holds the sources' new caches).
func (m *Model) linkShared(caches []kvstore.Layer) error {
	ks, ok := m.net.(KVSharer)
	if !ok || m.exec != nil {
		return nil
	}
	for i := range caches {
		src := ks.KVSource(i)
		if src == i {
			continue
		}
		if sh, ok := caches[i].(*kvstore.Shared); ok && sh.Source() == caches[src] {
			continue
		}
		sh, err := kvstore.NewShared(caches[src])
		if err != nil {
			return fmt.Errorf("model: layer %d reads layer %d's KV: %w", i, src, err)
		}
		caches[i] = sh
	}
	return nil
}

func (m *Model) fillCaches(caches []kvstore.Layer) error {
	if !slices.Contains(caches, nil) {
		return nil
	}
	// A part of a split model has no caches for the layers other processes run (its
	// memory policy plans none there), whatever the architecture: its Executor's
	// FillLayer decides what they keep.
	if _, ok := m.net.(CacheMaker); !ok && m.exec == nil {
		return fmt.Errorf("model: layer %d has no cache, and %s makes none of its own", slices.Index(caches, nil), m.Config.ModelType)
	}
	own, err := m.NewCaches(false)
	if err != nil {
		return err
	}
	for i, c := range caches {
		if c == nil {
			caches[i] = own[i]
			if m.exec != nil {
				caches[i] = m.exec.FillLayer(caches, i)
			}
		}
	}
	return nil
}

// PrepareCaches fills the caches (FillCaches) and checks that every layer holds the
// same positions, as Forward does before a pass.
func (m *Model) PrepareCaches(caches []kvstore.Layer) error {
	if err := m.FillCaches(caches); err != nil {
		return err
	}
	for i, c := range caches {
		if c.Len() != caches[0].Len() {
			return fmt.Errorf("model: the layer caches are out of step: layer 0 holds %d positions, layer %d holds %d (were some restored without the others, such as a prefix-cache hit that did not carry a hybrid model's recurrent states?)",
				caches[0].Len(), i, c.Len())
		}
	}
	return nil
}

// RecurrentLayer is the cache of a linear-attention layer (qwen3next.State): a
// recurrent state carried in the per-layer cache list.
type RecurrentLayer interface {
	kvstore.Layer
	RecurrentState() *kvstore.Recurrent
}

// PrefixSeq is Seq for m: for a part of a split model, only its own layers (each
// process keeps its own layers' blocks in its own prefix cache).
func (m *Model) PrefixSeq(caches []kvstore.Layer) kvstore.Seq {
	if m.exec != nil {
		return m.exec.PrefixSeq(caches)
	}
	return Seq(caches)
}

// Seq presents one sequence's caches as the prefix cache sees them: the attention
// caches by layer, nil for linear-attention layers, whose recurrent states follow in
// layer order, and nil for layers that read another layer's KV (kvstore.Shared).
func Seq(caches []kvstore.Layer) kvstore.Seq {
	s := kvstore.Seq{Layers: make([]kvstore.Layer, len(caches))}
	for i, c := range caches {
		if r, ok := c.(RecurrentLayer); ok {
			s.Recurrent = append(s.Recurrent, r.RecurrentState())
			continue
		}
		if _, ok := c.(*kvstore.Shared); ok {
			continue // its source's blocks hold its positions
		}
		s.Layers[i] = c
	}
	return s
}

// textConfig reads a multimodal checkpoint's config.json (Qwen3.5/3.6, Gemma 3 4B and
// up) as its language model's: text_config's fields, with the top level's model_type,
// architectures and quantization blocks (and any key text_config lacks) on top.
func textConfig(raw map[string]json.RawMessage) ([]byte, map[string]json.RawMessage, error) {
	var text map[string]json.RawMessage
	if err := json.Unmarshal(raw["text_config"], &text); err != nil {
		return nil, nil, fmt.Errorf("text_config: want an object: %w", err)
	}
	for k, v := range raw {
		_, has := text[k]
		switch {
		case k == "text_config":
		case !has, k == "model_type", k == "architectures", k == "quantization", k == "quantization_config":
			text[k] = v
		}
	}
	data, err := json.Marshal(text)
	return data, text, err
}
