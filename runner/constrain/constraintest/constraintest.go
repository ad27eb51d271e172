// Package constraintest has test helpers for structured outputs: random JSON schemas of the
// keywords runner/constrain supports, and a validator from an independent library.
package constraintest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

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
