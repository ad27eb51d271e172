package cpu

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/mlxg/mlxg/internal/quant"
	"github.com/mlxg/mlxg/registry/safetensors"
	"github.com/mlxg/mlxg/runner/compute"
	"github.com/mlxg/mlxg/runner/residency"
)

// Streamed experts: with a compute.StreamSource, the stacked expert matrices of a
// mixture-of-experts layer ([experts, out, in], affine-quantized, scales and biases
// stored in one float type) are read through the source's residency manager, never
// through the mapping. A layer's gate, up and down stacks (bound under one prefix,
// mlp.switch_mlp.*) make one group; once all three are bound, each expert becomes one
// unit of the manager: its rows of the three matrices with their scales and biases.
// The MoE product acquires the experts the router picked, reads them from the unit's
// buffer with the same kernels, and releases them; the bytes are the file's, so the
// result is bit-identical to the mapped path. Stacks in the scale-only float modes
// (gpt-oss's mxfp4 experts) stream too, in two parts per matrix, the codes and the
// file's uint8 scales, which a product decodes to float32 into a pooled buffer as the
// mapped stack's were decoded at bind; the streamed stack's decoded scales are dropped.

// streamed is a stacked expert matrix read through a residency manager.
type streamed struct {
	group                  *expertGroup
	pos                    int // this matrix's place in the group's units (parts segments each)
	rows                   int // rows per expert
	parts                  int // 3: packed, scales, biases (affine); 2: packed, uint8 scales (float modes)
	packed, scales, biases residency.Segment
}

// expertGroup is one layer's expert stacks and their units.
type expertGroup struct {
	st      *streamState
	experts int
	members []*weight
	units   []int // per expert; nil until the three stacks are bound

	mu        sync.Mutex
	next      *expertGroup // the group whose MoE followed this one's last time
	lastPicks []int        // the experts the last token picked here
	guess     []int        // the experts the model's guess (GuessExperts) expects next here, by rank
	guessRank []int        // the rank of each in a row's picks (its best, over rows)
	guessCold []int        // the indices in guess of those that were not in memory
}

// streamState is a manager's groups (per model), by prefix, and the last group run.
type streamState struct {
	mgr    *residency.Manager
	mu     sync.Mutex
	groups map[string]*expertGroup
	prev   *expertGroup
	layers map[string]*layerGroup // a dense model's streamed layers, by prefix (dense.go)
	// guided: the model guesses each block's experts from the hidden state
	// (GuessExperts), so the previous token's picks are no longer read ahead.
	guided atomic.Bool
	// coldGuessed and coldRight count, per rank in the guess and with a decay per
	// layer, the guessed experts that were not in memory and those the layer then
	// picked (readGuess).
	coldGuessed, coldRight []float64
}

// coldDecay weighs down the counts of guesses of experts not in memory at each layer:
// they follow about the last fifty layers.
const coldDecay = 0.98

// readGuess reports whether a guessed expert of rank r (0: the guess's best) that is
// not in memory is read ahead: while at least two in three of that rank were right. A
// wrong read costs as much disk time as a read a pass waits for and evicts an expert
// that may be used, while a right one only starts earlier a read the pass would make.
func (st *streamState) readGuess(r int) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return r >= len(st.coldGuessed) || st.coldGuessed[r] == 0 || 3*st.coldRight[r] >= 2*st.coldGuessed[r]
}

// streamFor returns the state of src's manager.
func (b *Backend) streamFor(m *residency.Manager) *streamState {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.streams == nil {
		b.streams = map[*residency.Manager]*streamState{}
	}
	st := b.streams[m]
	if st == nil {
		st = &streamState{mgr: m, groups: map[string]*expertGroup{}}
		b.streams[m] = st
	}
	return st
}

// ForgetStream drops what the backend keeps of m's weights (the model was closed).
func (b *Backend) ForgetStream(m *residency.Manager) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.streams, m)
}

