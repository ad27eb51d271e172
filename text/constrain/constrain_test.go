package constrain

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/text/constrain/constraintest"
)

// testVocab is a byte-level vocabulary: every single byte, JSON-ish pieces, words with and
// without a leading space, whitespace runs, multi-byte characters and pieces of them, and
// an EOS id.
func testVocab(rng *rand.Rand) (*Vocab, [][]byte, int32) {
	var toks [][]byte
	for b := range 256 {
		toks = append(toks, []byte{byte(b)})
	}
	pieces := []string{`{"`, `":`, `": "`, `",`, `", "`, `"}`, `"]`, `}]`, `]}`, `}}`, `},`, `},{"`, `[{"`, `["`,
		`": [`, `": {`, `": true`, `": false`, `": null`, `true`, `false`, `null`, `nu`, `ll`, `tr`, `ue`,
		`0`, `10`, `123`, `-1`, `.5`, `e+`, `E-`, `1e`, `\n`, `\"`, `\\`, `\u00`, `\ud8`, `\u0041`,
		"\n", "\n  ", "\n    ", "  ", "    ", " \"", "\t", "é", "日本", "\xe6\x97", "\xa5", "😀", "\xf0\x9f",
		`name`, `age`, `id`, `_`, `-`, `:`, `ab`, `abc`, `a-b`, `2024`, `-01-`, `T12`, `:00`, `Z`,
		"abcdefghijklmnopqrstuvwxyz0123", "long plain token é 日本語 of 32 chars", "==================", `"` + strings.Repeat("x", 20),
		`ab"`, `x",`, `e"}`, `c"`, `z\`, `ox"`}
	for _, p := range pieces {
		toks = append(toks, []byte(p))
	}
	words := []string{"the", "of", "name", "value", "item", "x", "list", "tag", "color", "red", "blue", "green"}
	for _, w := range words {
		toks = append(toks, []byte(w), []byte(" "+w), []byte(`"`+w+`"`), []byte(`"`+w))
	}
	for range 200 { // random printable runs
		n := 1 + rng.IntN(6)
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(0x20 + rng.IntN(0x5f))
		}
		toks = append(toks, b)
	}
	eos := int32(len(toks))
	toks = append(toks, nil) // EOS
	special := eos + 1
	toks = append(toks, nil) // a special token
	_ = special
	v := NewVocab(len(toks), func(id int32) ([]byte, bool) { return toks[id], toks[id] != nil }, []int32{eos})
	return v, toks, eos
}

// generate samples tokens with random logits through the constraint until it is finished,
// EOS is drawn, or maxSteps pass. It checks every mask against a brute-force one at some
// steps.
func generate(t testing.TB, rng *rand.Rand, c *Constraint, v *Vocab, toks [][]byte, eos int32, maxSteps int, check bool) (string, bool) {
	t.Helper()
	var out []byte
	logits := make([]float32, v.size+3) // longer than the vocabulary, as a model's may be
	for step := 0; step < maxSteps; step++ {
		if c.Finished() {
			return string(out), true
		}
		for i := range logits {
			logits[i] = rng.Float32() * 4
		}
		// Favour ends a little, as a trained model would, so that outputs finish.
		logits[eos] += 3
		if err := c.Apply(logits); err != nil {
			t.Fatalf("after %q: %v", out, err)
		}
		for i := v.size; i < len(logits); i++ {
			if logits[i] > -1e30 {
				t.Fatalf("id %d beyond the vocabulary is allowed", i)
			}
		}
		if check && step%7 == 0 {
			bruteForce(t, c, v, eos, out)
		}
		best := 0
		for i, l := range logits {
			if l > logits[best] {
				best = i
			}
		}
		if err := c.Accept(int32(best)); err != nil {
			t.Fatalf("after %q: accepting an allowed token: %v", out, err)
		}
		if int32(best) == eos {
			return string(out), true
		}
		out = append(out, toks[best]...)
	}
	return string(out), false
}

// bruteForce checks the cached trie-walk mask against trying every token on a copy of the
// state.
func bruteForce(t testing.TB, c *Constraint, v *Vocab, eos int32, out []byte) {
	t.Helper()
	mask := c.Mask()
	saved := State{}
	saved.copyFrom(&c.cur)
	for id := range int32(v.size) {
		want := false
		if b := v.bytes[id]; b != nil {
			want = c.AcceptBytes(b) == nil
			c.cur.copyFrom(&saved)
		} else if id == eos {
			want = c.Accepting()
		}
		if got := mask.has(id); got != want {
			t.Fatalf("after %q: token %d (%q): mask says %v, trying it says %v", out, id, v.bytes[id], got, want)
		}
	}
}

