package kvstore

// codecs implements fusedSource for the ring, so decode over a quantized sliding
// window reads its codes in place too.
func (r ringView) codecs() (k, v rowCodec) { return r.c.codecs() }

// rows implements fusedSource: the slots of [from, to) up to the end of the ring. A ring
// larger than the window also ends a run where a ring of window slots would wrap, so that
// a run (and the order of its softmax updates) does not depend on the ring's size: a
// verification pass's rows then compute what decode steps over a ring of window slots do.
func (r ringView) rows(head, from, to int) (k, v seg, stride, n int) {
	c := r.c
	slot := (r.base + from) % c.slots
	row := slot*c.kvHeads + head
	n = min(to-from, c.slots-slot)
	if c.slots > c.window {
		n = min(n, c.window-(r.base+from)%c.window)
	}
	return seg{c.k.codes[row*c.kc.words:], c.k.halfs[row*c.kc.halfs:]},
		seg{c.v.codes[row*c.vc.words:], c.v.halfs[row*c.vc.halfs:]}, c.kvHeads, n
}
