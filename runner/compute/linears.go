package compute

// LinearsContext is implemented by contexts that compute several products of one input
// together: the CPU backend prepares the input once and spreads the rows of all of them
// over one parallel pass, where separate Linears would make one pass each, each with its
// fork and join (some 190 per decode step of a 24-layer model).
type LinearsContext interface {
	// Linears sets out[i] to Linear(x, ws[i]) for every i: the same values, the same
	// errors. len(out) must be len(ws).
	Linears(x Tensor, ws []Weight, out []Tensor)
}

// Linears sets out[i] to c.Linear(x, ws[i]) for every weight of ws, together where c (or
// the context it wraps) is a LinearsContext. A layer's products of one input (q, k and v;
// gate and up) go through it; the output head does not (a wrapper may watch its Linear).
func Linears(c Context, x Tensor, ws []Weight, out []Tensor) {
	if l, ok := Ext[LinearsContext](c); ok {
		l.Linears(x, ws, out)
		return
	}
	for i, w := range ws {
		out[i] = c.Linear(x, w)
	}
}