// bindStream makes w, just bound from tensor t of src, a streamed expert stack when
// src streams and w is one.
func (b *Backend) bindStream(src compute.Source, t *safetensors.Tensor, w *weight) error {
	ss, ok := src.(compute.StreamSource)
	if !ok || ss.Residency() == nil || len(t.Shape) != 3 || t.Shape[0] < 2 || !w.q.Quantized() || w.out%t.Shape[0] != 0 || residency.PerHeadStack(w.name) {
		return nil
	}
	affine := w.q.Mode == quant.Affine
	if w.scales.Len() == 0 || affine && w.scales.Type != w.biases.Type {
		return nil
	}
	// Each part must be the file's bytes as bound (not widened to float32 at bind).
	locate := func(name string, n int64) (residency.Segment, bool) {
		ft, ok := src.Tensor(name)
		if !ok || int64(len(ft.Data)) != n {
			return residency.Segment{}, false
		}
		p, off, ok := ss.Locate(name)
		return residency.Segment{Path: p, Off: off, Len: n}, ok
	}
	experts := t.Shape[0]
	s := &streamed{rows: w.out / experts, parts: 3}
	var ok1, ok2, ok3 bool
	s.packed, ok1 = locate(w.name+".weight", int64(len(w.packed))*4)
	if affine {
		s.scales, ok2 = locate(w.name+".scales", w.scales.Bytes())
		s.biases, ok3 = locate(w.name+".biases", w.biases.Bytes())
	} else {
		// The file's scales are a byte each (decoded to float32 at bind).
		s.scales, ok2 = locate(w.name+".scales", int64(w.scales.Len()))
		s.parts, ok3 = 2, true
	}
	if !ok1 || !ok2 || !ok3 {
		return nil
	}
	prefix := w.name
	if i := strings.LastIndexByte(prefix, '.'); i >= 0 {
		prefix = prefix[:i]
	}
	st := b.streamFor(ss.Residency())
	st.mu.Lock()
	defer st.mu.Unlock()
	g := st.groups[prefix]
	if g == nil {
		g = &expertGroup{st: st, experts: experts}
		st.groups[prefix] = g
	}
	if g.experts != experts || len(g.members) >= 3 || len(g.members) > 0 && g.members[0].stream.parts != s.parts {
		return fmt.Errorf("layer %q: %d experts in %d parts, or more than three stacks, beside %d experts under %q", w.name, experts, s.parts, g.experts, prefix)
	}
	s.group, s.pos = g, len(g.members)
	w.stream = s
	g.members = append(g.members, w)
	if len(g.members) < 3 {
		return nil
	}
	g.units = make([]int, experts)
	for e := range experts {
		var segs []residency.Segment
		for _, m := range g.members {
			segs = append(segs, m.stream.expertSegs(e)...)
		}
		id, err := st.mgr.Add(segs)
		if err != nil {
			return err
		}
		g.units[e] = id
	}
	for _, m := range g.members {
		if m.stream.parts == 2 {
			// The stacks' decoded scales would keep a quarter of their bytes in memory;
			// the products decode each expert's from its unit instead.
			m.scales = quant.Scales{Type: m.scales.Type}
		}
	}
	return nil
}

// expertSegs are expert e's packed rows, scales and biases in their files.
func (s *streamed) expertSegs(e int) []residency.Segment {
	n := s.group.experts
	segs := []residency.Segment{s.packed.Part(e, n), s.scales.Part(e, n), s.biases.Part(e, n)}
	return segs[:s.parts]
}

// fromUnit is a view of w's expert rows in unit h; transient, since h's buffer goes
// back to the manager after the product. A float mode's scales are decoded into a
// buffer from get, which must outlive the product.
func (w *weight) fromUnit(h residency.Handle, get func(n int) []float32) (*weight, error) {
	s := w.stream
	v := &weight{name: w.name, out: s.rows, in: w.in, q: w.q, transient: true}
	at := s.parts * s.pos
	v.packed = view[uint32](h.Seg(at))
	if s.parts == 2 {
		raw := h.Seg(at + 1)
		f := get(len(raw))
		if err := quant.FPScalesInto(w.q.Mode, f, raw); err != nil {
			return nil, err
		}
		v.scales = quant.F32Scales(f[:len(raw)])
		return v, nil
	}
	v.scales = scalesOf(h.Seg(at+1), w.scales.Type)
	v.biases = scalesOf(h.Seg(at+2), w.scales.Type)
	return v, nil
}

