package constrain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
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
		`name`, `age`, `id`, `_`, `-`, `:`, `ab`, `abc`, `a-b`, `2024`, `-01-`, `T12`, `:00`, `Z`}
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

// randSchema returns a random schema of the supported keywords.
func randSchema(rng *rand.Rand, depth int, defs map[string]any) map[string]any {
	k := rng.IntN(10)
	if depth <= 0 && k < 4 {
		k = 4 + rng.IntN(6)
	}
	switch k {
	case 0, 1:
		props := map[string]any{}
		var order []string
		req := []any{}
		n := 1 + rng.IntN(4)
		for i := range n {
			name := fmt.Sprintf("%s%d", []string{"name", "a", "tags", "é", "x y", `q"t`}[rng.IntN(6)], i)
			props[name] = randSchema(rng, depth-1, defs)
			order = append(order, name)
			if rng.IntN(2) == 0 {
				req = append(req, name)
			}
		}
		s := map[string]any{"type": "object", "properties": props, "required": req}
		if rng.IntN(2) == 0 {
			s["additionalProperties"] = false
		}
		return s
	case 2:
		s := map[string]any{"type": "array", "items": randSchema(rng, depth-1, defs)}
		lo := rng.IntN(3)
		s["minItems"] = lo
		if rng.IntN(2) == 0 {
			s["maxItems"] = lo + rng.IntN(3)
		} else {
			s["maxItems"] = lo + 4
		}
		return s
	case 3:
		alts := []any{randSchema(rng, depth-1, defs), randSchema(rng, depth-1, defs)}
		if rng.IntN(3) == 0 {
			name := fmt.Sprintf("D%d", len(defs))
			defs[name] = randSchema(rng, depth-1, defs)
			alts = append(alts, map[string]any{"$ref": "#/$defs/" + name})
		}
		return map[string]any{"anyOf": alts}
	case 4:
		s := map[string]any{"type": "string"}
		switch rng.IntN(5) {
		case 0:
			s["maxLength"] = 1 + rng.IntN(20)
			s["minLength"] = rng.IntN(2)
		case 1:
			s["pattern"] = []string{`^[a-z]+$`, `^[A-Z]{2,3}-[0-9]{1,4}$`, `ab`, `^(red|green|blue)$`, `^\d+(\.\d+)?$`, `^[^"\\]{0,5}$`}[rng.IntN(6)]
		case 2:
			s["format"] = []string{"date", "date-time", "time", "uuid"}[rng.IntN(4)]
		}
		return s
	case 5:
		return map[string]any{"type": []string{"integer", "number", "integer"}[rng.IntN(3)]}
	case 6:
		return map[string]any{"enum": []any{"red", "green", 1, 12, nil, true, "a\"b", map[string]any{"k": []any{1, 2}}}[:1+rng.IntN(8)]}
	case 7:
		return map[string]any{"const": []any{"x", 3.5, false}[rng.IntN(3)]}
	case 8:
		return map[string]any{"type": []any{"boolean", "null", []any{"string", "null"}, []any{"integer", "boolean"}}[rng.IntN(4)]}
	}
	return map[string]any{} // any value
}

func validator(t testing.TB, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("schema.json")
	if err != nil {
		t.Fatalf("validator: %v\n%s", err, schema)
	}
	return s
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
		s := randSchema(rng, 3, defs)
		if len(defs) > 0 {
			s["$defs"] = defs
		}
		raw, _ := json.Marshal(s)
		sch, err := Compile(raw)
		if err != nil {
			t.Fatalf("schema %d %s: %v", i, raw, err)
		}
		val := validator(t, raw)
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
			doc, _ := jsonschema.UnmarshalJSON(strings.NewReader(out))
			if err := val.Validate(doc); err != nil {
				t.Fatalf("schema %s run %d: output %q does not validate: %v", raw, run, out, err)
			}
		}
	}
	if finished < n*3/2 {
		t.Fatalf("only %d of %d generations finished", finished, 3*n)
	}
	t.Logf("%d of %d generations finished and validated", finished, 3*n)
}
