package constrain

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/mlxg/mlxg/text/constrain/constraintest"
)

// gemmaToJSON reads a value in Gemma 4's notation (bare keys, strings between <|"|>
// markers) and writes it as JSON: the reference the tests check outputs against.
func gemmaToJSON(s string) (string, error) {
	var out strings.Builder
	i := 0
	var value func() error
	value = func() error {
		switch {
		case strings.HasPrefix(s[i:], Gemma4Quote):
			i += len(Gemma4Quote)
			end := strings.Index(s[i:], Gemma4Quote)
			if end < 0 {
				return fmt.Errorf("an unclosed string at %d", i)
			}
			b, _ := json.Marshal(s[i : i+end])
			out.Write(b)
			i += end + len(Gemma4Quote)
		case i < len(s) && (s[i] == '{' || s[i] == '['):
			open, obj := s[i], s[i] == '{'
			close := byte(']')
			if obj {
				close = '}'
			}
			out.WriteByte(open)
			i++
			for first := true; ; first = false {
				for i < len(s) && strings.IndexByte(" \n\t\r", s[i]) >= 0 {
					i++
				}
				if i < len(s) && s[i] == close {
					out.WriteByte(close)
					i++
					return nil
				}
				if !first {
					if i >= len(s) || s[i] != ',' {
						return fmt.Errorf("no comma at %d of %q", i, s)
					}
					out.WriteByte(',')
					i++
					for i < len(s) && strings.IndexByte(" \n\t\r", s[i]) >= 0 {
						i++
					}
				}
				if obj {
					c := strings.IndexByte(s[i:], ':')
					if c < 0 {
						return fmt.Errorf("a key without a colon at %d", i)
					}
					k, _ := json.Marshal(strings.TrimSpace(s[i : i+c]))
					out.Write(k)
					out.WriteByte(':')
					i += c + 1
					for i < len(s) && strings.IndexByte(" \n\t\r", s[i]) >= 0 {
						i++
					}
				}
				if err := value(); err != nil {
					return err
				}
			}
		default:
			j := i
			for j < len(s) && strings.IndexByte(",]} \n\t\r", s[j]) < 0 {
				j++
			}
			if j == i {
				return fmt.Errorf("no value at %d of %q", i, s)
			}
			out.WriteString(s[i:j])
			i = j
		}
		return nil
	}
	for i < len(s) && strings.IndexByte(" \n\t\r", s[i]) >= 0 {
		i++
	}
	if err := value(); err != nil {
		return "", err
	}
	if strings.TrimSpace(s[i:]) != "" {
		return "", fmt.Errorf("%q after the value", s[i:])
	}
	return out.String(), nil
}

// gemmaVocab is testVocab with Gemma's marker as a token of its own and pieces of it.
func gemmaVocab(rng *rand.Rand) (*Vocab, [][]byte, int32) {
	_, toks, eos := testVocab(rng)
	toks = toks[:eos]
	for _, p := range []string{Gemma4Quote, "<", "<|", `|"|>`, `"|>`, "|>", "|", ":", "a:", "name:", "x:", `"`, "\n",
		Gemma4Quote + "red" + Gemma4Quote, "red" + Gemma4Quote, Gemma4Quote + ",", "<b>", "a<", "<|\"", "{x:", ",y:"} {
		toks = append(toks, []byte(p))
	}
	eos = int32(len(toks))
	toks = append(toks, nil)
	v := NewVocab(len(toks), func(id int32) ([]byte, bool) { return toks[id], toks[id] != nil }, []int32{eos})
	return v, toks, eos
}

