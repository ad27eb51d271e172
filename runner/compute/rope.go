package compute

import (
	"fmt"
	"math"
)

// RoPE holds the rotary embedding of an attention layer: the inverse frequencies with
// any context-extension scaling already applied, as Hugging Face computes them.
type RoPE struct {
	Dims    int       // rotated columns per head (the head size unless partial rotary)
	InvFreq []float32 // Dims/2 inverse frequencies
	// Interleaved rotates the pairs (2j, 2j+1) of the first Dims columns instead of
	// (j, j+Dims/2): DeepSeek's layout (rope_interleave, mlx's traditional RoPE).
	Interleaved bool
	Scale       float32 // multiplies cos and sin: yarn's and longrope's attention factor, 1 otherwise
	// LongInvFreq, when set, replaces InvFreq at positions from Switch on (longrope's
	// long factors past original_max_position_embeddings). The choice is made per
	// position, so a position's rotation never depends on how a prompt was split into
	// passes: the same as transformers wherever a pass's positions all lie on one side of
	// the switch (transformers rotates a whole pass with the long factors once its last
	// position passes it).
	LongInvFreq []float32
	Switch      int
	// PosScale, when set, multiplies cos and sin at position p by
	// 1 + Beta·ln(1 + floor(p/Period)): Llama 4's attention temperature tuning, which
	// Ministral 3 applies to its queries (a RoPE of its own for them; Dims must then be
	// the whole head, since the scale covers every column).
	PosScale *PosScale
}

// PosScale is a position-dependent factor on the rotated vectors (llama_4_scaling_beta,
// original_max_position_embeddings).
type PosScale struct {
	Beta   float64
	Period int
}

// At is the factor at position p, computed in float32 as torch does.
func (s *PosScale) At(p int) float32 {
	if s == nil {
		return 1
	}
	f := float32(math.Floor(float64(float32(p) / float32(s.Period))))
	return 1 + float32(s.Beta)*float32(math.Log(float64(1+f)))
}

// Plain reports whether every position uses InvFreq and Scale alone (the fast paths of
// the backends that rotate with one frequency table).
func (r *RoPE) Plain() bool { return r.LongInvFreq == nil && r.PosScale == nil }

// Freqs is the inverse frequencies at position p.
func (r *RoPE) Freqs(p int) []float32 {
	if r.LongInvFreq != nil && p >= r.Switch {
		return r.LongInvFreq
	}
	return r.InvFreq
}

// WithPosScale returns a copy of r whose vectors are also scaled per position by s.
func (r *RoPE) WithPosScale(s PosScale) (*RoPE, error) {
	if s.Period <= 0 {
		return nil, fmt.Errorf("compute: a position scale needs a positive period (original_max_position_embeddings), got %d", s.Period)
	}
	c := *r
	c.PosScale = &s
	return &c, nil
}

// RoPEScaling is config.json's rope_scaling (or rope_parameters) block.
type RoPEScaling struct {
	Type           string  // "default" or "", "linear", "llama3", "yarn"
	Factor         float64 // linear, llama3, yarn
	LowFreqFactor  float64 // llama3
	HighFreqFactor float64 // llama3
	// OriginalMaxPositions is original_max_position_embeddings (llama3, yarn); 0 means
	// the model's max_position_embeddings.
	OriginalMaxPositions int
	BetaFast, BetaSlow   float64 // yarn; 0 means 32 and 1
	AttentionFactor      float64 // yarn; 0 means derived from Factor and the mscales
	MScale, MScaleAllDim float64 // yarn (DeepSeek style); 0 means unset
	NoTruncate           bool    // yarn's "truncate": false
	// Proportion is proportional RoPE's partial_rotary_factor (Gemma 4's full-attention
	// layers): over a head of dims columns, the first Proportion·dims/2 frequency pairs
	// rotate, with frequencies base^(-2i/dims), and the others keep frequency 0.
	Proportion float64
	// ShortFactor and LongFactor (longrope) divide the frequencies below and from
	// OriginalMaxPositions, one per frequency.
	ShortFactor, LongFactor []float64
}