func TestRandomSchemas(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	v, toks, eos := testVocab(rng)
	n := 300
	if testing.Short() {
		n = 60
	}
	finished := 0
	for i := range n {
		defs := map[string]any{}
		s := constraintest.RandomSchema(rng, 3, defs)
		if len(defs) > 0 {
			s["$defs"] = defs
		}
		raw, _ := json.Marshal(s)
		sch, err := Compile(raw)
		if err != nil {
			t.Fatalf("schema %d %s: %v", i, raw, err)
		}
		val := constraintest.Validator(t, raw)
		for run := range 3 {
			c := sch.New(v)
			out, done := generate(t, rng, c, v, toks, eos, 600, i < 40)
			if !done {
				continue // a prefix: every token was checked as it came
			}
			finished++
			var inst any
			if err := json.Unmarshal([]byte(out), &inst); err != nil {
				t.Fatalf("schema %s run %d: output %q is not JSON: %v", raw, run, out, err)
			}
			if err := val(out); err != nil {
				t.Fatalf("schema %s run %d: output %q does not validate: %v", raw, run, out, err)
			}
		}
	}
	if finished < n*3/2 {
		t.Fatalf("only %d of %d generations finished", finished, 3*n)
	}
	t.Logf("%d of %d generations finished and validated", finished, 3*n)
}

// TestPlainStringBuckets: inside strings with every maxLength up to past the longest plain token,
// at every length reached, the mask (plain-token sets plus a walk of the other tokens) equals
// trying every token.
func TestPlainStringBuckets(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	v, _, eos := testVocab(rng)
	if v.maxPlain <= maxBucket {
		t.Fatalf("the test vocabulary's longest plain token has %d characters: no case past maxBucket", v.maxPlain)
	}
	for _, maxLen := range []int{0, 1, 5, maxBucket, maxBucket + 1, 25, v.maxPlain, v.maxPlain + 3} {
		for _, minLen := range []int{0, 3} {
			if minLen > maxLen {
				continue
			}
			plainBuckets(t, v, eos, fmt.Sprintf(`{"type":"string","minLength":%d,"maxLength":%d}`, minLen, maxLen), maxLen, true)
			// Two strings at once (anyOf): the longer limit decides which plain tokens fit.
			plainBuckets(t, v, eos, fmt.Sprintf(`{"anyOf":[{"type":"string","maxLength":3},{"type":"string","minLength":%d,"maxLength":%d}]}`, minLen, maxLen), maxLen, maxLen >= 3)
		}
	}
	for _, schema := range []string{`{"anyOf":[{"type":"string","maxLength":3},{"type":"string"}]}`,
		`{"anyOf":[{"type":"string","maxLength":3},{"type":"string","pattern":"^[a-z]*$"}]}`} {
		plainBuckets(t, v, eos, schema, 5, false)
	}
}

