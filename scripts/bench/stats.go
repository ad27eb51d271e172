package main

import (
	"fmt"
	"math"
	"slices"
)

// Summary is the spread of one cell's repeats.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// Summarize gives the median (the mean of the middle two for an even count), min and max of
// xs, ignoring NaNs (a repeat that produced no value). No values gives N = 0.
func Summarize(xs []float64) Summary {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Summary{}
	}
	slices.Sort(v)
	n := len(v)
	med := v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return Summary{N: n, Median: med, Min: v[0], Max: v[n-1]}
}

// Ratio is a/b of two medians, NaN when either is missing or b is zero.
func Ratio(a, b Summary) float64 {
	if a.N == 0 || b.N == 0 || b.Median == 0 {
		return math.NaN()
	}
	return a.Median / b.Median
}

// formatNum prints x with three significant figures at most, and no exponent for the
// magnitudes a benchmark table holds.
func formatNum(x float64) string {
	switch ax := math.Abs(x); {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return "-"
	case ax >= 100:
		return fmt.Sprintf("%.0f", x)
	case ax >= 10:
		return fmt.Sprintf("%.1f", x)
	case ax >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3f", x)
	}
}

// FormatSummary is "median (min–max)", or "-" with no values.
func FormatSummary(s Summary) string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 {
		return formatNum(s.Median)
	}
	return fmt.Sprintf("%s (%s–%s)", formatNum(s.Median), formatNum(s.Min), formatNum(s.Max))
}