func TestGemma4Texts(t *testing.T) {
	obj := `{"type":"object","properties":{"z":{"type":"integer"},"a":{"type":"string"},"m":{"type":"boolean"}},"required":["a"]}`
	q := func(s string) string { return Gemma4Quote + s + Gemma4Quote }
	for _, c := range []struct {
		schema, text string
		want         string // "complete", "prefix" or "refused"
	}{
		{obj, `{z:1,a:` + q("x") + `,m:true}`, "complete"},
		{obj, `{a:` + q("x") + `}`, "complete"},
		{obj, `{a:` + q(`say "hi" \ <b> a<|b <|"| c`) + `}`, "complete"}, // quotes, backslashes and broken markers are text
		{obj, "{a:" + q("two\nlines\ttab") + "}", "complete"},
		{obj, `{a:` + q("x") + `,z:1}`, "refused"}, // keys in the schema's order
		{obj, `{z:1}`, "refused"},                  // a is required
		{obj, `{"a":` + q("x") + `}`, "refused"},   // keys are bare
		{obj, `{a:"x"}`, "refused"},                // strings are marked
		{obj, `{a:` + Gemma4Quote + "x<|", "prefix"},
		{obj, `{a:` + Gemma4Quote + "x<|\"|", "prefix"},
		{obj, `{z:1,a`, "prefix"},
		{obj, `{b:1}`, "refused"},
		{`{"enum":["red","blue",3]}`, q("red"), "complete"},
		{`{"enum":["red","blue",3]}`, q("re"), "refused"},
		{`{"enum":["red","blue",3]}`, `3`, "complete"},
		{`{"enum":["a\"b"]}`, q(`a"b`), "complete"},
		{`{"type":"string","maxLength":3}`, q("abc"), "complete"},
		{`{"type":"string","maxLength":3}`, q("abcd"), "refused"},
		{`{"type":"string","maxLength":3}`, q("ab<"), "complete"},
		{`{"type":"string","pattern":"^[a-c]+$"}`, q("abc"), "complete"},
		{`{"type":"string","pattern":"^[a-c]+$"}`, q("ab<"), "refused"},
		{`{"type":"array","items":{"type":"string"}}`, `[` + q("a") + `,` + q("b") + `]`, "complete"},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{k:1,j:2}`, "complete"},
		{`{"type":"object","additionalProperties":{"type":"integer"}}`, `{k:` + q("v") + `}`, "refused"},
		{`"json"`, `{a:[1,{b:null}],s:` + q("t") + `}`, "complete"},
		{`{"type":"object","properties":{"o":{"type":"object","properties":{"n":{"type":"number"}}}}}`, `{o:{n:-1.5}}`, "complete"},
		{`{"type":"integer"}`, q("1"), "refused"},
		{`{"type":["string","null"]}`, `null`, "complete"},
		{`{"type":["string","null"]}`, q(""), "complete"},
	} {
		sch, err := FromFormat(json.RawMessage(c.schema))
		if err != nil {
			t.Fatalf("%s: %v", c.schema, err)
		}
		con := sch.Gemma4().New(NewVocab(1, func(int32) ([]byte, bool) { return nil, false }, nil))
		got := "complete"
		if err := con.AcceptBytes([]byte(c.text)); err != nil {
			got = "refused"
		} else if !con.Accepting() {
			got = "prefix"
		}
		if got != c.want {
			t.Errorf("%s: %q is %s, want %s", c.schema, c.text, got, c.want)
		}
		// The JSON schema itself is untouched by its Gemma 4 form.
		if js := sch.New(NewVocab(1, func(int32) ([]byte, bool) { return nil, false }, nil)); js.AcceptBytes([]byte(`{"a":"x"}`)) != nil && c.schema == obj {
			t.Errorf("the JSON form of %s refuses JSON", c.schema)
		}
	}
}

// TestGemma4RandomSchemas generates values of random schemas in Gemma 4's notation with
// random logits, checks masks against trying every token, and validates every finished
// output, read back as JSON, against its schema.
func TestGemma4RandomSchemas(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	v, toks, eos := gemmaVocab(rng)
	n := 120
	if testing.Short() {
		n = 30
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
		for run := range 2 {
			c := sch.Gemma4().New(v)
			out, done := generate(t, rng, c, v, toks, eos, 400, i < 25)
			if !done {
				continue
			}
			finished++
			js, err := gemmaToJSON(out)
			if err != nil {
				t.Fatalf("schema %s run %d: output %q is not Gemma 4's notation: %v", raw, run, out, err)
			}
			if err := val(js); err != nil {
				t.Fatalf("schema %s run %d: output %q (as JSON %s) does not validate: %v", raw, run, out, js, err)
			}
		}
	}
	if finished < n {
		t.Fatalf("only %d of %d generations finished", finished, 2*n)
	}
	t.Logf("%d of %d generations finished and validated", finished, 2*n)
}

// TestGemma4Call: a call in Gemma 4's notation, NAME{…}, over an object of one property
// per tool: one name of the tools, its arguments valid against that tool's schema, then
// nothing; masks agree with trying every token along random generations, and every
// finished call names a tool and validates.
func TestGemma4Call(t *testing.T) {
	weather := `{"type":"object","properties":{"city":{"type":"string","maxLength":8},"days":{"type":"integer","minimum":1,"maximum":7}},"required":["city","days"]}`
	zone := `{"type":"object","properties":{"zone":{"enum":["UTC","CET"]}},"required":["zone"]}`
	schema := `{"type":"object","properties":{"get_weather":` + weather + `,"get_time":` + zone + `,"get":{"type":"object"}},"additionalProperties":false}`
	sch, err := Compile(json.RawMessage(schema))
	if err != nil {
		t.Fatal(err)
	}
	q := func(s string) string { return Gemma4Quote + s + Gemma4Quote }
	for _, c := range []struct{ text, want string }{
		{`get_time{zone:` + q("UTC") + `}`, "complete"},
		{`get_weather{city:` + q("Oslo") + `,days:3}`, "complete"},
		{`get{}`, "complete"},
		{`get{a:1}`, "complete"},
		{`get_time{zone:` + q("PST") + `}`, "refused"},
		{`get_weather{city:` + q("Oslo") + `}`, "refused"}, // days is required
		{`get_weather{days:3}`, "refused"},
		{`get_tim{`, "refused"},
		{`{`, "refused"},
		{`}`, "refused"},
		{`get_time:{`, "refused"},
		{`get_time{zone:` + q("UTC") + `},`, "refused"},
		{`get_time{zone:` + q("UTC") + `}get{}`, "refused"}, // one call
		{`get_time{zone:` + Gemma4Quote + "UT", "prefix"},
		{`get`, "prefix"},
	} {
		con := sch.Gemma4Call().New(NewVocab(1, func(int32) ([]byte, bool) { return nil, false }, nil))
		got := "complete"
		if err := con.AcceptBytes([]byte(c.text)); err != nil {
			got = "refused"
		} else if !con.Finished() {
			got = "prefix"
		}
		if got != c.want {
			t.Errorf("%q is %s, want %s", c.text, got, c.want)
		}
	}

	rng := rand.New(rand.NewPCG(9, 10))
	v, toks, eos := gemmaVocab(rng)
	tools := map[string]func(string) error{
		"get_weather": constraintest.Validator(t, []byte(weather)),
		"get_time":    constraintest.Validator(t, []byte(zone)),
		"get":         constraintest.Validator(t, []byte(`{"type":"object"}`)),
	}
	finished := 0
	for run := range 40 {
		c := sch.Gemma4Call().New(v)
		out, done := generate(t, rng, c, v, toks, eos, 300, run < 10)
		if !done {
			continue
		}
		finished++
		i := strings.IndexByte(out, '{')
		if i < 0 {
			t.Fatalf("run %d: %q has no arguments", run, out)
		}
		val, ok := tools[out[:i]]
		if !ok {
			t.Fatalf("run %d: %q calls no tool", run, out)
		}
		js, err := gemmaToJSON(out[i:])
		if err != nil {
			t.Fatalf("run %d: %q: %v", run, out, err)
		}
		if err := val(js); err != nil {
			t.Fatalf("run %d: %q (as JSON %s): %v", run, out, js, err)
		}
	}
	if finished < 20 {
		t.Fatalf("only %d of 40 calls finished", finished)
	}
}
