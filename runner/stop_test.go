package runner

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// feed pushes the pieces one by one and returns what was emitted and whether a stop
// string ended it.
func feed(stops []string, pieces ...string) (string, bool) {
	f := &stopFilter{stops: stops}
	var out strings.Builder
	for _, p := range pieces {
		o, hit := f.push(p)
		out.WriteString(o)
		if hit {
			return out.String(), true
		}
	}
	out.WriteString(f.flush())
	return out.String(), false
}

func TestStopFilter(t *testing.T) {
	for _, tc := range []struct {
		stops  []string
		pieces []string
		want   string
		hit    bool
	}{
		{nil, []string{"a", "b"}, "ab", false},
		{[]string{"STOP"}, []string{"hello ", "ST", "OP", " never"}, "hello ", true},
		{[]string{"STOP"}, []string{"hello S", "T", "O", "P"}, "hello ", true},
		{[]string{"STOP"}, []string{"ST", "ART"}, "START", false},                // a prefix that did not become a stop
		{[]string{"STOP"}, []string{"xST"}, "xST", false},                        // held back, then flushed at the end
		{[]string{"\n\n", "User:"}, []string{"a\n", "Use", "r: b"}, "a\n", true}, // the earliest of several
		{[]string{"ab", "b"}, []string{"xab"}, "x", true},
		{[]string{"ab", "b"}, []string{"xa", "b"}, "x", true},
		{[]string{"éé"}, []string{"caf", "é", "é!"}, "caf", true},
		{[]string{"<|im_end|>"}, []string{"ok<|im", "_end", "|>tail"}, "ok", true},
	} {
		got, hit := feed(tc.stops, tc.pieces...)
		if got != tc.want || hit != tc.hit {
			t.Errorf("stops %q, pieces %q: got %q (hit %v), want %q (hit %v)", tc.stops, tc.pieces, got, hit, tc.want, tc.hit)
		}
	}
}

// Emitted text never contains a stop string nor ends with a prefix of one that was
// still possible, whatever the split.
func TestStopFilterEverySplit(t *testing.T) {
	text := "The answer is 42.\nQuestion: what next?"
	stops := []string{"\nQuestion:", "never"}
	for i := 1; i < len(text); i++ {
		for j := i; j < len(text); j++ {
			got, hit := feed(stops, text[:i], text[i:j], text[j:])
			if got != "The answer is 42." || !hit {
				t.Fatalf("split %d,%d: got %q hit %v", i, j, got, hit)
			}
		}
	}
	f := &stopFilter{stops: []string{"STOP"}}
	for _, p := range []string{"a", "S", "T", "O"} {
		out, _ := f.push(p)
		if strings.HasSuffix(out, "S") || strings.Contains(out, "ST") {
			t.Fatalf("emitted %q: part of a possible stop string", out)
		}
	}
}

// matched names the stop string that ended the text: the earliest one, not the first listed.
func TestStopFilterMatched(t *testing.T) {
	f := &stopFilter{stops: []string{"User:", "\n\n", "b"}}
	if _, hit := f.push("a\n\nUser: b"); !hit || f.matched != "\n\n" {
		t.Fatalf("hit %v, matched %q; want \"\\n\\n\"", hit, f.matched)
	}
	f = &stopFilter{stops: []string{"STOP"}}
	f.push("no stop here")
	if f.matched != "" {
		t.Fatalf("matched %q without a stop string", f.matched)
	}
}

func TestTruncatePrompt(t *testing.T) {
	p := make([]int32, 100)
	for i := range p {
		p[i] = int32(i)
	}
	if got := truncatePrompt(p, 101, 4); len(got) != 100 {
		t.Fatalf("a prompt that fits was cut to %d", len(got))
	}
	got := truncatePrompt(p, 40, 4)
	// keep 4, then the newest (40-4)/2 = 18 tokens.
	want := append([]int32{0, 1, 2, 3}, p[82:]...)
	if !slices.Equal(got, want) {
		t.Fatalf("truncated to %v, want %v", got, want)
	}
	// num_keep is capped at half the window: 5 kept, then the newest 2.
	if got := truncatePrompt(p, 10, 50); !slices.Equal(got, []int32{0, 1, 2, 3, 4, 98, 99}) {
		t.Fatalf("num_keep beyond num_ctx: %v", got)
	}
}

func TestOptionsValidate(t *testing.T) {
	if err := DefaultOptions().Validate(); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func(*Options){
		"num_ctx":       func(o *Options) { o.NumCtx = 0 },
		"num_batch":     func(o *Options) { o.NumBatch = -1 },
		"num_predict":   func(o *Options) { o.NumPredict = -3 },
		"repeat_last_n": func(o *Options) { o.RepeatLastN = -2 },
		"stop":          func(o *Options) { o.Stop = []string{""} },
	} {
		o := DefaultOptions()
		f(&o)
		if err := o.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("bad %s: error %v", name, err)
		}
	}
}

// Random texts, stop strings and splits against the plain answer: generation ends
// after the first piece that completes a stop string, cutting the text before the
// earliest stop string in what has arrived; otherwise all the text comes out.
func TestStopFilterRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", "ab", "é", "\n", " "}
	word := func(n int) string {
		var b strings.Builder
		for range n {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		return b.String()
	}
	for range 3000 {
		text := word(r.IntN(20))
		stops := []string{word(1 + r.IntN(3)), word(1 + r.IntN(4))}
		// Split at random rune boundaries.
		var pieces []string
		rest := []rune(text)
		for len(rest) > 0 {
			k := 1 + r.IntN(len(rest))
			pieces = append(pieces, string(rest[:k]))
			rest = rest[k:]
		}
		want, wantHit := text, false
		seen := ""
		for _, p := range pieces {
			seen += p
			first := -1
			for _, s := range stops {
				if i := strings.Index(seen, s); i >= 0 && (first < 0 || i < first) {
					first = i
				}
			}
			if first >= 0 {
				want, wantHit = seen[:first], true
				break
			}
		}
		got, hit := feed(stops, pieces...)
		if got != want || hit != wantHit {
			t.Fatalf("text %q stops %q pieces %q: got %q (%v), want %q (%v)", text, stops, pieces, got, hit, want, wantHit)
		}
	}
}
