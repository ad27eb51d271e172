package metal

import (
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"github.com/mlxg/mlxg/kvstore"
)

// Attention reads the KV cache where kvstore keeps it: each block of a full-attention
// layer (kvstore.BlockSource) is handed to MLX as it lies in memory (on a Mac's unified
// memory without a copy, the blocks being page-aligned there; MLX's CPU backend copies
// what it is given for the step), so the cache lives once. Scores are computed block by
// block (quantized_matmul on the codes of affine and q4_0 blocks, never a dequantized
// copy of the cache), joined for one softmax, and the values summed block by block.
//
// A step's own keys and values are not in the layer yet: they are stored after the
// step's single evaluation. Attention reads them from the device, rounded to the
// layer's format as kvstore will store them. Where that rounding cannot be matched (a
// q4_0 layer) or the layer is about to change format (at quantized_kv_start), the step
// is evaluated up to this layer, its keys and values appended, and the attention reads
// the blocks alone. A sliding window's ring is read the same way, as the one or two
// runs of slots its positions occupy, with the window in the mask.

// roundable reports whether the device rounds a step's keys or values to f exactly as
// kvstore stores them.
func roundable(f kvstore.Format) bool { return f.Mode == kvstore.F16 || f.Mode == kvstore.Affine }

// readable reports whether MLX reads blocks stored in f: affine groups of 16 are
// kvstore's own (MLX quantizes in groups of 32, 64 and 128), so a layer that stores
// them attends in Go, through kvstore's kernels.
func readable(f kvstore.Format) bool { return f.Mode != kvstore.Affine || f.Group >= 32 }

// A rotated layer (kvstore.Format.Rotated) stores H·k and H·v, H the normalized
// Walsh–Hadamard transform: the scaled queries are rotated (q·k = Hq·Hk), a step's own
// keys and values are rotated before they are rounded, and the output over rotated
// values is rotated back (H is its own inverse), all by MLX's hadamard_transform on the
// last axis.

// storedAttention is one layer's attention, with the query rows' positions last.
type storedAttention struct {
	g                   *graph
	kvHeads, kDim, vDim int
	heads, T            int
	dt                  mlxDtype // fp16; float32 for a float32 cache, and on MLX's CPU (Backend.wide)
	fp32                bool     // the cache stores float32 (kvstore.Full's exact reference)
	window              int      // a sliding window's size; 0 for full attention
	// sinks, when set, is one logit per query head (float32 [heads], gpt-oss) that joins
	// each softmax's denominator and is dropped from its output.
	sinks mlxArray
	// qv, when set, makes this multi-head latent attention: latent queries (float32,
	// T × heads·vDim) that score the values, each score being q·k + qv·v (kvstore's
	// Attention.QV).
	qv mlxArray
	// spans, when set, are absolute positions whose rows also see the later rows of their
	// span (kvstore.Attention.Bidirectional; the mask's bounds come from spanView).
	spans []kvstore.Span
}

// wrap makes an array of n elements of dt over Go memory at p (cp elements of
// capacity): a page-aligned region of whole pages (kvstore aligns its blocks so on
// macOS) is wrapped in full, which Metal maps without copying.
func (s *storedAttention) wrap(p unsafe.Pointer, n, cp int, dt mlxDtype, size int) mlxArray {
	region := n
	if uintptr(p)%kvstore.PageSize == 0 && cp*size%kvstore.PageSize == 0 {
		region = cp
	}
	return s.g.wrap(p, region, 0, n, dt)
}

// positions views a run of a buffer of slots positions (kvHeads × width each) as
// [kvHeads, 1, P, width]: slots slot..slot+P-1, with a broadcast axis for the query
// heads sharing a KV head.
func (s *storedAttention) positions(a mlxArray, slots, slot, P, width int) mlxArray {
	g := s.g
	a = g.reshape(a, slots, s.kvHeads, width)
	a = g.slice(a, []int{slot, 0, 0}, []int{slot + P, s.kvHeads, width})
	return g.expandDims(g.transpose(a, 1, 0, 2), 1)
}

// side is one block's keys or values as MLX arrays: float data, or codes with scales
// and biases.
type side struct {
	f                    kvstore.Format
	data, scales, biases mlxArray
}

