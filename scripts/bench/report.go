package main

import (
	"fmt"
	"strings"
)

// pick returns one metric of the measured samples (rep > 0) of an engine and scenario.
func pick(samples []Sample, engine, quant, scenario string, metric func(Sample) float64) []float64 {
	var xs []float64
	for _, s := range samples {
		if s.Rep > 0 && s.Engine == engine && s.Quant == quant && s.Scenario == scenario {
			xs = append(xs, metric(s))
		}
	}
	return xs
}

var (
	prefill = func(s Sample) float64 { return float64(s.PrefillTPS) }
	decode  = func(s Sample) float64 { return float64(s.DecodeTPS) }
	ttft    = func(s Sample) float64 { return float64(s.TTFT) }
)

// Rows builds one bit width's table: a row per metric, a column per engine (mlxg first), and
// the mlxg/peer ratio of the medians for each peer.
func Rows(cfg Config, engines []*Engine, samples []Sample) [][]string {
	var rows [][]string
	add := func(label string, sums []Summary) {
		r := []string{label}
		for _, s := range sums {
			r = append(r, FormatSummary(s))
		}
		for _, peer := range sums[min(1, len(sums)):] { // mlxg over each peer
			r = append(r, formatNum(Ratio(sums[0], peer)))
		}
		rows = append(rows, r)
	}
	metric := func(label, scenario string, m func(Sample) float64) {
		var sums []Summary
		for _, e := range engines {
			sums = append(sums, Summarize(pick(samples, e.Name, fmt.Sprintf("q%d", e.Bits), scenario, m)))
		}
		n := 0
		for _, s := range sums {
			n = max(n, s.N)
		}
		if n == 0 { // leave out a metric nobody measured
			return
		}
		if n < cfg.Repeats { // say so when a cell has fewer samples than the header's repeats
			label += fmt.Sprintf(" [%d run%s]", n, map[bool]string{true: "s"}[n > 1])
		}
		add(label, sums)
	}
	p0 := fmt.Sprintf("prompt-%d", cfg.Prompts[0])
	for _, p := range cfg.Prompts {
		metric(fmt.Sprintf("prefill tok/s, %d-token prompt", p), fmt.Sprintf("prompt-%d", p), prefill)
	}
	for _, p := range cfg.Prompts {
		metric(fmt.Sprintf("TTFT s, %d-token prompt (lower is better)", p), fmt.Sprintf("prompt-%d", p), ttft)
	}
	metric(fmt.Sprintf("decode tok/s, %d tokens after %d", cfg.Decode, cfg.Prompts[0]), p0, decode)
	var share []Summary
	for _, e := range engines {
		xs := pick(samples, e.Name, fmt.Sprintf("q%d", e.Bits), p0, decode)
		for i := range xs {
			if e.CeilingTPS > 0 {
				xs[i] = 100 * xs[i] / e.CeilingTPS
			} else {
				xs[i] = nan
			}
		}
		share = append(share, Summarize(xs))
	}
	add("decode, % of bandwidth ceiling", share)
	for _, p := range cfg.Prompts[1:] {
		metric(fmt.Sprintf("decode tok/s, %d tokens after %d", cfg.LongDecode, p), fmt.Sprintf("prompt-%d", p), decode)
	}
	if cfg.Prefix {
		n := cfg.PrefixTokens
		metric(fmt.Sprintf("TTFT s, %d-token prompt, cold", n), "prefix-cold", ttft)
		metric("TTFT s, same prompt again (RAM cache)", "prefix-hit", ttft)
		metric("TTFT s, same prompt after restart (SSD cache)", "prefix-restart", ttft)
	}
	one := func(label string, v func(e *Engine) float64) {
		var sums []Summary
		for _, e := range engines {
			x := v(e)
			if x > 0 {
				sums = append(sums, Summary{N: 1, Median: x, Min: x, Max: x})
			} else {
				sums = append(sums, Summary{})
			}
		}
		add(label, sums)
	}
	one("peak RSS MiB, server process tree (lower is better)", func(e *Engine) float64 { return float64(e.PeakRSS) / (1 << 20) })
	one("KV cache bytes per token (mlxg: its policy's layout; peers: f16)", func(e *Engine) float64 { return float64(e.KVBytes) })
	one("weights read per token, MiB", func(e *Engine) float64 { return float64(e.BytesPerToken) / (1 << 20) })
	one("bandwidth ceiling, tok/s", func(e *Engine) float64 { return e.CeilingTPS })
	return rows
}

// report renders the header lines and one table per bit width.
func (b *Bench) report() string {
	c, m := b.Cfg, b.res.Machine
	var s strings.Builder
	peers := orNone(m.Ollama)
	if m.LlamaCpp != "" {
		peers += " and " + m.LlamaCpp
	}
	fmt.Fprintf(&s, "\nmlxg %s vs %s on %s (%d cores, %.0f GB), %s shape, %d threads, %d repeats after a warm-up; medians (min–max)\n",
		m.Commit, peers, m.CPU, m.Cores, m.MemTotalGB, c.Shape, c.Threads, c.Repeats)
	bws := make([]string, len(m.Bandwidth))
	for i, v := range m.Bandwidth {
		bws[i] = fmt.Sprintf("%.2f", v/1e9)
	}
	fmt.Fprintf(&s, "load average %.2f at the start, %.2f at the end; memory read bandwidth %s GB/s (best used for the ceiling); sampling: temperature %g, seed %d\n\n",
		m.LoadStart, loadAverage(), strings.Join(bws, " and "), c.Temperature, c.SampleSeed)
	for _, bits := range c.Bits {
		var es []*Engine
		for _, e := range b.res.Engines {
			if e.Bits == bits {
				es = append(es, e)
			}
		}
		if len(es) == 0 { // not reached: the run stopped before it
			continue
		}
		header := []string{fmt.Sprintf("%d-bit", bits)}
		for _, e := range es {
			header = append(header, e.Label)
		}
		for _, e := range es[1:] {
			header = append(header, "mlxg/"+e.Name)
		}
		s.WriteString(Table(header, Rows(c, es, b.res.Samples)))
		var kv []string
		for _, e := range es {
			kv = append(kv, e.Name+" "+e.KVLayout)
		}
		fmt.Fprintf(&s, "KV caches: %s\n\n", strings.Join(kv, "; "))
	}
	return s.String()
}

func orNone(s string) string {
	if s == "" {
		return "no peer"
	}
	return s
}
