// Package constraintest has test helpers for structured outputs: random JSON schemas of the
// keywords text/constrain supports, and a validator from an independent library.
package constraintest

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Target is a realistic answer to a schema, to replay through a real tokenizer.
type Target struct {
	Name, Schema, Text string
}

// Targets: objects with nested values, arrays of records with enums and numbers, a long
// free-text string, patterns and formats.
var Targets = []Target{
	{"person", `{"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string"},` +
		`"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},"required":["street","city","zip"]},` +
		`"tags":{"type":"array","items":{"type":"string"},"maxItems":5},"member":{"type":"boolean"}},"required":["name","age","address","tags","member"],"additionalProperties":false}`,
		`{"name": "Ada Lovelace", "age": 36, "email": "ada@example.org", "address": {"street": "12 St James's Square", "city": "London", "zip": "10001"}, "tags": ["mathematician", "writer", "analytical engine"], "member": true}`},
	{"inventory", `{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},"qty":{"type":"integer"},"price":{"type":"number"},` +
		`"status":{"enum":["in_stock","backorder","discontinued"]},"added":{"type":"string","format":"date"}},"required":["sku","qty","price","status","added"]},"minItems":1}`,
		"[\n  {\"sku\": \"ABC-1234\", \"qty\": 12, \"price\": 9.99, \"status\": \"in_stock\", \"added\": \"2024-03-15\"},\n" +
			"  {\"sku\": \"XYZ-0042\", \"qty\": 0, \"price\": 120.5, \"status\": \"backorder\", \"added\": \"2023-11-02\"},\n" +
			"  {\"sku\": \"QRS-7781\", \"qty\": 3, \"price\": 0.75, \"status\": \"discontinued\", \"added\": \"2022-01-28\"}\n]"},
	{"summary", `{"type":"object","properties":{"title":{"type":"string","maxLength":80},"summary":{"type":"string"},"keywords":{"type":"array","items":{"type":"string"}},"sentiment":{"enum":["positive","neutral","negative"]},"confidence":{"type":"number","minimum":0,"maximum":1}},"required":["title","summary","keywords","sentiment","confidence"]}`,
		`{"title": "Constrained decoding keeps model output valid", "summary": "The report describes how a language model server can ` +
			`restrict the tokens a model may choose at every step, so that the text it writes is always a valid JSON document ` +
			`that matches a schema the client provides. It explains the token trie, the automaton that tracks open objects, ` +
			`arrays and strings, and the cache that makes the mask cheap after the first time a state is seen. Measurements ` +
			`on a small model show that the overhead stays well below the time of one decoding step, even with a vocabulary ` +
			`of more than one hundred and fifty thousand tokens.", "keywords": ["structured output", "JSON schema", "decoding", "tokenizer"], ` +
			`"sentiment": "positive", "confidence": 0.92}`},
	{"any-json", `{"type":"object"}`,
		`{"id": 7, "values": [1.5, -2, 3e10, null, true], "nested": {"a": {"b": {"c": "deep"}}}, "text": "caf\u00e9 \"quoted\" \\ back\nslash", "empty": {}, "list": []}`},
}

// ReplayStats is what Replay measured.
type ReplayStats struct {
	Tokens int
	Mask   time.Duration // Apply (the mask, from the cache or a trie walk, written into the logits) and Accept
}

// Constraint is what Replay drives (*constrain.Constraint).
type Constraint interface {
	Apply(logits []float32) error
	Accept(id int32) error
}

// Replay runs the token ids of a target's text through a fresh constraint as a generation
// would: Apply to a logits vector of n entries, check that the next id is allowed, Accept it.
// At the end the output must be complete.
func Replay(t testing.TB, c Constraint, ids []int32, n int, eos int32) ReplayStats {
	t.Helper()
	logits := make([]float32, n)
	var st ReplayStats
	for i, id := range append(ids, eos) {
		for j := range logits {
			logits[j] = 0
		}
		start := time.Now()
		if err := c.Apply(logits); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
		if math.IsInf(float64(logits[id]), -1) {
			t.Fatalf("token %d (id %d) of the target is masked", i, id)
		}
		if id == eos {
			st.Mask += time.Since(start)
			break
		}
		if err := c.Accept(id); err != nil {
			t.Fatalf("token %d: %v", i, err)
		}
		st.Mask += time.Since(start)
		st.Tokens++
	}
	return st
}