// SupportedRoPE lists the scaling types NewRoPE accepts.
const SupportedRoPE = "default, linear, llama3, yarn, proportional, longrope"

// NewRoPE computes the inverse frequencies for dims rotated columns with base theta.
func NewRoPE(dims int, theta float64, s RoPEScaling, maxPositions int) (*RoPE, error) {
	if dims <= 0 || dims%2 != 0 {
		return nil, fmt.Errorf("compute: RoPE over %d dimensions: it must be a positive even number", dims)
	}
	if theta <= 0 {
		return nil, fmt.Errorf("compute: rope_theta %v must be positive", theta)
	}
	half := dims / 2
	base := make([]float64, half) // base^(-2i/dims), as torch: float32 exponent, float32 result
	for i := range base {
		exp := float32(float32(2*i) / float32(dims))
		base[i] = float64(1 / float32(math.Pow(theta, float64(exp))))
	}
	r := &RoPE{Dims: dims, InvFreq: make([]float32, half), Scale: 1}
	orig := float64(s.OriginalMaxPositions)
	if orig == 0 {
		orig = float64(maxPositions)
	}
	switch s.Type {
	case "", "default":
		for i, f := range base {
			r.InvFreq[i] = float32(f)
		}
	case "linear":
		if s.Factor <= 0 {
			return nil, fmt.Errorf("compute: linear rope_scaling needs a positive factor, got %v", s.Factor)
		}
		for i, f := range base {
			r.InvFreq[i] = float32(f / s.Factor)
		}
	case "llama3":
		if s.Factor <= 0 || s.LowFreqFactor <= 0 || s.HighFreqFactor <= s.LowFreqFactor || orig <= 0 {
			return nil, fmt.Errorf("compute: llama3 rope_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings; got %v, %v, %v, %v",
				s.Factor, s.LowFreqFactor, s.HighFreqFactor, orig)
		}
		lowWave, highWave := orig/s.LowFreqFactor, orig/s.HighFreqFactor
		for i, f := range base {
			wave := 2 * math.Pi / f
			switch {
			case wave < highWave: // high frequency: unchanged
				r.InvFreq[i] = float32(f)
			case wave > lowWave: // low frequency: interpolated
				r.InvFreq[i] = float32(f / s.Factor)
			default: // in between: blend smoothly
				smooth := (orig/wave - s.LowFreqFactor) / (s.HighFreqFactor - s.LowFreqFactor)
				r.InvFreq[i] = float32((1-smooth)*f/s.Factor + smooth*f)
			}
		}
	case "proportional":
		// transformers' _compute_proportional_rope_parameters: the rotated pairs keep
		// their places in the whole head (rotate-half pairs j and j+dims/2), so a
		// partial rotation is frequencies of 0 rather than fewer rotated columns.
		p := s.Proportion
		if p == 0 {
			p = 1
		}
		if p < 0 || p > 1 {
			return nil, fmt.Errorf("compute: proportional RoPE needs partial_rotary_factor in (0, 1], got %v", p)
		}
		factor := s.Factor
		if factor == 0 {
			factor = 1
		}
		angles := int(math.Floor(p * float64(dims) / 2))
		for i := 0; i < angles; i++ {
			r.InvFreq[i] = float32(base[i] / factor)
		}
	case "yarn":
		if s.Factor <= 0 || orig <= 0 {
			return nil, fmt.Errorf("compute: yarn rope_scaling needs a positive factor and original_max_position_embeddings; got %v and %v", s.Factor, orig)
		}
		mscale := func(scale, m float64) float64 {
			if scale <= 1 {
				return 1
			}
			return 0.1*m*math.Log(scale) + 1
		}
		att := s.AttentionFactor
		if att == 0 {
			if s.MScale != 0 && s.MScaleAllDim != 0 {
				att = mscale(s.Factor, s.MScale) / mscale(s.Factor, s.MScaleAllDim)
			} else {
				att = mscale(s.Factor, 1)
			}
		}
		fast, slow := s.BetaFast, s.BetaSlow
		if fast == 0 {
			fast = 32
		}
		if slow == 0 {
			slow = 1
		}
		corr := func(rot float64) float64 {
			return float64(dims) * math.Log(orig/(rot*2*math.Pi)) / (2 * math.Log(theta))
		}
		low, high := corr(fast), corr(slow)
		if !s.NoTruncate {
			low, high = math.Floor(low), math.Ceil(high)
		}
		low, high = max(low, 0), min(high, float64(dims-1))
		if low == high {
			high += 0.001
		}
		for i, f := range base {
			ramp := min(max((float64(i)-low)/(high-low), 0), 1)
			extra := 1 - ramp // weight of the unscaled frequency
			r.InvFreq[i] = float32(f/s.Factor*(1-extra) + f*extra)
		}
		r.Scale = float32(att)
	case "longrope":
		if len(s.ShortFactor) != half || len(s.LongFactor) != half || orig <= 0 {
			return nil, fmt.Errorf("compute: longrope rope_scaling needs %d short_factor and long_factor values and original_max_position_embeddings; got %d, %d and %v",
				half, len(s.ShortFactor), len(s.LongFactor), orig)
		}
		// As transformers: without a factor, max_position_embeddings over the original
		// length, and the attention factor follows from it.
		factor := s.Factor
		if factor == 0 {
			factor = float64(maxPositions) / orig
		}
		att := s.AttentionFactor
		if att == 0 {
			att = 1
			if factor > 1 {
				att = math.Sqrt(1 + math.Log(factor)/math.Log(orig))
			}
		}
		r.LongInvFreq = make([]float32, half)
		for i := range base {
			// 1 / (factor · base^(2i/dims)), the product in float32 as torch.
			p := float32(math.Pow(theta, float64(float32(float32(2*i)/float32(dims)))))
			r.InvFreq[i] = 1 / (float32(s.ShortFactor[i]) * p)
			r.LongInvFreq[i] = 1 / (float32(s.LongFactor[i]) * p)
		}
		r.Switch = int(orig)
		r.Scale = float32(att)
	default:
		return nil, fmt.Errorf("compute: rope scaling type %q is not supported (supported: %s)", s.Type, SupportedRoPE)
	}
	return r, nil
}

