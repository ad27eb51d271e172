package metal

// Evals is how many times the backend has called mlx_eval.
func (b *Backend) Evals() int { return int(b.lib.evals.Load()) }

// SlotUpdateInPlace reports whether a slice_update of an evaluated array whose only
// handle was let go writes into that array's buffer (as the expert slots' updates do)
// rather than copying it.
func (b *Backend) SlotUpdateInPlace() (bool, error) {
	var same bool
	err := b.graph(func(g *graph) error {
		x := make([]float32, 64*1024)
		a := g.fromFloat32s(x, 64, 1024)
		g.eval(a)
		before := g.l.arrayDataFloat32(a)
		upd := g.fromFloat32s(make([]float32, 1024), 1, 1024)
		u := g.sliceUpdate(a, upd, []int{3, 0}, []int{4, 1024})
		for i, o := range g.owned {
			if o == a {
				g.owned = append(g.owned[:i], g.owned[i+1:]...)
				break
			}
		}
		g.l.arrayFree(a)
		g.eval(u)
		same = g.err == nil && g.l.arrayDataFloat32(u) == before
		return g.err
	})
	return same, err
}
