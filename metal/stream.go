package metal

import (
	"fmt"
	"strings"
	"unsafe"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/residency"
)

// Streamed experts on MLX. With a compute.StreamSource, a mixture-of-experts layer's
// stacked expert matrices ([experts, out, in], affine-quantized) are not handed to MLX
// when they are bound: each expert becomes one unit of the source's residency manager
// (its rows of the gate, up and down stacks with their scales and biases, as the CPU
// backend makes them), and the layer gets expert slots instead: device arrays of
// the same layout holding a few experts ([slots, out, in] codes, scales, biases per
// matrix), their number from the weight budget. Biases beside a stack ([experts, out],
// gpt-oss) are small and bound whole; each pick adds its expert's row. Stacks in the
// scale-only float modes (gpt-oss's mxfp4 experts) stream the same way with two parts
// per matrix, codes and scales: a unit holds 2·3 segments instead of 3·3, and the
// slots' biases are null, as the mapped stack's are.
//
// A streamed MoE evaluates the graph up to its router's top-k and brings the picks to
// the host (one synchronisation per layer and pass); the picked experts in slots are
// hits; the others are read through the manager (its pread workers and buffers),
// copied into free slots or into the slots of the experts the manager's policy would
// evict first (never one this layer uses now), and the picks are remapped to slot
// indices for gather_qmm over the slots. The bytes multiplied are the file's, by the
// kernel the mapped model uses. A layer whose picks outnumber its slots (a prompt's
// pass) multiplies over a stack made for that pass alone, of its slots' experts and
// the ones read.
//
// The slots' bytes are pinned in the manager, so its own buffers hold only the reads
// in flight and what they read ahead; the slot count follows the manager's budget
// (it is recomputed when the budget changes, and a layer's slots are resized on its
// next use). Slot state lives on the backend's worker thread, where MoE builds run.

// streamed is a stacked expert matrix whose experts live in units.
type streamed struct {
	group *expertGroup
	pos   int // this matrix's place in the group: segments parts·pos + j of a unit
	rows  int // rows per expert
	// per part (codes, scales, biases; the first two in the float modes): columns per
	// row and the file's dtype
	cols [3]int
	dts  [3]mlxDtype
	segs [3]residency.Segment
}

// expertGroup is one layer's three expert stacks, their units and their slots.
type expertGroup struct {
	st      *streamState
	experts int
	members []*weight
	units   []int // per expert; nil until the three stacks are bound
	parts   int   // per matrix: 3 (codes, scales, biases) when affine, 2 in the float modes

	// The slots, touched on the worker only.
	slots  int
	arrs   [][3]mlxArray // per member: codes, scales, biases (null in the float modes), [slots, rows, cols]
	slotOf []int         // expert → slot, -1 when not in one
	held   []int         // slot → expert, -1 when free
	bytes  int64         // the arrays' bytes, pinned in the manager

	next      *expertGroup // the group whose MoE followed this one's last time
	lastPicks []int        // the experts the last token picked here
}

// streamState is a manager's groups (per model) and the slot sizing.
type streamState struct {
	mgr    *residency.Manager
	groups map[string]*expertGroup
	prev   *expertGroup // on the worker

	budget   int64 // the manager's budget the slot count was computed for
	base     int64 // the pinned bytes that are not slots, when it was
	perLayer int   // slots per layer for that budget (before the top-k floor)
	pinned   int64 // slot bytes pinned, every group
}

func (b *Backend) streamFor(m *residency.Manager) *streamState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.streams == nil {
		b.streams = map[*residency.Manager]*streamState{}
	}
	st := b.streams[m]
	if st == nil {
		st = &streamState{mgr: m, groups: map[string]*expertGroup{}, budget: -1}
		b.streams[m] = st
	}
	return st
}

// ForgetStream frees the slots of m's model (the model was closed).
func (b *Backend) ForgetStream(m *residency.Manager) {
	b.mu.Lock()
	st := b.streams[m]
	delete(b.streams, m)
	b.mu.Unlock()
	if st != nil {
		b.do(func() error { st.free(b.lib); return nil })
	}
}