// stored wraps a run's keys or values (dim elements a head).
func (s *storedAttention) stored(b kvstore.StoredBlock, d kvstore.BlockData, dim int) side {
	g := s.g
	rows := b.Slots * s.kvHeads
	at := func(a mlxArray, width int) mlxArray { return s.positions(a, b.Slots, b.Slot, b.Positions, width) }
	switch {
	case d.F32 != nil:
		a := s.wrap(unsafe.Pointer(&d.F32[0]), len(d.F32), cap(d.F32), dtFloat32, 4)
		return side{f: d.Format, data: at(a, dim)}
	case d.Format.Mode == kvstore.F16:
		a := s.wrap(unsafe.Pointer(&d.Halfs[0]), len(d.Halfs), cap(d.Halfs), dtFloat16, 2)
		return side{f: d.Format, data: g.astype(at(a, dim), s.dt)}
	}
	groups := dim / d.Format.Group
	codes := at(s.wrap(unsafe.Pointer(&d.Codes[0]), len(d.Codes), cap(d.Codes), dtUint32, 4), len(d.Codes)/rows)
	halfs := at(s.wrap(unsafe.Pointer(&d.Halfs[0]), len(d.Halfs), cap(d.Halfs), dtFloat16, 2), len(d.Halfs)/rows)
	halfs = g.astype(halfs, s.dt) // scales (and biases) in the product's dtype
	P := b.Positions
	out := side{f: d.Format, data: codes}
	if d.Format.Mode == kvstore.Q4_0 {
		// q4_0 is affine 4-bit in groups of 32 with bias -8·scale: x = d·(code-8).
		out.scales = halfs
		out.biases = g.mul(halfs, g.astype(g.scalar(-8), s.dt))
		return out
	}
	// Affine rows interleave scale and bias per group.
	pairs := g.reshape(halfs, s.kvHeads, 1, P, groups, 2)
	out.scales = g.reshape(g.slice(pairs, []int{0, 0, 0, 0, 0}, []int{s.kvHeads, 1, P, groups, 1}), s.kvHeads, 1, P, groups)
	out.biases = g.reshape(g.slice(pairs, []int{0, 0, 0, 0, 1}, []int{s.kvHeads, 1, P, groups, 2}), s.kvHeads, 1, P, groups)
	return out
}

// fresh is a step's keys or values ([1, kvHeads, T, dim] float32) rounded to f as
// kvstore stores them, as [kvHeads, 1, T, dim] in the compute dtype.
func (s *storedAttention) fresh(x mlxArray, f kvstore.Format, dim int) side {
	g := s.g
	x = g.reshape(x, s.kvHeads, 1, s.T, dim)
	if f.Rotated {
		x = g.hadamard(x, dim)
	}
	switch {
	case f.Mode == kvstore.Affine:
		// kvstore keeps fp16 scales and biases and widens them to float32 to decode;
		// MLX decodes in the scales' dtype, so they are rounded to fp16 and widened.
		codes, scales, biases := g.quantize(x, f.Group, f.Bits)
		half := func(a mlxArray) mlxArray { return g.astype(g.astype(a, dtFloat16), dtFloat32) }
		x = g.dequantize(codes, half(scales), half(biases), f.Group, f.Bits, "affine", dtFloat32)
	case !s.fp32:
		x = g.astype(x, dtFloat16)
	}
	return side{f: kvstore.FormatF16, data: g.astype(x, s.dt)}
}

// scores is q5 ([kvHeads, rep, T, kDim]) against a side's keys: [kvHeads, rep, T, P].
func (s *storedAttention) scores(q5 mlxArray, k side) mlxArray {
	g := s.g
	if k.scales != 0 {
		return g.qmm(q5, k.data, k.scales, k.biases, true, k.f.Group, k.f.Bits, "affine")
	}
	return g.matmul(q5, g.transpose(k.data, 0, 1, 3, 2))
}

// values is probs ([kvHeads, rep, T, P]) times a side's values: [kvHeads, rep, T, vDim].
func (s *storedAttention) values(probs mlxArray, v side) mlxArray {
	g := s.g
	if v.scales != 0 {
		return g.qmm(probs, v.data, v.scales, v.biases, false, v.f.Group, v.f.Bits, "affine")
	}
	return g.matmul(probs, v.data)
}

