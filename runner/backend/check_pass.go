package backend

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mlxg/mlxg/runner/compute"
)

// The checks of how a pass runs rather than of what one operation computes: activation
// memory reused within a pass (compute.Freer), an architecture's error recorded as the
// pass's (Failer), several products of one input at once (LinearsContext), the rows of
// several sequences in one pass (BatchContext) and a verification pass
// (VerifyContext). Each goes through the helper or the fallback that the architectures
// and runner/model take, so a backend without an optional extension is checked on the
// path it gets instead, and the report says so.

// linMat is a matrix of the op table that these checks reuse, with its reference
// product over every row of the feed.
type linMat struct {
	name   string
	prefix string
	q      compute.Quant
	tol    Tol
	want   []float32 // the feed's rows × out
}

// linearRef is x (rows × in) times wᵀ (w is out × in), plus bias when not nil.
func linearRef(x []float32, rows, in int, w []float32, out int, bias []float32) []float32 {
	y := make([]float32, rows*out)
	for t := 0; t < rows; t++ {
		for o := 0; o < out; o++ {
			var acc float64
			for i := 0; i < in; i++ {
				acc += float64(x[t*in+i]) * float64(w[o*in+i])
			}
			if bias != nil {
				acc += float64(bias[o])
			}
			y[t*out+o] = float32(acc)
		}
	}
	return y
}

// rowsOfRef is rows first..first+n-1 of m (rows of cols values).
func rowsOfRef(m []float32, cols, first, n int) []float32 {
	return m[first*cols : (first+n)*cols]
}

// looser is the larger of two tolerances, field by field.
func looser(a, b Tol) Tol { return Tol{max(a.Float32, b.Float32), max(a.Reduced, b.Reduced)} }

// lacking returns a note for a backend whose contexts lack the extension E: what runs
// instead.
func lacking[E any](instead string) func(b compute.Backend) string {
	return func(b compute.Backend) string {
		c := b.NewContext()
		defer c.Close()
		if _, ok := compute.Ext[E](c); ok {
			return ""
		}
		return instead
	}
}

// runAll evaluates the tensors op returns, in one fresh context, one after the other.
func runAll(b compute.Backend, op func(c compute.Context) []compute.Tensor) ([]float32, error) {
	c := b.NewContext()
	defer c.Close()
	ts := op(c)
	var out []float32
	for _, t := range ts {
		if err := c.Err(); err != nil {
			return nil, err
		}
		v, err := c.Float32s(t)
		if err != nil {
			return nil, err
		}
		out = append(out, v...)
	}
	return out, nil
}