// free releases every group's slot arrays (on the worker).
func (st *streamState) free(l *Lib) {
	for _, g := range st.groups {
		for _, a := range g.arrs {
			for _, x := range a {
				if x != 0 {
					l.arrayFree(x)
				}
			}
		}
		g.arrs, g.slots = nil, 0
	}
}

// bindStream makes w, about to be bound from tensor t (with scales and biases) of
// src, a streamed expert stack when src streams and w is one; it reports whether it
// did, in which case w has no arrays.
func (b *Backend) bindStream(src compute.Source, t, scales, biases, bias *safetensors.Tensor, w *weight) (bool, error) {
	ss, ok := src.(compute.StreamSource)
	if !ok || ss.Residency() == nil || len(t.Shape) != 3 || t.Shape[0] < 2 || !w.q.Quantized() || residency.PerHeadStack(w.name) ||
		scales == nil || len(scales.Shape) != 3 {
		return false, nil
	}
	// Affine stacks have three parts; the scale-only float modes (mxfp4) two.
	files := []*safetensors.Tensor{t, scales}
	if w.q.Mode == quant.Affine {
		if biases == nil || len(biases.Shape) != 3 {
			return false, nil
		}
		files = append(files, biases)
	} else if biases != nil {
		return false, nil
	}
	experts := t.Shape[0]
	if w.out%experts != 0 {
		return false, nil
	}
	for _, ft := range files[1:] {
		if ft.Shape[0] != experts {
			return false, nil
		}
	}
	s := &streamed{rows: w.out / experts}
	for i, ft := range files {
		p, off, ok := ss.Locate(ft.Name)
		dt, known := dtypes[ft.DType]
		if !ok || !known || ft.Shape[1] != s.rows {
			return false, nil
		}
		s.segs[i] = residency.Segment{Path: p, Off: off, Len: int64(len(ft.Data))}
		s.cols[i], s.dts[i] = ft.Shape[2], dt
	}
	if bias != nil {
		// The experts' biases ([experts, rows], gpt-oss) are small: bound whole, not
		// streamed, and each pick adds its expert's row (addExpertBias).
		err := b.graph(func(g *graph) error {
			w.bias = g.reshape(g.astype(b.tensor(g, bias, mapped(src)), dtFloat32), w.out)
			b.bind(g, w.bias)
			return nil
		})
		if err != nil {
			return false, err
		}
	}
	prefix := w.name
	if i := strings.LastIndexByte(prefix, '.'); i >= 0 {
		prefix = prefix[:i]
	}
	st := b.streamFor(ss.Residency())
	b.mu.Lock()
	defer b.mu.Unlock()
	g := st.groups[prefix]
	if g == nil {
		g = &expertGroup{st: st, experts: experts, parts: len(files)}
		st.groups[prefix] = g
	}
	if g.experts != experts || len(g.members) >= 3 || g.parts != len(files) {
		return false, fmt.Errorf("layer %q: %d experts in %d parts, or more than three stacks, beside %d experts in %d parts under %q", w.name, experts, len(files), g.experts, g.parts, prefix)
	}
	s.group, s.pos = g, len(g.members)
	w.stream = s
	g.members = append(g.members, w)
	if len(g.members) < 3 {
		return true, nil
	}
	units := make([]int, experts)
	for e := range experts {
		var segs []residency.Segment
		for _, m := range g.members {
			for _, all := range m.stream.segs[:g.parts] {
				segs = append(segs, all.Part(e, experts))
			}
		}
		id, err := st.mgr.Add(segs)
		if err != nil {
			return false, err
		}
		units[e] = id
	}
	g.units = units
	return true, nil
}

// streamGroup returns the group of a MoE's three weights when they are streamed
// together, else nil.
func streamGroup(g, u, d *weight) *expertGroup {
	if g.stream == nil || u.stream == nil || d.stream == nil {
		return nil
	}
	grp := g.stream.group
	if u.stream.group != grp || d.stream.group != grp || grp.units == nil {
		return nil
	}
	return grp
}

