package kvstore

import "math"

// Hadamard rotation of a cache's keys or values (Format.Rotated). With H the normalized
// Walsh–Hadamard matrix of the head dimension (Sylvester's order: H₁ = [1], H₂ₙ =
// [Hₙ Hₙ; Hₙ −Hₙ], scaled by 1/√n), H is symmetric and orthogonal, so H⁻¹ = H:
//
//	scores:  q·k = (Hq)·(Hk)                  the query is rotated once per row and head
//	output:  Σ p·v = H·(Σ p·(Hv))             the output is rotated back once per row and head
//
// The cache holds Hk and Hv; nothing of it is ever rotated back.

// Hadamard applies the normalized Walsh–Hadamard transform to x in place; len(x) must
// be a power of two. It is its own inverse.
func Hadamard(x []float32) {
	n := len(x)
	s := float32(1 / math.Sqrt(float64(n)))
	if hadamardFast(x, s) {
		return
	}
	for h := 1; h < n; h *= 2 {
		for i := 0; i < n; i += 2 * h {
			a, b := x[i:i+h], x[i+h:i+2*h]
			for j := range a {
				a[j], b[j] = a[j]+b[j], a[j]-b[j]
			}
		}
	}
	for i := range x {
		x[i] *= s
	}
}

// hadamardRows applies Hadamard to each dim-element row of x.
func hadamardRows(x []float32, dim int) {
	for i := 0; i+dim <= len(x); i += dim {
		Hadamard(x[i : i+dim])
	}
}

// rotateIn returns x, or a copy of it rotated row by row (rows of dim) in buf when rot is set.
func rotateIn(buf *[]float32, x []float32, dim int, rot bool) []float32 {
	if !rot {
		return x
	}
	if cap(*buf) < len(x) {
		*buf = make([]float32, len(x))
	}
	out := (*buf)[:len(x)]
	copy(out, x)
	hadamardRows(out, dim)
	return out
}

// rotatedAttend runs attend with a's queries rotated when the keys are stored rotated,
// and rotates the output back when the values are.
func (c *kvCodecs) rotatedAttend(a Attention, attend func(Attention) error) error {
	kr, vr := c.spec.K.Rotated, c.spec.V.Rotated
	if !kr && !vr {
		return attend(a)
	}
	if len(a.Q) != a.N*a.Heads*c.kDim || len(a.Out) != a.N*a.Heads*c.vDim {
		return attend(a) // attend reports the mismatch
	}
	a.Q = rotateIn(&c.qbuf, a.Q, c.kDim, kr)
	if a.QV != nil {
		// Latent queries score the values: rotated like them (an orthogonal rotation
		// keeps the dot product).
		a.QV = rotateIn(&c.qvbuf, a.QV, c.vDim, vr)
	}
	if err := attend(a); err != nil {
		return err
	}
	if vr {
		hadamardRows(a.Out, c.vDim)
	}
	return nil
}