func scalesOf(b []byte, t quant.ScaleType) quant.Scales {
	if t == quant.ScaleF32 {
		return quant.F32Scales(view[float32](b))
	}
	return quant.HalfScales(view[uint16](b), t)
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

// begin records that grp's MoE runs now, after the previous group's (the order of a
// pass's layers), and counts how well the guesses of its picks did: the model's guess
// from the hidden state, when it made one, and the previous token's picks. Without the
// model's guesses it reads ahead the experts the next group's last token picked, while
// this layer computes. picked are this call's experts.
func (grp *expertGroup) begin(picked []int) {
	st := grp.st
	st.mu.Lock()
	if p := st.prev; p != nil && p != grp {
		p.mu.Lock()
		p.next = grp
		p.mu.Unlock()
	}
	st.prev = grp
	st.mu.Unlock()

	grp.mu.Lock()
	repeat, guess, next := grp.lastPicks, grp.guess, grp.next
	cold, ranks := grp.guessCold, grp.guessRank
	grp.guessCold = nil
	grp.mu.Unlock()
	right := func(g []int) int {
		n := 0
		for _, e := range picked {
			if slices.Contains(g, e) {
				n++
			}
		}
		return n
	}
	guided := st.guided.Load()
	if repeat != nil {
		st.mgr.NoteRepeat(len(repeat), right(repeat))
	}
	if guess != nil {
		st.mgr.NotePrediction(len(guess), right(guess))
		st.mu.Lock()
		for r := range st.coldGuessed {
			st.coldGuessed[r] *= coldDecay
			st.coldRight[r] *= coldDecay
		}
		for _, i := range cold {
			r := ranks[i]
			for len(st.coldGuessed) <= r {
				st.coldGuessed, st.coldRight = append(st.coldGuessed, 0), append(st.coldRight, 0)
			}
			st.coldGuessed[r]++
			if slices.Contains(picked, guess[i]) {
				st.coldRight[r]++
			}
		}
		st.mu.Unlock()
	} else if repeat != nil && !guided {
		st.mgr.NotePrediction(len(repeat), right(repeat))
	}
	if next == nil || guided {
		return
	}
	next.mu.Lock()
	ids := make([]int, 0, len(next.lastPicks))
	for _, e := range next.lastPicks {
		ids = append(ids, next.units[e])
	}
	next.mu.Unlock()
	st.mgr.Prefetch(ids...)
}

// end keeps the last token's picks, the guess for the next token at this layer, and
// settles the model's guess: the guessed units the layer did not use go first from now.
func (grp *expertGroup) end(last []int) {
	grp.mu.Lock()
	grp.lastPicks = append(grp.lastPicks[:0], last...)
	guess := grp.guess
	grp.guess = nil
	grp.mu.Unlock()
	if guess != nil {
		ids := make([]int, len(guess))
		for i, e := range guess {
			ids[i] = grp.units[e]
		}
		grp.st.mgr.Settle(ids...)
	}
}

// WantsExpertGuess implements compute.ExpertGuesser: a guess is made for passes whose
// picks leave at least half of a layer's experts unread (the decode steps of a few
// sequences); a prompt's pass reads most experts, in order.
func (c *context) WantsExpertGuess(gate compute.Weight, rows int, r compute.Routing) bool {
	w, ok := gate.(*weight)
	return ok && w.stream != nil && w.stream.group.units != nil && 2*rows*r.TopK <= w.stream.group.experts
}

// GuessExperts implements compute.ExpertGuesser: the guessed experts are read behind
// the next MoE's own reads (MoE issues c.guessed after its Want), kept until their
// block runs, and compared there with its picks.
func (c *context) GuessExperts(logits compute.Tensor, gate compute.Weight, experts int, r compute.Routing) {
	w, ok := gate.(*weight)
	if !ok || w.stream == nil || w.stream.group.units == nil || w.stream.group.experts != experts {
		return
	}
	a, ok := c.args(logits)
	if !ok || a[0].cols != experts {
		return
	}
	l, grp := a[0], w.stream.group
	// es: the guessed experts, each with its best rank in a row's picks, in order.
	var es, ranks []int
	for t := range l.rows {
		picks, _ := r.Select(l.data[t*experts : (t+1)*experts])
		for k, e := range picks {
			if i := slices.Index(es, e); i >= 0 {
				ranks[i] = min(ranks[i], k)
			} else {
				es, ranks = append(es, e), append(ranks, k)
			}
		}
	}
	grp.st.guided.Store(true)
	grp.mu.Lock()
	grp.guess, grp.guessRank = es, ranks
	grp.guessCold = grp.guessCold[:0]
	grp.mu.Unlock()
	for i, e := range es {
		c.guessed = append(c.guessed, guessedUnit{grp, i, ranks[i], grp.units[e]})
	}
}

// guessedUnit is an expert GuessExperts expects, not yet handed to its manager.
type guessedUnit struct {
	grp   *expertGroup
	index int // in grp.guess
	rank  int // its best rank in a row's picks
	id    int // its unit
}

// expectGuessed hands the guessed units to their managers: those in memory are kept
// until their layer runs, those not are read while guesses of their rank have been
// right often enough (streamState.readGuess). Those of grp, whose MoE runs now and
// knows its picks, are dropped.
func (c *context) expectGuessed(grp *expertGroup) {
	for _, g := range c.guessed {
		if g.grp == grp {
			continue
		}
		mgr := g.grp.st.mgr
		if !mgr.Resident(g.id) {
			g.grp.mu.Lock()
			g.grp.guessCold = append(g.grp.guessCold, g.index)
			g.grp.mu.Unlock()
			if !g.grp.st.readGuess(g.rank) {
				continue
			}
		}
		mgr.Expect(g.id)
	}
	c.guessed = c.guessed[:0]
}
