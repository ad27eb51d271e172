package metal

import (
	"runtime"
	"unsafe"

	"github.com/mlxg/mlxg/kvstore"
)

// mirror is the device-side copy of one kvstore.Layer's keys and values, kept in the
// layer's own storage format so that attention reads it in place: fp16, or MLX affine
// codes with fp16 scales and biases (quantized along head_dim, as kvstore packs them).
// Buffers grow by kvstore.BlockTokens positions and are updated with slice_update, so
// a decode step writes one position, not the whole cache.
type mirror struct {
	kvHeads, kDim, vDim int
	n, cap              int
	k, v                side
}

// side is the storage of keys or of values: [1, kvHeads, cap, dim] fp16, or codes
// [1, kvHeads, cap, dim·bits/32] uint32 with scales and biases [1, kvHeads, cap, dim/group].
type side struct {
	f                    kvstore.Format
	data, scales, biases mlxArray
}

func (s *side) arrays() []mlxArray {
	var out []mlxArray
	for _, a := range []mlxArray{s.data, s.scales, s.biases} {
		if a != 0 {
			out = append(out, a)
		}
	}
	return out
}

func (m *mirror) arrays() []mlxArray { return append(m.k.arrays(), m.v.arrays()...) }

// mirrorable reports whether MLX can attend over format f in place.
func mirrorable(f kvstore.Format) bool { return f.Mode == kvstore.F16 || f.Mode == kvstore.Affine }

// layerSpec is the storage a layer uses now: quantized kinds report it, the plain
// kind is fp16.
func layerSpec(l kvstore.Layer) kvstore.Spec {
	if s, ok := l.(interface{ Spec() kvstore.Spec }); ok {
		return s.Spec()
	}
	return kvstore.SpecF16
}

// mirrorFor returns the device cache of layer holding its first expected positions,
// made or brought in line, or nil when none can be: the layer then attends in Go.
func (b *Backend) mirrorFor(g *graph, layer kvstore.Layer, expected int) *mirror {
	switch layer.(type) {
	case *kvstore.Full, *kvstore.Quantized:
	default:
		return nil // sliding windows and kinds added later attend in Go, which is always right
	}
	key := layerKey(layer)
	kvHeads, kDim, vDim := layer.Dims()
	spec := layerSpec(layer)
	b.mu.Lock()
	m := b.mirrors[key]
	b.mu.Unlock()
	if m != nil && (m.kvHeads != kvHeads || m.kDim != kDim || m.vDim != vDim || m.n < expected) {
		// Another layer now lives at this address, or the layer holds positions this
		// backend never saw (a restored prefix): they cannot be read back from it.
		b.dropMirror(key, m, true)
		m = nil
	}
	if m == nil {
		if expected != 0 || !mirrorable(spec.K) || !mirrorable(spec.V) {
			return nil
		}
		m = &mirror{kvHeads: kvHeads, kDim: kDim, vDim: vDim, k: side{f: spec.K}, v: side{f: spec.V}}
		b.mu.Lock()
		b.mirrors[key] = m
		b.mu.Unlock()
		// Free the device copy when the layer is garbage: the map holds only its address.
		type iface struct{ typ, data unsafe.Pointer }
		ptr := (*byte)((*iface)(unsafe.Pointer(&layer)).data)
		runtime.AddCleanup(ptr, func(m *mirror) { b.dropMirror(key, m, false) }, m)
	}
	m.n = min(m.n, expected) // the layer was truncated
	if m.k.f != spec.K || m.v.f != spec.V {
		if !m.convert(g, spec) {
			b.dropMirror(key, m, true)
			return nil
		}
	}
	return m
}

// dropMirror forgets m and frees its arrays; onWorker says whether the caller is
// already on the worker thread.
func (b *Backend) dropMirror(key uintptr, m *mirror, onWorker bool) {
	b.mu.Lock()
	if b.closed || b.mirrors[key] != m {
		b.mu.Unlock()
		return
	}
	delete(b.mirrors, key)
	b.mu.Unlock()
	free := func() error {
		for _, a := range m.arrays() {
			b.lib.arrayFree(a)
		}
		return nil
	}
	if onWorker {
		free()
		return
	}
	go b.do(free)
}

// grow makes room for n positions in every buffer, copying what is stored.
func (m *mirror) grow(g *graph, n int) {
	if n <= m.cap {
		return
	}
	newCap := (n + kvstore.BlockTokens - 1) / kvstore.BlockTokens * kvstore.BlockTokens
	for _, s := range []*side{&m.k, &m.v} {
		for _, a := range []*mlxArray{&s.data, &s.scales, &s.biases} {
			if *a == 0 {
				continue
			}
			shape := g.shape(*a)
			stop := append([]int(nil), shape...)
			shape[2] = newCap
			zero := g.broadcastTo(g.astype(g.scalar(0), g.l.arrayDtype(*a)), shape...)
			*a = m.replace(g, *a, g.sliceUpdate(zero, *a, []int{0, 0, 0, 0}, stop))
		}
	}
	m.cap = newCap
}

// replace keeps next as the mirror's array in place of prev. prev's handle is freed at
// once, so that at evaluation the graph holds the only reference to its buffer and
// slice_update may write into it in place.
func (m *mirror) replace(g *graph, prev, next mlxArray) mlxArray {
	if next == 0 {
		return prev
	}
	g.keep(next)
	g.l.arrayFree(prev)
	return next
}