// attend is causal grouped-query attention of q (T × heads·kDim, float32), with s.sinks
// and s.qv when set, over the
// runs and, when k is not null, the step's keys and values k and v ([1, kvHeads, T,
// dim] float32, at positions n..n+T-1 after the runs' last): the query rows are the
// last T positions. A query sees the positions up to its own, and with s.window > 0
// only the window ending there. Returns T × heads·vDim.
func (s *storedAttention) attend(q mlxArray, scale float32, blocks []kvstore.StoredBlock, k, v mlxArray, spec kvstore.Spec) mlxArray {
	g := s.g
	rep := s.heads / s.kvHeads
	q5 := g.astype(g.mul(heads(g, q, s.T, s.heads, s.kDim), g.scalar(scale)), s.dt)
	q5 = g.reshape(q5, s.kvHeads, rep, s.T, s.kDim)
	if spec.K.Rotated {
		q5 = g.hadamard(q5, s.kDim)
	}
	var qv5 mlxArray // latent queries, [kvHeads, rep, T, vDim] and scaled like q5
	if s.qv != 0 {
		qv5 = g.astype(g.mul(heads(g, s.qv, s.T, s.heads, s.vDim), g.scalar(scale)), s.dt)
		qv5 = g.reshape(qv5, s.kvHeads, rep, s.T, s.vDim)
		if spec.V.Rotated {
			// They score the values, rotated like them (the rotation keeps dot products).
			qv5 = g.hadamard(qv5, s.vDim)
		}
	}
	// The runs hold consecutive positions, first..end-1, in order; the step's follow.
	var ks, vs []side
	var lens []int
	first, end := -1, 0
	for _, b := range blocks {
		if b.Positions <= 0 {
			continue
		}
		if first < 0 {
			first = b.First
		} else if b.First != end {
			return g.fail(fmt.Errorf("metal: a KV run starts at position %d after one ending at %d", b.First, end))
		}
		ks = append(ks, s.stored(b, b.K, s.kDim))
		vs = append(vs, s.stored(b, b.V, s.vDim))
		lens = append(lens, b.Positions)
		end = b.First + b.Positions
	}
	if k != 0 {
		ks = append(ks, s.fresh(k, spec.K, s.kDim))
		vs = append(vs, s.fresh(v, spec.V, s.vDim))
		lens = append(lens, s.T)
		end += s.T
	}
	first = max(first, 0)
	n := end - first
	parts := make([]mlxArray, len(ks))
	for i, kb := range ks {
		parts[i] = g.astype(s.scores(q5, kb), dtFloat32)
		if qv5 != 0 {
			// The latent score: qv against the block's values, read as keys.
			parts[i] = g.add(parts[i], g.astype(s.scores(qv5, vs[i]), dtFloat32))
		}
	}
	if len(parts) == 0 || n < s.T {
		return g.fail(fmt.Errorf("metal: attention of %d queries over %d positions", s.T, n))
	}
	sc := parts[0]
	if len(parts) > 1 {
		sc = g.concat(3, parts...)
	}
	switch {
	case s.spans != nil:
		// Each row's own interval [lo, last] of visible positions, from the host.
		lo, last, err := spanView(end-s.T, s.T, s.window, s.spans)
		if err != nil {
			return g.fail(err)
		}
		if m := int(slices.Min(lo)); m < first {
			return g.fail(fmt.Errorf("metal: a query row needs position %d, but the layer holds %d onwards", m, first))
		}
		kp := g.reshape(g.arange(first, end), 1, n)
		sc = g.where(g.greater(kp, g.fromInt32s(last, s.T, 1)), g.scalar(negInf), sc)
		if int(slices.Max(lo)) > first {
			sc = g.where(g.greater(g.fromInt32s(lo, s.T, 1), kp), g.scalar(negInf), sc)
		}
	case s.T > 1 || s.window > 0:
		qpos := g.reshape(g.arange(end-s.T, end), s.T, 1)
		kp := g.reshape(g.arange(first, end), 1, n)
		sc = g.where(g.greater(kp, qpos), g.scalar(negInf), sc) // a later position
		if s.window > 0 {
			// One the window has left behind: k < q - (window-1).
			oldest := g.reshape(g.arange(end-s.T-(s.window-1), end-(s.window-1)), s.T, 1)
			sc = g.where(g.greater(oldest, kp), g.scalar(negInf), sc)
		}
	}
	var probs mlxArray
	if s.sinks != 0 {
		// Each head's sink logit as one more column of its scores ([kvHeads, rep, T, 1]),
		// its share of the softmax dropped after.
		sink := g.broadcastTo(g.reshape(s.sinks, s.kvHeads, rep, 1, 1), s.kvHeads, rep, s.T, 1)
		probs = g.softmax(g.concat(3, sc, sink), -1)
		probs = g.slice(probs, []int{0, 0, 0, 0}, []int{s.kvHeads, rep, s.T, n})
	} else {
		probs = g.softmax(sc, -1)
	}
	probs = g.astype(probs, s.dt)
	var out mlxArray
	off := 0
	for i, vb := range vs {
		p := g.slice(probs, []int{0, 0, 0, off}, []int{s.kvHeads, rep, s.T, off + lens[i]})
		o := g.astype(s.values(p, vb), dtFloat32)
		if out == 0 {
			out = o
		} else {
			out = g.add(out, o)
		}
		off += lens[i]
	}
	if spec.V.Rotated {
		out = g.hadamard(out, s.vDim)
	}
	runtime.KeepAlive(blocks)
	return rows(g, g.reshape(out, 1, s.heads, s.T, s.vDim), s.T, s.heads, s.vDim)
}
