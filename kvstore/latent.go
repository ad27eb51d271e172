package kvstore

import (
	"fmt"

	"github.com/mlxg/mlxg/internal/quant"
)

// Multi-head latent attention (DeepSeek-V2/V3's MLA, GLM-4.7-Flash) caches, per token, the
// compressed latent c (kv_lora_rank values) and the one rotary key k_r that every head
// shares (qk_rope_head_dim values), never per-head keys and values. A latent layer is an
// ordinary cache of one KV head whose keys are k_r and whose values are c (LayerLatent:
// KHeadDim qk_rope_head_dim, VHeadDim kv_lora_rank), so the layouts, the paged blocks and
// the prefix tiers store it as they store any other layer; only attention differs. With
// kv_b_proj's key half absorbed into the query (q_c = W_ukᵀ·q_nope per head), a head's
// score over position j is q_r·k_r,j + q_c·c_j, and its output Σ p_j·c_j stays in the
// latent space (the caller applies kv_b_proj's value half). Attention.QV carries q_c.

// latentRows is the query rows of one work item of attendLatent: a tile is widened once
// for that many rows of every head of the item.
const latentRows = 16

// attendLatent is Attend for a call with QV set: causal attention of query row i over
// positions 0..length-N+i of t, scored by Q·k + QV·v. Every (row, head) pair walks the
// positions block by block in order with its own online softmax, whatever the rows and
// heads beside it, so a row's result is the same in a prefill, a batch or alone.
func attendLatent(t tiler, length int, a Attention) error {
	kvHeads, kDim, vDim := t.Dims()
	switch {
	case a.N <= 0 || a.N > length:
		return fmt.Errorf("kvstore: Attend for %d query rows over a cache of %d positions", a.N, length)
	case a.Heads <= 0 || a.Heads%kvHeads != 0:
		return fmt.Errorf("kvstore: %d query heads is not a multiple of the cache's %d KV heads", a.Heads, kvHeads)
	case len(a.Q) != a.N*a.Heads*kDim || len(a.QV) != a.N*a.Heads*vDim || len(a.Out) != a.N*a.Heads*vDim:
		return fmt.Errorf("kvstore: latent Attend needs %d query, %d latent query and %d output floats for %d rows of %d heads, got %d, %d and %d",
			a.N*a.Heads*kDim, a.N*a.Heads*vDim, a.N*a.Heads*vDim, a.N, a.Heads, len(a.Q), len(a.QV), len(a.Out))
	case a.Sinks != nil:
		return fmt.Errorf("kvstore: latent attention with sinks is not supported")
	}
	group := a.Heads / kvHeads
	chunks := (a.N + latentRows - 1) / latentRows
	threads := max(a.Threads, 1)
	// Split a KV head's query heads into parts when rows alone leave threads idle (a
	// decode step): each part widens the tiles itself.
	parts := 1
	if kvHeads*chunks < threads {
		parts = min(group, (threads+kvHeads*chunks-1)/(kvHeads*chunks))
	}
	perPart := (group + parts - 1) / parts
	parts = (group + perPart - 1) / perPart
	parallel(threads, kvHeads*chunks*parts, func(item int) {
		h, c, p := item/(chunks*parts), item/parts%chunks, item%parts
		r0, g0 := c*latentRows, p*perPart
		latentItem(t, a, length, h, group, r0, min(r0+latentRows, a.N), g0, min(g0+perPart, group))
	})
	return nil
}

// latentItem computes rows r0..r1-1 of query heads g0..g1-1 of KV head h's group.
func latentItem(t tiler, a Attention, length, h, group, r0, r1, g0, g1 int) {
	_, kDim, vDim := t.Dims()
	s := scratchPool.Get().(*scratch)
	defer scratchPool.Put(s)
	pairs := (r1 - r0) * (g1 - g0)
	st := state{m: s.grow(&s.m, pairs), l: s.grow(&s.l, pairs), acc: s.grow(&s.acc, pairs*vDim)}
	st.reset()
	kt, vt := s.grow(&s.k, BlockTokens*kDim), s.grow(&s.v, BlockTokens*vDim)
	scores := s.grow(&s.scores, BlockTokens)
	first := length - a.N
	last := first + r1 - 1
	for from := 0; from <= last; from += BlockTokens {
		to := min(from+BlockTokens, last+1)
		t.tile(kt, vt, h, from, to)
		for i := r0; i < r1; i++ {
			end := min(to, first+i+1)
			if end <= from {
				continue
			}
			for g := g0; g < g1; g++ {
				head := h*group + g
				q := a.Q[(i*a.Heads+head)*kDim:][:kDim]
				qv := a.QV[(i*a.Heads+head)*vDim:][:vDim]
				k := (i-r0)*(g1-g0) + g - g0
				sc := scores[:end-from]
				j := 0
				var sk, sv [4]float32
				for ; j+4 <= len(sc); j += 4 { // four positions per pass over q and qv
					quant.DotRows4(&sk, q, kt[j*kDim:], kDim)
					quant.DotRows4(&sv, qv, vt[j*vDim:], vDim)
					for x := range sk {
						sc[j+x] = sk[x] + sv[x]
					}
				}
				for ; j < len(sc); j++ {
					sc[j] = quant.Dot(q, kt[j*kDim:(j+1)*kDim]) + quant.Dot(qv, vt[j*vDim:(j+1)*vDim])
				}
				mx := scaleMax(sc, a.Scale, st.m[k])
				st.raise(k, mx, vDim)
				st.l[k] += expSum(sc, mx)
				o := st.acc[k*vDim : (k+1)*vDim]
				j = 0
				for ; j+4 <= len(sc); j += 4 { // four values per pass over o
					quant.AxpyRows4(o, vt[j*vDim:], vDim, (*[4]float32)(sc[j:j+4]))
				}
				for ; j < len(sc); j++ {
					quant.Axpy(o, vt[j*vDim:(j+1)*vDim], sc[j])
				}
			}
		}
	}
	for i := r0; i < r1; i++ {
		for g := g0; g < g1; g++ {
			k := (i-r0)*(g1-g0) + g - g0
			out := a.Out[(i*a.Heads+h*group+g)*vDim:][:vDim]
			inv := 1 / st.l[k]
			for d, x := range st.acc[k*vDim : (k+1)*vDim] {
				out[d] = x * inv
			}
		}
	}
}
