package metal

// NewEmulated returns a Backend running on the Go model of mlx-c in emu_test.go, and
// functions reporting how many arrays are alive and how many mlx_eval calls were made.
func NewEmulated() (b *Backend, live func() int, evals func() int, err error) {
	e := newEmu()
	l := e.lib()
	l.noop = 1
	b, err = NewBackend(l)
	return b, e.live, func() int { e.mu.Lock(); defer e.mu.Unlock(); return e.evals }, err
}