// write stores x ([1, kvHeads, T, dim], float32 as computed) at positions m.n.. of s,
// rounding to fp16 or quantizing from the float32 values, as kvstore does.
func (m *mirror) write(g *graph, s *side, x mlxArray, T, dim int) {
	at := func(buf, upd mlxArray) mlxArray {
		shape := g.shape(buf)
		return g.sliceUpdate(buf, upd, []int{0, 0, m.n, 0}, []int{1, m.kvHeads, m.n + T, shape[3]})
	}
	if s.f.Mode == kvstore.F16 {
		if s.data == 0 {
			s.data = g.keep(g.broadcastTo(g.astype(g.scalar(0), dtFloat16), 1, m.kvHeads, m.cap, dim))
		}
		s.data = m.replace(g, s.data, at(s.data, g.astype(x, dtFloat16)))
		return
	}
	codes, scales, biases := g.quantize(x, s.f.Group, s.f.Bits)
	if s.data == 0 {
		s.data = g.keep(g.broadcastTo(g.astype(g.scalar(0), dtUint32), 1, m.kvHeads, m.cap, dim*s.f.Bits/32))
		s.scales = g.keep(g.broadcastTo(g.astype(g.scalar(0), dtFloat16), 1, m.kvHeads, m.cap, dim/s.f.Group))
		s.biases = g.keep(g.broadcastTo(g.astype(g.scalar(0), dtFloat16), 1, m.kvHeads, m.cap, dim/s.f.Group))
	}
	s.data = m.replace(g, s.data, at(s.data, codes))
	s.scales = m.replace(g, s.scales, at(s.scales, g.astype(scales, dtFloat16)))
	s.biases = m.replace(g, s.biases, at(s.biases, g.astype(biases, dtFloat16)))
}

// append stores a step's keys and values ([1, kvHeads, T, dim] float32).
func (m *mirror) append(g *graph, k, v mlxArray, T int) {
	m.grow(g, m.n+T)
	m.write(g, &m.k, k, T, m.kDim)
	m.write(g, &m.v, v, T, m.vDim)
	if g.err == nil {
		m.n += T
	}
}

// convert re-stores the mirror in spec (a layer switches from fp16 to its quantized
// spec at quantized_kv_start). Only fp16 sides can be re-encoded.
func (m *mirror) convert(g *graph, spec kvstore.Spec) bool {
	for _, c := range []struct {
		s   *side
		f   kvstore.Format
		dim int
	}{{&m.k, spec.K, m.kDim}, {&m.v, spec.V, m.vDim}} {
		if c.s.f == c.f {
			continue
		}
		if c.s.f.Mode != kvstore.F16 || !mirrorable(c.f) {
			return false
		}
		old := c.s.data
		*c.s = side{f: c.f}
		if old == 0 {
			continue
		}
		n := m.n
		stored := g.slice(old, []int{0, 0, 0, 0}, []int{1, m.kvHeads, n, c.dim})
		m.n = 0
		m.write(g, c.s, stored, n, c.dim)
		m.n = n
		g.own(old)
	}
	return g.err == nil
}

// view is positions 0..n-1 of a buffer.
func (m *mirror) view(g *graph, a mlxArray, n int) mlxArray {
	shape := g.shape(a)
	return g.slice(a, []int{0, 0, 0, 0}, []int{1, m.kvHeads, n, shape[3]})
}

// attend is causal grouped-query attention of q4 ([1, heads, T, kDim] fp16, the last T
// of m.n positions) over the mirror: [1, heads, T, vDim]. An fp16 cache goes through
// MLX's fused kernel; a quantized one through quantized_matmul on its codes, so the
// cache is never dequantized as a whole.
func (m *mirror) attend(g *graph, q4 mlxArray, heads int, scale float32, T int) mlxArray {
	n := m.n
	if m.k.f.Mode == kvstore.F16 && m.v.f.Mode == kvstore.F16 {
		return g.sdpa(q4, m.view(g, m.k.data, n), m.view(g, m.v.data, n), scale, T > 1)
	}
	rep := heads / m.kvHeads
	q5 := g.reshape(g.mul(q4, g.astype(g.scalar(scale), dtFloat16)), 1, m.kvHeads, rep, T, m.kDim)
	// Each cache array gains a broadcast axis for the query heads sharing a KV head.
	sub := func(a mlxArray) mlxArray { return g.expandDims(m.view(g, a, n), 2) }
	var scores mlxArray
	if m.k.f.Mode == kvstore.Affine {
		scores = g.qmm(q5, sub(m.k.data), sub(m.k.scales), sub(m.k.biases), true, m.k.f.Group, m.k.f.Bits, "affine")
	} else {
		scores = g.matmul(q5, g.transpose(sub(m.k.data), 0, 1, 2, 4, 3))
	}
	scores = g.astype(scores, dtFloat32) // [1, kvHeads, rep, T, n]
	if T > 1 {
		qpos := g.reshape(g.arange(n-T, n), T, 1)
		kpos := g.reshape(g.arange(0, n), 1, n)
		scores = g.where(g.greater(kpos, qpos), g.scalar(negInf), scores)
	}
	probs := g.astype(g.softmax(scores, -1), dtFloat16)
	var out mlxArray
	if m.v.f.Mode == kvstore.Affine {
		out = g.qmm(probs, sub(m.v.data), sub(m.v.scales), sub(m.v.biases), false, m.v.f.Group, m.v.f.Bits, "affine")
	} else {
		out = g.matmul(probs, sub(m.v.data))
	}
	return g.reshape(out, 1, heads, T, m.vDim)
}
