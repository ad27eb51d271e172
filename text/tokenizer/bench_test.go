package tokenizer

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// mixedText builds about n bytes of mixed text from the corpus (scripts,
// code, emoji, numbers, whitespace runs): lines in random order, with one
// word in five replaced by random letters so that the BPE word cache does not
// see repeats only.
func mixedText(tb testing.TB, n int) string {
	lines := corpus(tb)
	rng := rand.New(rand.NewPCG(7, 7))
	var b strings.Builder
	for b.Len() < n {
		words := strings.Split(lines[rng.IntN(len(lines))], " ")
		for i := range words {
			if rng.IntN(5) == 0 {
				w := make([]byte, 3+rng.IntN(8))
				for j := range w {
					w[j] = byte('a' + rng.IntN(26))
				}
				words[i] = string(w)
			}
		}
		b.WriteString(strings.Join(words, " "))
		b.WriteByte('\n')
	}
	return b.String()
}

// BenchmarkEncode encodes 1 MB of mixed text with each family's tokenizer,
// starting from an empty word cache each time; it reports tokens/s.
func BenchmarkEncode(b *testing.B) {
	text := mixedText(b, 1<<20)
	for _, fam := range families {
		b.Run(fam, func(b *testing.B) {
			tok := family(b, fam)
			b.SetBytes(int64(len(text)))
			tokens := 0
			cpu0 := cpuTime()
			for b.Loop() {
				b.StopTimer()
				tok.model.cache = make(map[string][]int32)
				b.StartTimer()
				tokens += len(tok.Encode(text, false))
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(tokens)/(cpuTime()-cpu0).Seconds(), "tokens/cpu-s")
		})
	}
}

// BenchmarkDecodeStream decodes the ids of 1 MB of mixed text one token at a
// time, as generation does.
func BenchmarkDecodeStream(b *testing.B) {
	text := mixedText(b, 1<<20)
	for _, fam := range families {
		b.Run(fam, func(b *testing.B) {
			tok := family(b, fam)
			ids := tok.Encode(text, false)
			tokens := 0
			for b.Loop() {
				d := tok.NewStreamDecoder(false)
				for _, id := range ids {
					d.Add(id)
				}
				d.Flush()
				tokens += len(ids)
			}
			b.ReportMetric(float64(tokens)/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

func BenchmarkLoad(b *testing.B) {
	for _, fam := range families {
		b.Run(fam, func(b *testing.B) {
			dir := testdataDir(b, fam)
			for b.Loop() {
				if _, err := Load(dir); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoadPeer is the peer of BenchmarkLoad: reading the same files'
// vocab and merges with encoding/json alone, without building anything.
func BenchmarkLoadPeer(b *testing.B) {
	for _, fam := range families {
		b.Run(fam, func(b *testing.B) {
			data, err := os.ReadFile(filepath.Join(testdataDir(b, fam), "tokenizer.json"))
			if err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				var f struct {
					Model struct {
						Vocab  map[string]int32 `json:"vocab"`
						Merges json.RawMessage  `json:"merges"`
					} `json:"model"`
				}
				if err := json.Unmarshal(data, &f); err != nil {
					b.Fatal(err)
				}
				var merges []any
				if err := json.Unmarshal(f.Model.Merges, &merges); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cpuTime is the CPU time this process used: on a shared machine it measures
// the work better than wall time does (tokens/cpu-s beside tokens/s).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
