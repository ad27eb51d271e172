package kvstore

import "fmt"

// Bidirectional spans (Attention.Bidirectional) widen what some query rows see: a row at
// position p inside a span [s, e) sees every position its causal mask shows and every
// position of the span, which is one interval, [lo, e) with lo = min(s, its window's first
// position) (0 without a window). The other rows keep their causal view.
//
// Every kind runs such a call the same way: the rows whose view is their causal one in
// runs, each run as the last rows of a prefix of the cache (the kind's own causal
// attention, so those rows compute what they would without spans), and each widened row
// alone over its interval, through a view of the kind's positions from lo.

// attendSpans runs a over a cache of length positions whose queries see window positions
// (0: all): plain(b, n) attends b's rows as the last b.N of the first n positions; wide(b,
// lo, hi) attends b's one row over positions [lo, hi).
func attendSpans(a Attention, length, window int, plain func(b Attention, n int) error, wide func(b Attention, lo, hi int) error) error {
	if a.N <= 0 || a.N > length {
		return fmt.Errorf("kvstore: Attend for %d query rows over a cache of %d positions", a.N, length)
	}
	if len(a.Q)%a.N != 0 || len(a.Out)%a.N != 0 {
		return fmt.Errorf("kvstore: Attend with %d query and %d output floats for %d rows", len(a.Q), len(a.Out), a.N)
	}
	prev := 0
	for _, s := range a.Bidirectional {
		if s.Start < prev || s.End <= s.Start || s.End > length {
			return fmt.Errorf("kvstore: bidirectional spans %v are not in order and apart within the cache's %d positions", a.Bidirectional, length)
		}
		prev = s.End
	}
	qw, ow := len(a.Q)/a.N, len(a.Out)/a.N
	first := length - a.N
	rows := func(r0, r1 int) Attention {
		b := a
		b.N, b.Q, b.Out, b.Bidirectional = r1-r0, a.Q[r0*qw:r1*qw], a.Out[r0*ow:r1*ow], nil
		return b
	}
	// view is the interval row r sees, and whether it is wider than its causal one.
	view := func(r, k int) (lo, hi int, widened bool) {
		p := first + r
		causal := 0
		if window > 0 {
			causal = max(0, p-window+1)
		}
		s := a.Bidirectional[k]
		if p < s.Start || p >= s.End {
			return causal, p + 1, false
		}
		lo = causal
		if window > 0 {
			lo = min(causal, s.Start)
		}
		return lo, s.End, lo < causal || s.End > p+1
	}
	k, run := 0, 0 // the first span not yet behind row r; the first row of the plain run
	for r := 0; r < a.N; r++ {
		for k < len(a.Bidirectional) && a.Bidirectional[k].End <= first+r {
			k++
		}
		if k == len(a.Bidirectional) {
			break
		}
		lo, hi, widened := view(r, k)
		if !widened {
			continue
		}
		if run < r {
			if err := plain(rows(run, r), first+r); err != nil {
				return err
			}
		}
		if err := wide(rows(r, r+1), lo, hi); err != nil {
			return err
		}
		run = r + 1
	}
	if run < a.N {
		return plain(rows(run, a.N), length)
	}
	return nil
}