// CosSin returns cos and sin of the angle of frequency i at position pos, times Scale,
// computed as Hugging Face does: the angle is a float32 product.
func (r *RoPE) CosSin(pos, i int) (cos, sin float32) {
	a := float64(float32(pos) * r.Freqs(pos)[i])
	c, s := float32(math.Cos(a))*r.Scale, float32(math.Sin(a))*r.Scale
	if r.PosScale != nil {
		f := r.PosScale.At(pos)
		c, s = c*f, s*f
	}
	return c, s
}

// MRoPE is multimodal RoPE (config.json's mrope_section): each position is three,
// temporal, height and width, and each rotary frequency reads one of them. Qwen3-VL
// and Qwen3.5 interleave them (mrope_interleaved: frequency j reads height when
// j%3 == 1 and j < 3·Section[1], width when j%3 == 2 and j < 3·Section[2], else
// time); Qwen2-VL gives each its contiguous run of Section[k] frequencies.
type MRoPE struct {
	Section     [3]int
	Interleaved bool
}

// Axis is the position component (0 time, 1 height, 2 width) frequency j reads.
func (m *MRoPE) Axis(j int) int {
	if m.Interleaved {
		switch {
		case j%3 == 1 && j < 3*m.Section[1]:
			return 1
		case j%3 == 2 && j < 3*m.Section[2]:
			return 2
		}
		return 0
	}
	switch {
	case j < m.Section[0]:
		return 0
	case j < m.Section[0]+m.Section[1]:
		return 1
	}
	return 2
}

// RowAngles fills cos and sin (r.Dims/2 values each) for a row at the three-part
// position pos, as the models compute them: the angle in float32 (position times
// inverse frequency), then its cosine and sine times Scale.
func (r *RoPE) RowAngles(m *MRoPE, pos [3]int, cos, sin []float32) {
	inv := r.Freqs(pos[0])
	for j := range r.Dims / 2 {
		a := float32(pos[m.Axis(j)]) * inv[j]
		cos[j] = float32(math.Cos(float64(a))) * r.Scale
		sin[j] = float32(math.Sin(float64(a))) * r.Scale
	}
}