// slotBytes is one slot's bytes over the three matrices, as the arrays hold them.
func (grp *expertGroup) slotBytes(wide bool) int64 {
	var n int64
	for _, m := range grp.members {
		s := m.stream
		for j := range grp.parts {
			size := dtSize(s.dts[j])
			if grp.widened(wide, j) {
				size = 4
			}
			n += int64(s.rows) * int64(s.cols[j]) * size
		}
	}
	return n
}

// widened reports whether part j is kept in float32 in the slots: an affine stack's
// scales and biases where products run in float32 (as the mapped stack's are); a float
// mode's scales stay in the file's bytes.
func (grp *expertGroup) widened(wide bool, j int) bool {
	return wide && j > 0 && grp.parts == 3
}

func dtSize(dt mlxDtype) int64 {
	switch dt {
	case dtUint8:
		return 1
	case dtFloat16, dtBfloat16:
		return 2
	}
	return 4
}

// capacity is how many slots each layer gets under the manager's current budget:
// what the budget leaves beside the weights pinned for other reasons and the units
// being read (the manager's own buffers: a layer's picks, or the read window), shared
// evenly by the layers; at least k (a decode step's picks), at most every expert.
func (grp *expertGroup) capacity(k int, wide bool) int {
	st := grp.st
	if budget := st.mgr.Budget(); budget != st.budget {
		s := st.mgr.Stats()
		st.budget, st.base = budget, s.Pinned-st.pinned
		unitFile := s.Total / int64(max(s.Units, 1))
		free := budget - st.base - int64(max(k, readWindow))*unitFile
		st.perLayer = int(max(free, 0) / int64(max(len(st.groups), 1)) / max(grp.slotBytes(wide), 1))
	}
	return min(max(st.perLayer, k), grp.experts)
}

// zeros is a row-contiguous array of shape filled with zeros of dt.
func (g *graph) zeros(dt mlxDtype, shape ...int) mlxArray {
	return g.contiguous(g.broadcastTo(g.astype(g.scalar(0), dt), shape...))
}

// resize gives grp n slots, keeping the experts the policy values most (on the
// worker; the new arrays are evaluated and kept).
func (grp *expertGroup) resize(b *Backend, g *graph, n int) {
	st := grp.st
	var kept []int // slots to keep, in their order
	for s, e := range grp.held {
		if e >= 0 {
			kept = append(kept, s)
		}
	}
	for len(kept) > n {
		ids := make([]int, len(kept))
		for i, s := range kept {
			ids[i] = grp.units[grp.held[s]]
		}
		v := st.mgr.Victim(ids)
		kept = append(kept[:v], kept[v+1:]...)
	}
	wide := b.wide
	arrs := make([][3]mlxArray, len(grp.members))
	var keep mlxArray
	if len(kept) > 0 {
		idx := make([]int32, len(kept))
		for i, s := range kept {
			idx[i] = int32(s)
		}
		keep = g.fromInt32s(idx, len(idx))
	}
	for m, w := range grp.members {
		s := w.stream
		for j := range grp.parts {
			dt := s.dts[j]
			if grp.widened(wide, j) {
				dt = dtFloat32
			}
			var parts []mlxArray
			if keep != 0 {
				parts = append(parts, g.takeAxis(grp.arrs[m][j], keep, 0))
			}
			if n > len(kept) {
				parts = append(parts, g.zeros(dt, n-len(kept), s.rows, s.cols[j]))
			}
			a := parts[0]
			if len(parts) > 1 {
				a = g.concat(0, parts...)
			}
			arrs[m][j] = a
		}
	}
	keptExperts := make([]int, len(kept))
	for i, s := range kept {
		keptExperts[i] = grp.held[s]
	}
	var all []mlxArray
	for _, a := range arrs {
		all = append(all, a[:grp.parts]...)
	}
	g.eval(all...)
	if g.err != nil {
		return
	}
	for _, a := range grp.arrs {
		for _, x := range a[:grp.parts] {
			b.lib.arrayFree(x)
		}
	}
	for _, x := range all {
		g.keep(x)
	}
	grp.arrs = arrs
	if grp.slotOf == nil {
		grp.slotOf = make([]int, grp.experts)
	}
	for e := range grp.slotOf {
		grp.slotOf[e] = -1
	}
	grp.held = make([]int, n)
	for s := range grp.held {
		grp.held[s] = -1
	}
	for i, e := range keptExperts {
		grp.held[i], grp.slotOf[e] = e, i
	}
	grp.slots = n
	bytes := int64(n) * grp.slotBytes(wide)
	st.mgr.Pin(bytes - grp.bytes)
	st.pinned += bytes - grp.bytes
	grp.bytes = bytes
}

