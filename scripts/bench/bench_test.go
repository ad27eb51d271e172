package main

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/internal/testdata"
)

func TestSummarize(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 9; n++ {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = r.Float64()*100 + 1
		}
		got := Summarize(append(slices.Clone(xs), nan)) // a NaN is a missing value, not a sample
		s := slices.Sorted(slices.Values(xs))
		// Reference: the median is the value with as many samples below as above.
		var want float64
		if n%2 == 1 {
			want = s[n/2]
		} else {
			want = (s[n/2-1] + s[n/2]) / 2
		}
		if got.N != n || got.Median != want || got.Min != s[0] || got.Max != s[n-1] {
			t.Errorf("n=%d: Summarize = %+v, want N %d median %v min %v max %v", n, got, n, want, s[0], s[n-1])
		}
	}
	if got := Summarize([]float64{nan}); got.N != 0 {
		t.Errorf("Summarize(NaN) = %+v, want no values", got)
	}
}

func TestRatioAndFormat(t *testing.T) {
	a := Summarize([]float64{30, 10, 20})
	b := Summarize([]float64{40, 50})
	if got := Ratio(a, b); math.Abs(got-20.0/45) > 1e-12 {
		t.Errorf("Ratio = %v, want %v", got, 20.0/45)
	}
	if got := Ratio(a, Summary{}); !math.IsNaN(got) {
		t.Errorf("Ratio with a missing side = %v, want NaN", got)
	}
	for _, c := range []struct {
		s    Summary
		want string
	}{
		{a, "20.0 (10.0–30.0)"},
		{Summarize([]float64{1234.4, 987.6}), "1111 (988–1234)"},
		{Summarize([]float64{0.25}), "0.250"},
		{Summarize([]float64{3.14159, 2.5, 7}), "3.14 (2.50–7.00)"},
		{Summary{}, "-"},
	} {
		if got := FormatSummary(c.s); got != c.want {
			t.Errorf("FormatSummary(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestTable(t *testing.T) {
	got := Table([]string{"4-bit", "mlxg", "ollama", "ratio"}, [][]string{
		{"prefill tok/s", "70.0 (60.0–80.0)", "200", "0.350"},
		{"peak RSS MiB", "512", "-"},
	})
	want := "" +
		"| 4-bit         |             mlxg | ollama | ratio |\n" +
		"| ------------- | ---------------: | -----: | ----: |\n" +
		"| prefill tok/s | 70.0 (60.0–80.0) |    200 | 0.350 |\n" +
		"| peak RSS MiB  |              512 |      - |       |\n"
	if got != want {
		t.Errorf("Table:\n%s\nwant:\n%s", got, want)
	}
}

func TestSumWords(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 7, 8, 9, 1000, 4099} {
		p := make([]uint64, n)
		var want uint64
		for i := range p {
			p[i] = r.Uint64()
			want += p[i]
		}
		if got := sumWords(p); got != want {
			t.Errorf("sumWords(%d words) = %d, want %d", n, got, want)
		}
		for _, th := range []int{1, 2, 3, 16} {
			if got := parallelSum(p, th); got != want {
				t.Errorf("parallelSum(%d words, %d threads) = %d, want %d", n, th, got, want)
			}
		}
	}
}

func TestMeasureBandwidth(t *testing.T) {
	bw := MeasureBandwidth(64<<20, 2, 2)
	// Any machine reads memory faster than 100 MB/s and slower than 10 TB/s.
	if bw < 1e8 || bw > 1e13 {
		t.Errorf("MeasureBandwidth = %.3g B/s, outside any plausible range", bw)
	}
}

func TestCeilingAndBytesPerToken(t *testing.T) {
	ts := []TensorBytes{
		{Name: "model.embed_tokens.weight", Bytes: 1000 * 64, Rows: 1000},
		{Name: "model.embed_tokens.scales", Bytes: 1000 * 4, Rows: 1000},
		{Name: "model.layers.0.mlp.up_proj.weight", Bytes: 5000, Rows: 50},
		{Name: "model.norm.weight", Bytes: 128, Rows: 64},
	}
	if got, want := BytesPerToken(ts, "model.embed_tokens.", true), int64(64000+4000+5000+128); got != want {
		t.Errorf("tied: %d bytes per token, want %d", got, want)
	}
	if got, want := BytesPerToken(ts, "model.embed_tokens.", false), int64(64+4+5000+128); got != want {
		t.Errorf("untied: %d bytes per token, want %d (one embedding row)", got, want)
	}
	if got := Ceiling(10e9, 500e6); got != 20 {
		t.Errorf("Ceiling(10 GB/s, 500 MB) = %v, want 20", got)
	}
	if got := Ceiling(10e9, 0); got != 0 {
		t.Errorf("Ceiling with no weights = %v, want 0", got)
	}
}

func TestGGUFTensors(t *testing.T) {
	got, err := GGUFTensors([]GGMLTensor{
		{Name: "token_embd.weight", Type: "Q6_K", Shape: []uint64{896, 151936}},
		{Name: "blk.0.attn_q.weight", Type: "Q4_K", Shape: []uint64{896, 896}},
		{Name: "blk.0.attn_q.bias", Type: "F32", Shape: []uint64{896}},
		{Name: "blk.0.ffn_down.weight", Type: "Q8_0", Shape: []uint64{4864, 896}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []TensorBytes{
		{"token_embd.weight", 896 * 151936 / 256 * 210, 151936},
		{"blk.0.attn_q.weight", 896 * 896 / 256 * 144, 896},
		{"blk.0.attn_q.bias", 896 * 4, 1},
		{"blk.0.ffn_down.weight", 4864 * 896 / 32 * 34, 896},
	}
	if !slices.Equal(got, want) {
		t.Errorf("GGUFTensors = %v, want %v", got, want)
	}
	if _, err := GGUFTensors([]GGMLTensor{{Name: "x", Type: "IQ9_Z", Shape: []uint64{32}}}); err == nil || !strings.Contains(err.Error(), "IQ9_Z") {
		t.Errorf("unknown type: err = %v, want one naming the type", err)
	}
	if _, err := GGUFTensors([]GGMLTensor{{Name: "x", Type: "Q4_0", Shape: []uint64{33}}}); err == nil {
		t.Error("33 elements of Q4_0: no error, want a partial-block error")
	}
}

func TestRows(t *testing.T) {
	cfg := Config{Prompts: []int{128, 1024}, Decode: 128, LongDecode: 16}
	es := []*Engine{{Name: "mlxg", Bits: 4, CeilingTPS: 100, PeakRSS: 512 << 20}, {Name: "ollama", Bits: 4, CeilingTPS: 50}}
	var ss []Sample
	for rep, v := range []float64{1000, 10, 20, 30} { // rep 0 is the warm-up and must not count
		ss = append(ss,
			Sample{Engine: "mlxg", Quant: "q4", Scenario: "prompt-128", Rep: rep, PrefillTPS: Num(v), DecodeTPS: Num(v), TTFT: Num(v)},
			Sample{Engine: "ollama", Quant: "q4", Scenario: "prompt-128", Rep: rep, PrefillTPS: Num(2 * v), DecodeTPS: Num(v / 2), TTFT: Num(v)})
	}
	rows := Rows(cfg, es, ss)
	find := func(prefix string) []string {
		for _, r := range rows {
			if strings.HasPrefix(r[0], prefix) {
				return r
			}
		}
		t.Fatalf("no row %q in %v", prefix, rows)
		return nil
	}
	if r := find("prefill tok/s, 128"); !slices.Equal(r[1:], []string{"20.0 (10.0–30.0)", "40.0 (20.0–60.0)", "0.500"}) {
		t.Errorf("prefill row = %q", r)
	}
	if r := find("decode, % of"); !slices.Equal(r[1:], []string{"20.0 (10.0–30.0)", "20.0 (10.0–30.0)", "1.00"}) {
		t.Errorf("ceiling share row = %q", r)
	}
	if r := find("peak RSS"); !slices.Equal(r[1:], []string{"512", "-", "-"}) {
		t.Errorf("RSS row = %q", r)
	}
	cfg.Repeats = 3 // prompt-128 has 3 measured samples: no count in its label
	if r := find("prefill tok/s, 128"); r[0] != "prefill tok/s, 128-token prompt" {
		t.Errorf("label of a full cell = %q", r[0])
	}
	ss = append(ss, Sample{Engine: "mlxg", Quant: "q4", Scenario: "prompt-1024", Rep: 1, PrefillTPS: 7, TTFT: 1, DecodeTPS: 1})
	rows = Rows(cfg, es, ss)
	if r := find("prefill tok/s, 1024"); r[0] != "prefill tok/s, 1024-token prompt [1 run]" || !slices.Equal(r[1:], []string{"7.00", "-", "-"}) {
		t.Errorf("cell measured once = %q", r)
	}
	cfg.Repeats = 0
	rows = Rows(cfg, es, ss[:8])
	for _, r := range rows {
		if strings.HasPrefix(r[0], "prefill tok/s, 1024") {
			t.Errorf("a metric nobody measured has a row: %q", r)
		}
	}
}

func TestPrompter(t *testing.T) {
	p, err := NewPrompter(testdata.Tokenizer(t, "qwen3"))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for seed := uint64(1); seed <= 20; seed++ {
		for _, n := range []int{2, 128, 1000} {
			s, err := p.Prompt(n, seed) // checks the token count itself
			if err != nil {
				t.Fatal(err)
			}
			if n == 128 {
				head := strings.Join(strings.Fields(s)[:2], " ")
				if seen[head] {
					t.Errorf("seed %d: prompt starts %q like an earlier seed's", seed, head)
				}
				seen[head] = true
			}
		}
	}
	if _, err := p.Prompt(1, 1); err == nil {
		t.Error("a 1-token prompt: no error")
	}
}

func TestNumJSON(t *testing.T) {
	raw, err := json.Marshal([]Num{1.5, Num(nan)})
	if err != nil || string(raw) != "[1.5,null]" {
		t.Fatalf("Marshal = %s, %v; want [1.5,null]", raw, err)
	}
	var back []Num
	if err := json.Unmarshal(raw, &back); err != nil || back[0] != 1.5 || !math.IsNaN(float64(back[1])) {
		t.Errorf("Unmarshal = %v, %v", back, err)
	}
}

func TestOllamaGGUF(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, text string) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	manifest := func(name, digest string) {
		write(filepath.Join("manifests", "registry.ollama.ai", "library", name, "latest"), `{"schemaVersion":2,"layers":[
			{"mediaType":"application/vnd.ollama.image.template","digest":"sha256:aaa"},
			{"mediaType":"application/vnd.ollama.image.model","digest":"`+digest+`"}]}`)
	}
	manifest("good", "sha256:0123abcd")
	write(filepath.Join("blobs", "sha256-0123abcd"), "GGUF")
	if got, err := ollamaGGUF(dir, "good"); err != nil || got != filepath.Join(dir, "blobs", "sha256-0123abcd") {
		t.Errorf("ollamaGGUF(good) = %q, %v", got, err)
	}
	manifest("noblob", "sha256:ffff")
	manifest("escape", "sha256:../../x")
	write(filepath.Join("manifests", "registry.ollama.ai", "library", "nomodel", "latest"), `{"layers":[]}`)
	for _, name := range []string{"noblob", "escape", "nomodel", "missing"} {
		if got, err := ollamaGGUF(dir, name); err == nil {
			t.Errorf("ollamaGGUF(%s) = %q, %v: want an error", name, got, err)
		}
	}
}

func TestRowsTwoPeers(t *testing.T) {
	cfg := Config{Prompts: []int{128}, Decode: 128, Repeats: 1}
	es := []*Engine{{Name: "mlxg", Bits: 8}, {Name: "ollama", Bits: 8}, {Name: "llamacpp", Bits: 8}}
	ss := []Sample{
		{Engine: "mlxg", Quant: "q8", Scenario: "prompt-128", Rep: 1, PrefillTPS: 30, DecodeTPS: 9, TTFT: 1},
		{Engine: "ollama", Quant: "q8", Scenario: "prompt-128", Rep: 1, PrefillTPS: 60, DecodeTPS: 3, TTFT: 2},
		{Engine: "llamacpp", Quant: "q8", Scenario: "prompt-128", Rep: 1, PrefillTPS: 15, DecodeTPS: 9, TTFT: 4},
	}
	rows := Rows(cfg, es, ss)
	if r := rows[0]; !slices.Equal(r, []string{"prefill tok/s, 128-token prompt", "30.0", "60.0", "15.0", "0.500", "2.00"}) {
		t.Errorf("prefill row = %q", r)
	}
	for _, r := range rows {
		if len(r) != 6 {
			t.Errorf("row %q: want a label, 3 engines and 2 ratios", r)
		}
	}
}

func TestLlamaCppScriptParses(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	if out, err := exec.Command(node, "--check", "llamacpp-server.mjs").CombinedOutput(); err != nil {
		t.Fatalf("node --check llamacpp-server.mjs: %v\n%s", err, out)
	}
}

// The spec table pairs each round's speculative run with the plain run of the same round.
func TestSpecTable(t *testing.T) {
	var samples []SpecSample
	for r, tps := range [][2]float64{{10, 40}, {20, 25}, {5, 20}} {
		for m, mode := range []string{"plain", "spec"} {
			samples = append(samples, SpecSample{Backend: "cpu", Target: "m", Drafter: "lookup", Workload: "edit", Mode: mode,
				Repeat: r, Tokens: 100, TPS: tps[m], Drafted: 50, Kept: 40, Passes: 10, Same: true})
		}
	}
	samples[5].Same = false
	out := specTable(samples)
	// Rounds' ratios 4, 1.25 and 4: the median is 4 (a ratio of the medians would be 25/10).
	for _, want := range []string{" 4.00x ", " 80.0% ", " 0.40 ", " NO "} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