// plainBuckets walks a string of schema to n characters, checking every mask by brute force;
// with limit, a character past n must be refused.
func plainBuckets(t *testing.T, v *Vocab, eos int32, schema string, n int, limit bool) {
	t.Helper()
	sch, err := Compile(json.RawMessage(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := sch.New(v)
	out := []byte(`"`)
	if err := c.AcceptBytes(out); err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= n; i++ {
		bruteForce(t, c, v, eos, out)
		if i < n {
			if err := c.AcceptBytes([]byte("e")); err != nil {
				t.Fatalf("%s after %d characters: %v", schema, i, err)
			}
			out = append(out, 'e')
		}
	}
	if limit && c.AcceptBytes([]byte("a")) == nil {
		t.Fatalf("%s: a character past the limit was taken", schema)
	}
}

// TestTexts: texts a schema's automaton takes (as a complete value or as a prefix) or refuses.
func TestTexts(t *testing.T) {
	obj := `{"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"},"m":{"type":"boolean"}},"required":["a"]}`
	for _, c := range []struct {
		schema, text string
		want         string // "complete", "prefix" or "refused"
	}{
		{obj, `{"z":1,"a":"x","m":true}`, "complete"},
		{obj, `{"a":"x"}`, "complete"},
		{obj, `{"a":"x","z":1}`, "refused"}, // keys in the schema's order
		{obj, `{"z":1}`, "refused"},         // a is required
		{obj, `{"z":1,`, "prefix"},
		{obj, `{"m":true,"a":"x"}`, "refused"},
		{obj, `{"a":"x","b":1}`, "refused"}, // only the named properties
		{obj, `{ "a": "x" }`, "complete"},
		{obj, "{\n  \"a\": \"x\"\n}", "complete"},
		{obj, "{\n\n\"a\":\"x\"}", "refused"},   // a blank line
		{obj, `{  "a":"x"}`, "refused"},         // two spaces
		{obj, "\n\n {\"a\":\"x\"}", "complete"}, // any whitespace before the value
		{`{"type":"integer"}`, `-0`, "complete"},
		{`{"type":"integer"}`, `012`, "refused"},
		{`{"type":"integer"}`, `1.5`, "refused"},
		{`{"type":"number"}`, `-1.5e+10`, "complete"},
		{`{"type":"number"}`, `1e100`, "refused"}, // three exponent digits
		{`{"type":"number"}`, `1.`, "prefix"},
		{`{"enum":[1,12,"a"]}`, `1`, "complete"},
		{`{"enum":[1,12,"a"]}`, `12`, "complete"},
		{`{"enum":[1,12,"a"]}`, `13`, "refused"},
		{`{"type":"string"}`, `"caf\u00e9 \n"`, "complete"},
		{`{"type":"string"}`, `"\ud800"`, "refused"}, // a lone surrogate
		{`{"type":"string"}`, "\"a\x01\"", "refused"},
		{`{"type":"string"}`, "\"\xe0\x80\x80\"", "refused"}, // overlong UTF-8
		{`{"type":"string"}`, "\"日本\"", "complete"},
		{`{"type":"string","maxLength":2}`, `"日本"`, "complete"},
		{`{"type":"string","maxLength":2}`, `"日本語"`, "refused"},
		{`{"type":"string","minLength":2}`, `"a"`, "refused"},
		{`{"type":"string","pattern":"^[a-c]+$"}`, `"abc"`, "complete"},
		{`{"type":"string","pattern":"^[a-c]+$"}`, `"abd"`, "refused"},
		{`{"type":"string","pattern":"^[a-c]+$"}`, `""`, "refused"},
		{`{"type":"string","pattern":"x"}`, `"axb"`, "complete"}, // a search, not anchored
		{`{"type":"string","format":"date"}`, `"2024-02-28"`, "complete"},
		{`{"type":"string","format":"date"}`, `"2024-13-01"`, "refused"},
		{`{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2}`, `[]`, "refused"},
		{`{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2}`, `[1,2]`, "complete"},
		{`{"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":2}`, `[1,2,`, "refused"},
		{`{"anyOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}]}`, `{"a":"s"}`, "complete"},
		{`{"anyOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}]}`, `{"a":true}`, "refused"},
		{`{"$defs":{"n":{"type":"object","properties":{"next":{"$ref":"#/$defs/n"}}}},"$ref":"#/$defs/n"}`, `{"next":{"next":{}}}`, "complete"},
		{`{"$defs":{"d":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/d"}]}},"$ref":"#/$defs/d"}`, `null`, "complete"},
		{`"json"`, `{"a":[1,{"b":null}]}`, "complete"},
		{`"json"`, `[1]`, "refused"}, // format json is an object
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{"k":1,"j":2}`, "complete"},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{"k":"v"}`, "refused"},
		{`{"type":"object","additionalProperties":false}`, `{}`, "complete"},
		{`{"type":"object","additionalProperties":false}`, `{"a":1}`, "refused"},
		{`{"type":["string","null"]}`, `null`, "complete"},
		{`{"const":{"k":[1,2]}}`, `{"k":[1,2]}`, "complete"},
		{`{"type":"boolean"}`, `true `, "refused"}, // nothing after the value
		{`{"type":"integer","minimum":10,"maximum":20}`, `15`, "complete"},
		{`{"type":"integer","minimum":10,"maximum":20}`, `1`, "prefix"}, // 1 may become 10..19
		{`{"type":"integer","minimum":10,"maximum":20}`, `21`, "refused"},
		{`{"type":"integer","minimum":10,"maximum":20}`, `3`, "refused"}, // 3, 30.. are all out
		{`{"type":"integer","minimum":10,"maximum":20}`, `-`, "refused"},
		{`{"type":"integer","exclusiveMinimum":0}`, `0`, "refused"},
		{`{"type":"integer","exclusiveMinimum":0}`, `-`, "refused"},
		{`{"type":"integer","maximum":-3}`, `-3`, "complete"},
		{`{"type":"integer","maximum":-3}`, `-2`, "prefix"}, // -2x
		{`{"type":"integer","maximum":-3}`, `-0`, "refused"},
		{`{"type":"number","minimum":0,"maximum":1}`, `0.75`, "complete"},
		{`{"type":"number","minimum":0,"maximum":1}`, `1`, "complete"},
		{`{"type":"number","minimum":0,"maximum":1}`, `1.5`, "refused"},
		{`{"type":"number","minimum":0,"maximum":1}`, `1.0`, "complete"},
		{`{"type":"number","minimum":0,"maximum":1}`, `1e0`, "refused"},        // no exponent with bounds
		{`{"type":"number","exclusiveMaximum":1,"minimum":0}`, `1`, "refused"}, // 1, 1.x, 1x are all out
		{`{"type":"number","exclusiveMaximum":1,"minimum":0}`, `1.`, "refused"},
		{`{"type":"number","exclusiveMaximum":1,"minimum":0}`, `0.999999`, "complete"},
		{`{"type":"number","exclusiveMaximum":1,"minimum":0}`, `0.9999999`, "refused"}, // 6 decimals at most
		{`{"type":"number","minimum":2.5}`, `2.4`, "refused"},
		{`{"type":"number","minimum":2.5}`, `2.5`, "complete"},
		{`{"type":"number","minimum":2.5}`, `2`, "prefix"},
		{`{"minimum":0}`, `-1`, "refused"}, // the type follows from the keyword
		{`{"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k"]},{"type":"object","properties":{"k":{"const":"b"},"y":{"type":"string"}},"required":["k"]}]}`, `{"k":"b","y":"s"}`, "complete"},
		{`{"oneOf":[{"type":"object","properties":{"k":{"const":"a"},"x":{"type":"integer"}},"required":["k"]},{"type":"object","properties":{"k":{"const":"b"},"y":{"type":"string"}},"required":["k"]}]}`, `{"k":"a","y":"s"}`, "refused"},
		{`{"oneOf":[{"type":"string"},{"type":"null"}]}`, `null`, "complete"},
		{`{"type":"string","nullable":true}`, `null`, "complete"},
		{`{"type":"string","nullable":false}`, `null`, "refused"},
		{`{"type":"object","properties":{"a":false,"b":{"type":"null"}}}`, `{"b":null}`, "complete"},
		{`{"type":"object","properties":{"a":false,"b":{"type":"null"}}}`, `{"a":1}`, "refused"},
	} {
		sch, err := FromFormat(json.RawMessage(c.schema))
		if err != nil {
			t.Fatalf("%s: %v", c.schema, err)
		}
		con := sch.New(NewVocab(1, func(int32) ([]byte, bool) { return nil, false }, nil))
		got := "complete"
		if err := con.AcceptBytes([]byte(c.text)); err != nil {
			got = "refused"
		} else if !con.Accepting() {
			got = "prefix"
		}
		if got != c.want {
			t.Errorf("%s: %q is %s, want %s", c.schema, c.text, got, c.want)
		}
	}
}

// TestFinishedWithoutEOS: a top-level number ends when no token continues it, even where the
// vocabulary has no end-of-sequence token.
func TestFinishedWithoutEOS(t *testing.T) {
	toks := [][]byte{[]byte("1"), []byte("2")}
	v := NewVocab(len(toks), func(id int32) ([]byte, bool) { return toks[id], true }, nil)
	sch, err := Compile(json.RawMessage(`{"type":"integer"}`))
	if err != nil {
		t.Fatal(err)
	}
	c := sch.New(v)
	for i := range maxDigits {
		if c.Finished() {
			t.Fatalf("finished after %d digits", i)
		}
		if err := c.Accept(1); err != nil {
			t.Fatal(err)
		}
	}
	if !c.Finished() {
		t.Fatal("not finished after the most digits a number may have")
	}
}

// TestPatternWalk: inside pattern strings (the DFA-only walk, and the machine after a quote or
// backslash), at every character of a matching value, the mask equals trying every token.
func TestPatternWalk(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	v, _, eos := testVocab(rng)
	for _, c := range []struct{ pattern, value string }{
		{`^[a-z ]{1,12}$`, "the red fox"},
		{`^[A-Z]{2,3}-[0-9]{1,4}$`, "AB-1234"},
		{`ab`, `xx\"ab\\y`},
		{`^[^"\\]*$`, "no quotes"},
		{`^(red|green|blue)$`, "green"},
	} {
		for _, wrap := range []string{`{"type":"string","pattern":%q,"maxLength":20}`, `{"type":"string","pattern":%q,"minLength":5,"maxLength":12}`,
			`{"type":"object","properties":{"s":{"type":"string","pattern":%q}},"required":["s"]}`} {
			schema := fmt.Sprintf(wrap, c.pattern)
			sch, err := Compile(json.RawMessage(schema))
			if err != nil {
				t.Fatalf("%s: %v", schema, err)
			}
			con := sch.New(v)
			out := []byte(`"`)
			if strings.HasPrefix(wrap, `{"type":"object"`) {
				out = []byte(`{"s":"`)
			}
			if err := con.AcceptBytes(out); err != nil {
				t.Fatal(err)
			}
			for i := 0; ; i++ {
				bruteForce(t, con, v, eos, out)
				if i == len(c.value) {
					break
				}
				if err := con.AcceptBytes([]byte{c.value[i]}); err != nil {
					t.Fatalf("%s: %q: %v", schema, c.value[:i+1], err)
				}
				out = append(out, c.value[i])
			}
		}
	}
}