// begin records that grp's MoE runs now, after the previous group's (the order of a
// pass's layers), counts how many of picked the previous token's picks here guessed,
// and reads ahead the experts the next group's last token picked that are in none of
// its slots.
func (grp *expertGroup) begin(picked []int) {
	st := grp.st
	if p := st.prev; p != nil && p != grp {
		p.next = grp
	}
	st.prev = grp
	if guess := grp.lastPicks; guess != nil {
		right := 0
		for _, e := range picked {
			for _, x := range guess {
				if x == e {
					right++
					break
				}
			}
		}
		st.mgr.NotePrediction(len(guess), right)
	}
	next := grp.next
	if next == nil {
		return
	}
	var ids []int
	for _, e := range next.lastPicks {
		if next.slotOf == nil || next.slotOf[e] < 0 {
			ids = append(ids, next.units[e])
		}
	}
	st.mgr.Prefetch(ids...)
}

// readWindow is how many of a prompt's missing experts are asked of the manager ahead
// of the one being copied: enough to keep its readers busy, few enough that the pass
// does not hold every expert it picked in the manager's buffers at once.
const readWindow = 4

// each reads the units of experts through the manager, in order with the next ones
// (window in all) asked for ahead, each use weighted by uses[expert] (AcquireUses),
// and calls use with each (on the worker, the Lib's mutex held)
// before releasing it. The mutex is released while a read is waited for (no MLX call
// is made meanwhile), so that other models' passes go on.
func (grp *expertGroup) each(l *Lib, experts, uses []int, window int, use func(i int, h residency.Handle) error) error {
	mgr := grp.st.mgr
	ids := make([]int, len(experts))
	for i, e := range experts {
		ids[i] = grp.units[e]
	}
	for i, id := range ids {
		l.mu.Unlock()
		mgr.Want(ids[i:min(i+window, len(ids))]...)
		h, err := mgr.AcquireUses(id, uses[experts[i]])
		l.mu.Lock()
		if err != nil {
			return err
		}
		err = use(i, h)
		h.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// fromUnit is member m's part j of the expert in h, as a [1, rows, cols] array in the
// slots' dtype.
func (grp *expertGroup) fromUnit(g *graph, wide bool, h residency.Handle, m, j int) mlxArray {
	s := grp.members[m].stream
	seg := h.Seg(grp.parts*s.pos + j)
	if len(seg) == 0 {
		return g.fail(fmt.Errorf("metal: an empty expert segment of %q", grp.members[m].name))
	}
	a := g.fromData(unsafe.Pointer(&seg[0]), s.dts[j], 1, s.rows, s.cols[j])
	if grp.widened(wide, j) {
		a = g.astype(a, dtFloat32)
	}
	return a
}

// prepare makes the experts picked (T × k expert ids, row-major) resident for one
// MoE and returns the stacks to gather over, per member, and the picks as indices
// into them. It runs on the worker with the Lib's mutex held.
func (grp *expertGroup) prepare(b *Backend, g *graph, picks []int, k int) ([][3]mlxArray, []uint32, error) {
	st := grp.st
	first := make([]int, grp.experts) // expert → its place in order + 1
	uses := make([]int, grp.experts)  // expert → the rows that picked it (the policy's weight)
	var order []int
	for _, e := range picks {
		if e < 0 || e >= grp.experts {
			return nil, nil, fmt.Errorf("metal: the router picked expert %d of %d", e, grp.experts)
		}
		uses[e]++
		if first[e] == 0 {
			order = append(order, e)
			first[e] = len(order)
		}
	}
	grp.begin(order)
	last := picks[len(picks)-k:]
	grp.lastPicks = append(grp.lastPicks[:0], last...)

	if n := grp.capacity(k, b.wide); n != grp.slots {
		grp.resize(b, g, n)
		if g.err != nil {
			return nil, nil, g.err
		}
	}
	var missing []int
	inUse := make([]bool, grp.slots)
	for _, e := range order {
		if s := grp.slotOf[e]; s >= 0 {
			st.mgr.HitUses(grp.units[e], uses[e])
			inUse[s] = true
		} else {
			missing = append(missing, e)
		}
	}
	idx := make([]uint32, len(picks))
	if len(order) > grp.slots {
		// More experts than slots: a stack for this pass alone, in order's order.
		parts := make([][3][]mlxArray, len(grp.members))
		for m := range parts {
			for j := range grp.parts {
				parts[m][j] = make([]mlxArray, len(order))
			}
		}
		for i, e := range order {
			sl := grp.slotOf[e]
			if sl < 0 {
				continue
			}
			for m, w := range grp.members {
				s := w.stream
				for j := range grp.parts {
					parts[m][j][i] = g.slice(grp.arrs[m][j], []int{sl, 0, 0}, []int{sl + 1, s.rows, s.cols[j]})
				}
			}
		}
		err := grp.each(b.lib, missing, uses, readWindow, func(i int, h residency.Handle) error {
			at := first[missing[i]] - 1
			for m := range grp.members {
				for j := range grp.parts {
					parts[m][j][at] = grp.fromUnit(g, b.wide, h, m, j)
				}
			}
			return g.err
		})
		if err != nil {
			return nil, nil, err
		}
		stacks := make([][3]mlxArray, len(grp.members))
		for m := range grp.members {
			for j := range grp.parts {
				stacks[m][j] = g.concat(0, parts[m][j]...)
			}
		}
		for i, e := range picks {
			idx[i] = uint32(first[e] - 1)
		}
		return stacks, idx, g.err
	}
	// A decode step's misses (at most k) are asked for at once.
	err := grp.each(b.lib, missing, uses, max(k, readWindow), func(i int, h residency.Handle) error {
		e := missing[i]
		s := -1
		var cands, candSlots []int
		for sl, held := range grp.held {
			if held < 0 {
				s = sl
				break
			}
			if !inUse[sl] {
				cands = append(cands, grp.units[held])
				candSlots = append(candSlots, sl)
			}
		}
		if s < 0 {
			s = candSlots[st.mgr.Victim(cands)]
			// Free first: should an update fail, the slot holds no expert.
			grp.slotOf[grp.held[s]], grp.held[s] = -1, -1
		}
		for m, w := range grp.members {
			sw := w.stream
			for j := range grp.parts {
				upd := grp.fromUnit(g, b.wide, h, m, j)
				old := grp.arrs[m][j]
				nu := g.sliceUpdate(old, upd, []int{s, 0, 0}, []int{s + 1, sw.rows, sw.cols[j]})
				if g.err != nil {
					return g.err
				}
				// The slot arrays outlive the pass: the update is kept and the old handle
				// let go, so that the update may reuse its buffer.
				grp.arrs[m][j] = g.keep(nu)
				b.lib.arrayFree(old)
			}
		}
		grp.held[s], grp.slotOf[e] = e, s
		inUse[s] = true
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	for i, e := range picks {
		idx[i] = uint32(grp.slotOf[e])
	}
	return grp.arrs, idx, g.err
}

// readIndices evaluates idx (integers) and returns its values.
func (g *graph) readIndices(idx mlxArray) []int {
	a := g.float32Array(idx)
	g.eval(a)
	f := g.read(a)
	out := make([]int, len(f))
	for i, v := range f {
		out[i] = int(v)
	}
	return out
}
