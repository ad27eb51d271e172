package compute

import (
	"fmt"
	"math"
	"testing"
)

func near(a float32, b float64) bool { return math.Abs(float64(a)-b) <= 1e-6*math.Abs(b) }

// The expected values come from Hugging Face's formulas evaluated in float64 Python.
func TestRoPEFrequencies(t *testing.T) {
	r, err := NewRoPE(64, 1e6, RoPEScaling{}, 4096)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range r.InvFreq {
		if !near(f, math.Pow(1e6, -float64(2*i)/64)) || r.Scale != 1 {
			t.Fatalf("default inv_freq[%d] = %v", i, f)
		}
	}
	lin, _ := NewRoPE(64, 1e6, RoPEScaling{Type: "linear", Factor: 2}, 4096)
	for i := range lin.InvFreq {
		if lin.InvFreq[i] != r.InvFreq[i]/2 {
			t.Fatalf("linear inv_freq[%d] = %v, want %v", i, lin.InvFreq[i], r.InvFreq[i]/2)
		}
	}
	l3, err := NewRoPE(128, 500000, RoPEScaling{Type: "llama3", Factor: 8, LowFreqFactor: 1, HighFreqFactor: 4, OriginalMaxPositions: 8192}, 131072)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]float64{0: 1, 20: 0.016560440080994446, 40: 3.428102195952591e-05, 63: 3.068925988914511e-07} {
		if !near(l3.InvFreq[i], want) {
			t.Errorf("llama3 inv_freq[%d] = %v, want %v", i, l3.InvFreq[i], want)
		}
	}
	y, err := NewRoPE(64, 1e6, RoPEScaling{Type: "yarn", Factor: 4, OriginalMaxPositions: 32768}, 131072)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range map[int]float64{0: 1, 5: 0.1154781984689458, 10: 0.01333521432163324, 20: 4.445698525097307e-05, 31: 3.84981631514873e-07} {
		if !near(y.InvFreq[i], want) {
			t.Errorf("yarn inv_freq[%d] = %v, want %v", i, y.InvFreq[i], want)
		}
	}
	if !near(y.Scale, 1.138629436111989) {
		t.Errorf("yarn attention factor %v", y.Scale)
	}
	c, s := y.CosSin(7, 3)
	a := float64(float32(7) * y.InvFreq[3])
	if !near(c, math.Cos(a)*float64(y.Scale)) || !near(s, math.Sin(a)*float64(y.Scale)) {
		t.Errorf("CosSin(7, 3) = %v %v", c, s)
	}
}

func TestRoPEErrors(t *testing.T) {
	for _, s := range []RoPEScaling{{Type: "dynamic", Factor: 2}, {Type: "linear"}, {Type: "llama3", Factor: 8}, {Type: "yarn"}} {
		if _, err := NewRoPE(64, 1e4, s, 4096); err == nil {
			t.Errorf("%+v accepted", s)
		}
	}
	if _, err := NewRoPE(63, 1e4, RoPEScaling{}, 4096); err == nil {
		t.Error("odd dims accepted")
	}
}