func passCases(src source, f feeder, mats []linMat) []opCase {
	T, in := f.T, f.in
	bind := func(b compute.Backend) ([]compute.Weight, error) {
		if err := f.prep(b); err != nil {
			return nil, err
		}
		ws := make([]compute.Weight, len(mats))
		for i, m := range mats {
			w, err := b.Weight(src, m.prefix, m.q)
			if err != nil {
				return nil, err
			}
			ws[i] = w
		}
		return ws, nil
	}
	prodTol := tolCopy
	for _, m := range mats {
		prodTol = looser(prodTol, m.tol)
	}
	out := len(mats[0].want) / (2 * T)

	// Free between the steps of a pass: what it releases is reused by the tensors made
	// next, and what it keeps keeps its values.
	freed := make([]float32, T*in)
	for i := range freed {
		freed[i] = (f.x[i] + f.y[i]) * f.x[i]
	}
	cases := []opCase{{"Free (buffers reused within a pass)", []string{"Freer.Free"}, tolCopy, func(b compute.Backend) ([]float32, error) {
		if err := f.prep(b); err != nil {
			return nil, err
		}
		return run(b, func(c compute.Context) compute.Tensor {
			sum := c.Add(f.rowsOf(b, c, 0, T), f.rowsOf(b, c, T, T))
			compute.Free(c, sum)
			f.rowsOf(b, c, T, T) // takes a released buffer
			z := c.Mul(sum, f.rowsOf(b, c, 0, T))
			compute.Free(c, z)
			return z
		})
	}, freed, nil}}
	cases[0].note = lacking[compute.Freer]("no Freer: a pass keeps every tensor to its end")

	// Fail: the error an architecture records ends the pass, and is the error it returns.
	doctorErr := errors.New("doctor: a layer's cache of the wrong kind")
	cases = append(cases, opCase{"Fail (an architecture's error ends the pass)", []string{"Failer.Fail"}, tolCopy, func(b compute.Backend) ([]float32, error) {
		if err := f.prep(b); err != nil {
			return nil, err
		}
		c := b.NewContext()
		defer c.Close()
		x := f.rowsOf(b, c, 0, T)
		y := c.Add(x, compute.Fail(c, doctorErr))
		_, err := c.Float32s(c.Mul(y, x))
		_, failer := compute.Ext[compute.Failer](c)
		switch {
		case err == nil:
			return nil, errors.New("the pass went on after Fail")
		case failer && !strings.Contains(err.Error(), doctorErr.Error()):
			return nil, fmt.Errorf("the pass failed with %q, not with the error Fail recorded", err)
		}
		return []float32{0}, nil
	}, []float32{0}, lacking[compute.Failer]("no Failer: the pass fails at the next operation, with its own error")})

	// Linears: a layer's products of one input, together.
	var together []float32
	for _, m := range mats {
		together = append(together, rowsOfRef(m.want, out, 0, T)...)
	}
	cases = append(cases, opCase{"Linears (f32 and 4-bit products of one input)", []string{"LinearsContext.Linears"}, prodTol, func(b compute.Backend) ([]float32, error) {
		ws, err := bind(b)
		if err != nil {
			return nil, err
		}
		return runAll(b, func(c compute.Context) []compute.Tensor {
			outs := make([]compute.Tensor, len(ws))
			compute.Linears(c, f.rowsOf(b, c, 0, T), ws, outs)
			return outs
		})
	}, together, lacking[compute.LinearsContext]("no LinearsContext: one Linear per weight")})

	// A batch of two sequences, of 4 rows (a prefill chunk) and 2 (two decode steps of
	// one sequence would be two segments: these are what a batch of prefills runs),
	// joined with ConcatRows, declared with Segments, through both products: each row as
	// its sequence alone gives it.
	var batched []float32
	for _, m := range mats {
		batched = append(batched, rowsOfRef(m.want, out, 2, 4)...)
		batched = append(batched, rowsOfRef(m.want, out, 0, 2)...)
	}
	cases = append(cases, opCase{"ConcatRows+Segments (a batch of 2 sequences)", []string{"BatchContext.ConcatRows", "BatchContext.Segments"}, prodTol, func(b compute.Backend) ([]float32, error) {
		ws, err := bind(b)
		if err != nil {
			return nil, err
		}
		if err := compute.Supports[compute.BatchContext](b, "batched passes"); err != nil {
			return nil, err
		}
		return runAll(b, func(c compute.Context) []compute.Tensor {
			bc, _ := compute.Ext[compute.BatchContext](c)
			x := bc.ConcatRows(f.rowsOf(b, c, 2, 4), f.rowsOf(b, c, 0, 2))
			bc.Segments([]int{4, 2})
			outs := make([]compute.Tensor, len(ws))
			for i, w := range ws {
				outs[i] = c.Linear(x, w)
			}
			return outs
		})
	}, batched, nil})

	// A verification pass: 5 next positions of one sequence, each row computed as a
	// one-token step computes it (runner/model's fallback: segments of one row).
	var verified []float32
	for _, m := range mats {
		verified = append(verified, rowsOfRef(m.want, out, 1, 5)...)
	}
	cases = append(cases, opCase{"VerifyRows (5 positions as 5 steps)", []string{"VerifyContext.VerifyRows"}, prodTol, func(b compute.Backend) ([]float32, error) {
		ws, err := bind(b)
		if err != nil {
			return nil, err
		}
		return runAll(b, func(c compute.Context) []compute.Tensor {
			if vc, ok := compute.Ext[compute.VerifyContext](c); ok {
				vc.VerifyRows(5)
			} else if bc, ok := compute.Ext[compute.BatchContext](c); ok {
				bc.Segments([]int{1, 1, 1, 1, 1})
			}
			x := f.rowsOf(b, c, 1, 5)
			outs := make([]compute.Tensor, len(ws))
			for i, w := range ws {
				outs[i] = c.Linear(x, w)
			}
			return outs
		})
	}, verified, lacking[compute.VerifyContext]("no VerifyContext: segments of one row (BatchContext)")})
	return cases
}