// RandomSchema returns a random schema of the supported keywords.
func RandomSchema(rng *rand.Rand, depth int, defs map[string]any) map[string]any {
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
			props[name] = RandomSchema(rng, depth-1, defs)
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
		s := map[string]any{"type": "array", "items": RandomSchema(rng, depth-1, defs)}
		lo := rng.IntN(3)
		s["minItems"] = lo
		if rng.IntN(2) == 0 {
			s["maxItems"] = lo + rng.IntN(3)
		} else {
			s["maxItems"] = lo + 4
		}
		return s
	case 3:
		alts := []any{RandomSchema(rng, depth-1, defs), RandomSchema(rng, depth-1, defs)}
		if rng.IntN(3) == 0 {
			name := fmt.Sprintf("D%d", len(defs))
			defs[name] = RandomSchema(rng, depth-1, defs)
			alts = append(alts, map[string]any{"$ref": "#/$defs/" + name})
		}
		return map[string]any{"anyOf": alts}
	case 4:
		s := map[string]any{"type": "string"}
		switch rng.IntN(5) {
		case 0:
			s["maxLength"] = 1 + rng.IntN(40)
			s["minLength"] = rng.IntN(2)
		case 1:
			s["pattern"] = []string{`^[a-z]+$`, `^[A-Z]{2,3}-[0-9]{1,4}$`, `ab`, `^(red|green|blue)$`, `^\d+(\.\d+)?$`, `^[^"\\]{0,5}$`}[rng.IntN(6)]
		case 2:
			s["format"] = []string{"date", "date-time", "time", "uuid"}[rng.IntN(4)]
		}
		return s
	case 5:
		s := map[string]any{"type": []string{"integer", "number", "integer"}[rng.IntN(3)]}
		if rng.IntN(3) > 0 { // bounds
			bounds, gap := []float64{-1000, -7.5, -1, 0, 0.25, 1, 3, 9.99, 42, 1e6}, 1
			if s["type"] == "integer" { // two integers apart, so that exclusive bounds leave one
				bounds, gap = []float64{-1000, -7, -1, 0, 1, 3, 42, 1e6}, 2
			}
			i := rng.IntN(len(bounds) - gap)
			j := i + gap + rng.IntN(len(bounds)-gap-i)
			if rng.IntN(3) > 0 {
				s[[]string{"minimum", "exclusiveMinimum"}[rng.IntN(2)]] = bounds[i]
			}
			if rng.IntN(3) > 0 {
				s[[]string{"maximum", "exclusiveMaximum"}[rng.IntN(2)]] = bounds[j]
			}
		}
		return s
	case 6:
		return map[string]any{"enum": []any{"red", "green", 1, 12, nil, true, "a\"b", map[string]any{"k": []any{1, 2}}}[:1+rng.IntN(8)]}
	case 7:
		return map[string]any{"const": []any{"x", 3.5, false}[rng.IntN(3)]}
	case 8:
		if rng.IntN(2) == 0 { // oneOf: a discriminated union, or alternatives of different types
			var alts []any
			for i, kind := range []string{"cat", "dog", "fish"}[:2+rng.IntN(2)] {
				props := map[string]any{"kind": map[string]any{"const": kind}, fmt.Sprintf("p%d", i): RandomSchema(rng, depth-1, defs)}
				alts = append(alts, map[string]any{"type": "object", "properties": props, "required": []any{"kind"}})
			}
			if rng.IntN(2) == 0 {
				alts = []any{map[string]any{"type": "string", "maxLength": 5}, map[string]any{"type": "null"}, map[string]any{"type": "array", "maxItems": 2}}
			}
			return map[string]any{"oneOf": alts}
		}
		return map[string]any{"type": []any{"boolean", "null", []any{"string", "null"}, []any{"integer", "boolean"}}[rng.IntN(4)]}
	}
	return map[string]any{} // any value
}

// Validator compiles schema with santhosh-tekuri/jsonschema (formats asserted) and returns
// a function that checks a JSON text against it.
func Validator(t testing.TB, schema []byte) func(text string) error {
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
	return func(text string) error {
		inst, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return err
		}
		return s.Validate(inst)
	}
}
