package constrain

import (
	"encoding/json"
	"math/big"
)

// Numbers with minimum/maximum are written without an exponent, with at most boundedFrac
// decimals (integers: none) and at most boundedInt digits before the point, so that a value
// is a whole count of units (10^-frac) in an int64 and every bound check is exact.
const (
	boundedFrac   = 6
	boundedIntNum = 12 // 10^12 × 10^6 units stays inside an int64
	boundedIntInt = maxDigits
)

// numBounds are a number's bounds as closed ranges of units, snapped to what can be written.
type numBounds struct {
	lo, hi    int64 // the smallest and largest allowed value, in units
	frac      int   // decimals that may be written
	intDigits int   // digits that may come before the point
	unit      int64 // 10^frac
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// value is a complete number frame's value in units.
func (b *numBounds) value(f *frame) int64 {
	var v int64
	switch f.stage {
	case nFrac:
		v = (f.v*pow10(int(f.a)) + int64(f.c)) * pow10(b.frac-int(f.a))
	case nInt:
		v = f.v * b.unit
	}
	if f.flag == 1 {
		v = -v
	}
	return v
}

// feasible reports whether some completion of the number prefix in f lands in [lo, hi].
func (b *numBounds) feasible(f *frame) bool {
	neg := f.flag == 1
	hits := func(x, y int64) bool { // the completions are x..y (of the digits, before the sign)
		if neg {
			x, y = -y, -x
		}
		return x <= b.hi && y >= b.lo
	}
	switch f.stage {
	case nMinus:
		return hits(0, pow10(b.intDigits)*b.unit-1)
	case nZero:
		return hits(0, b.unit-1)
	case nInt:
		for j := 0; int(f.a)+j <= b.intDigits; j++ {
			p := pow10(j) * b.unit
			if hits(f.v*p, (f.v+1)*p-1) {
				return true
			}
		}
		return false
	case nDot:
		return hits(f.v*b.unit, (f.v+1)*b.unit-1)
	case nFrac:
		scale := pow10(b.frac - int(f.a))
		base := (f.v*pow10(int(f.a)) + int64(f.c)) * scale
		return hits(base, base+scale-1)
	}
	return false
}

// compileBounds reads minimum, maximum, exclusiveMinimum and exclusiveMaximum (a number, or
// draft 4's boolean beside minimum/maximum); nil when there are none.
func (c *compiler) compileBounds(m map[string]any, integer bool, path string) (*numBounds, error) {
	num := func(k string) (*big.Rat, error) {
		v, ok := m[k]
		if !ok {
			return nil, nil
		}
		n, isNum := v.(json.Number)
		if !isNum {
			return nil, c.errf(path, "%s must be a number", k)
		}
		r, ok := new(big.Rat).SetString(string(n))
		if !ok {
			return nil, c.errf(path, "%s: %q is not a number", k, n)
		}
		return r, nil
	}
	lo, err := num("minimum")
	if err != nil {
		return nil, err
	}
	hi, err := num("maximum")
	if err != nil {
		return nil, err
	}
	loEx, hiEx := false, false
	for _, k := range []string{"exclusiveMinimum", "exclusiveMaximum"} {
		v, ok := m[k]
		if !ok {
			continue
		}
		isMin := k == "exclusiveMinimum"
		if flag, isBool := v.(bool); isBool { // draft 4
			if isMin {
				loEx = flag
			} else {
				hiEx = flag
			}
			continue
		}
		r, err := num(k)
		if err != nil {
			return nil, err
		}
		// The tighter of the two bounds wins; at a tie the exclusive one.
		if isMin && (lo == nil || r.Cmp(lo) >= 0) {
			lo, loEx = r, true
		}
		if !isMin && (hi == nil || r.Cmp(hi) <= 0) {
			hi, hiEx = r, true
		}
	}
	if lo == nil && hi == nil {
		return nil, nil
	}
	b := &numBounds{intDigits: boundedIntNum, frac: boundedFrac}
	if integer {
		b.intDigits, b.frac = boundedIntInt, 0
	}
	b.unit = pow10(b.frac)
	limit := new(big.Int).SetInt64(pow10(b.intDigits)*b.unit - 1)
	unit := new(big.Rat).SetInt64(b.unit)
	// Snap to whole units: the smallest unit count >= lo (> lo when exclusive), the
	// largest <= hi (< hi).
	b.lo, b.hi = -limit.Int64(), limit.Int64()
	if lo != nil {
		x := new(big.Rat).Mul(lo, unit)
		n := floor(x)
		if loEx || !x.IsInt() {
			n.Add(n, big.NewInt(1))
		}
		b.lo = clampInt(n, limit)
	}
	if hi != nil {
		x := new(big.Rat).Mul(hi, unit)
		n := floor(x)
		if hiEx && x.IsInt() {
			n.Sub(n, big.NewInt(1))
		}
		b.hi = clampInt(n, limit)
	}
	if b.lo > b.hi {
		what := "number with at most 6 decimals"
		if integer {
			what = "integer"
		}
		return nil, c.errf(path, "no %s (of at most %d digits before the point) is within minimum/maximum", what, b.intDigits)
	}
	return b, nil
}

func floor(x *big.Rat) *big.Int {
	// Euclidean division by a positive denominator is the floor.
	return new(big.Int).Div(x.Num(), x.Denom())
}

func clampInt(n, limit *big.Int) int64 {
	if n.Cmp(limit) > 0 {
		return limit.Int64()
	}
	if neg := new(big.Int).Neg(limit); n.Cmp(neg) < 0 {
		return neg.Int64()
	}
	return n.Int64()
}