// Proportional RoPE (Gemma 4's full layers): over a head of 64 columns with
// partial_rotary_factor 0.25, 8 frequencies base^(-2i/64) then 24 zeros.
func TestRoPEProportional(t *testing.T) {
	r, err := NewRoPE(64, 1e6, RoPEScaling{Type: "proportional", Proportion: 0.25}, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if r.Dims != 64 || len(r.InvFreq) != 32 {
		t.Fatalf("dims %d, %d frequencies", r.Dims, len(r.InvFreq))
	}
	for i, f := range r.InvFreq {
		want := 0.0
		if i < 8 {
			want = math.Pow(1e6, -float64(2*i)/64)
		}
		if want == 0 && f != 0 || want != 0 && !near(f, want) {
			t.Fatalf("proportional inv_freq[%d] = %v, want %v", i, f, want)
		}
	}
	if c, s := r.CosSin(1000, 20); c != 1 || s != 0 {
		t.Errorf("a zero frequency rotates: cos %v sin %v", c, s)
	}
	if _, err := NewRoPE(64, 1e6, RoPEScaling{Type: "proportional", Proportion: 1.5}, 4096); err == nil {
		t.Error("partial_rotary_factor 1.5 accepted")
	}
}

func TestRoPELongrope(t *testing.T) {
	short, long := []float64{1, 1.5, 2, 4}, []float64{2, 3, 8, 16}
	r, err := NewRoPE(8, 10000, RoPEScaling{Type: "longrope", OriginalMaxPositions: 4096, ShortFactor: short, LongFactor: long}, 131072)
	if err != nil {
		t.Fatal(err)
	}
	for i := range short {
		base := math.Pow(10000, float64(2*i)/8)
		if !near(r.InvFreq[i], 1/(short[i]*base)) || !near(r.LongInvFreq[i], 1/(long[i]*base)) {
			t.Errorf("inv_freq[%d] = %v / %v", i, r.InvFreq[i], r.LongInvFreq[i])
		}
	}
	// transformers: factor 131072/4096 = 32, attention factor sqrt(1 + ln 32 / ln 4096).
	if !near(r.Scale, math.Sqrt(1+math.Log(32)/math.Log(4096))) || r.Switch != 4096 {
		t.Errorf("scale %v, switch %d", r.Scale, r.Switch)
	}
	for _, p := range []int{4095, 4096} {
		f := r.InvFreq
		if p >= 4096 {
			f = r.LongInvFreq
		}
		c, _ := r.CosSin(p, 2)
		if want := math.Cos(float64(float32(p)*f[2])) * float64(r.Scale); !near(c, want) {
			t.Errorf("cos at %d = %v, want %v", p, c, want)
		}
	}
	if _, err := NewRoPE(8, 10000, RoPEScaling{Type: "longrope", OriginalMaxPositions: 4096, ShortFactor: short}, 131072); err == nil {
		t.Error("longrope without long_factor accepted")
	}
}

func TestRoPEPosScale(t *testing.T) {
	r, _ := NewRoPE(8, 10000, RoPEScaling{}, 1024)
	q, err := r.WithPosScale(PosScale{Beta: 0.1, Period: 16})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{0, 15, 16, 47, 48, 1000} {
		c0, s0 := r.CosSin(p, 1)
		c, s := q.CosSin(p, 1)
		f := 1 + 0.1*math.Log(1+math.Floor(float64(p)/16))
		if !near(c, float64(c0)*f) || !near(s, float64(s0)*f) {
			t.Errorf("position %d: %v %v, want ×%v of %v %v", p, c, s, f, c0, s0)
		}
	}
	if r.PosScale != nil || q.Plain() || !r.Plain() {
		t.Error("WithPosScale changed the original")
	}
	if _, err := r.WithPosScale(PosScale{Beta: 0.1}); err == nil {
		t.Error("a zero period accepted")
	}
}

// TestMRoPEAxis: the interleaved layout of Qwen3.5 (sections 11, 11, 10 over 32
// frequencies) and the contiguous one of Qwen2-VL.
func TestMRoPEAxis(t *testing.T) {
	m := &MRoPE{Section: [3]int{11, 11, 10}, Interleaved: true}
	got := ""
	for j := range 32 {
		got += fmt.Sprint(m.Axis(j))
	}
	if want := "01201201201201201201201201201201"; got != want {
		t.Errorf("interleaved: %s, want %s", got, want)
	}
	c := &MRoPE{Section: [3]int{2, 3, 3}}
	got = ""
	for j := range 8 {
		got += fmt.Sprint(c.Axis(j))
	}
	if got != "00111222" {
		t.Errorf("contiguous: %s", got)
	}
	// Equal parts make plain RoPE's angles.
	r, err := NewRoPE(16, 10000, RoPEScaling{}, 4096)
	if err != nil {
		t.Fatal(err)
	}
	cos, sin := make([]float32, 8), make([]float32, 8)
	r.RowAngles(m, [3]int{7, 7, 7}, cos, sin)
	for j := range 8 {
		a := float64(float32(7) * r.InvFreq[j])
		if math.Abs(float64(cos[j])-math.Cos(a)) > 1e-6 || math.Abs(float64(sin[j])-math.Sin(a)) > 1e-6 {
			t.Fatalf("angle %d: %v %v", j, cos[j], sin[j])
		}
	}
}
