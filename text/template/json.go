package template

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
)

// filterToJSON is transformers' tojson, which replaces Jinja2's: Python's
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False),
// so ", " and ": " separators, insertion key order and no HTML escaping.
func filterToJSON(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("tojson", args, kw, "ensure_ascii", "indent", "separators", "sort_keys")
	if err != nil {
		return nil, err
	}
	e := jsonEncoder{ensureASCII: truthy(or(a[0], false)), sortKeys: truthy(or(a[3], false))}
	switch ind := or(a[1], nil).(type) {
	case nil:
	case string:
		e.indent, e.pretty = ind, true
	default:
		n, err := toInt(ind, "indent")
		if err != nil {
			return nil, err
		}
		if n > maxRepeatLen {
			return nil, errTooWide
		}
		e.indent, e.pretty = strings.Repeat(" ", int(max(n, 0))), true
	}
	e.itemSep, e.keySep = ", ", ": "
	if e.pretty {
		e.itemSep = ","
	}
	if seps := or(a[2], nil); seps != nil {
		s, ok := asSeq(seps)
		if !ok || len(s) != 2 {
			return nil, fmt.Errorf("separators must be a pair of strings")
		}
		e.itemSep, _ = asString(s[0])
		e.keySep, _ = asString(s[1])
	}
	var b strings.Builder
	if err := e.encode(&b, v, 0); err != nil {
		return nil, err
	}
	return b.String(), nil
}

type jsonEncoder struct {
	ensureASCII, sortKeys, pretty bool
	indent, itemSep, keySep       string
}

func (e *jsonEncoder) newline(b *strings.Builder, level int) {
	if e.pretty {
		b.WriteByte('\n')
		for i := 0; i < level; i++ {
			b.WriteString(e.indent)
		}
	}
}

func (e *jsonEncoder) encode(b *strings.Builder, v any, level int) error {
	if level > maxDepth {
		return fmt.Errorf("tojson: value nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(jsonFloat(x))
	case string:
		e.str(b, x)
	case Markup:
		e.str(b, string(x))
	case []any, tuple:
		seq, _ := asSeq(x)
		if len(seq) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range seq {
			if i > 0 {
				b.WriteString(e.itemSep)
			}
			e.newline(b, level+1)
			if err := e.encode(b, it, level+1); err != nil {
				return err
			}
		}
		e.newline(b, level)
		b.WriteByte(']')
	case *Dict:
		if len(x.keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := x.keys
		if e.sortKeys {
			sorted, err := sortValues(keys, func(k any) (any, error) { return k, nil }, false)
			if err != nil {
				return err
			}
			keys = sorted
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(e.itemSep)
			}
			e.newline(b, level+1)
			var ks string
			switch kk := k.(type) {
			case string:
				ks = kk
			case nil:
				ks = "null"
			case float64:
				ks = jsonFloat(kk)
			default:
				ks = pyStr(kk)
			}
			e.str(b, ks)
			b.WriteString(e.keySep)
			if err := e.encode(b, x.m[k], level+1); err != nil {
				return err
			}
		}
		e.newline(b, level)
		b.WriteByte('}')
	default:
		return fmt.Errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// jsonFloat is float.__repr__ with JSON's names for the non-finite values.
func jsonFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	case math.IsNaN(f):
		return "NaN"
	}
	return floatRepr(f)
}

func (e *jsonEncoder) str(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case e.ensureASCII && r > 0x7e:
				if r > 0xffff {
					hi, lo := utf16.EncodeRune(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, hi, lo)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// DecodeJSON decodes JSON into template values the way Python's json.loads does:
// objects keep their key order (as *Dict), integers stay integers and other numbers
// become floats. Pass its result (or a json.RawMessage, which Render decodes the same
// way) wherever key order or the int/float distinction reaches the rendered text,
// e.g. tool definitions rendered with tojson.
func DecodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeJSONValue(dec)
	if err != nil {
		return nil, fmt.Errorf("decode JSON: %w", err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, fmt.Errorf("decode JSON: unexpected data after the value")
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder) (any, error) {
	t, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch x := t.(type) {
	case json.Delim:
		switch x {
		case '{':
			d := NewDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("object key is not a string")
				}
				v, err := decodeJSONValue(dec)
				if err != nil {
					return nil, err
				}
				d.set(k, v)
			}
			_, err := dec.Token()
			return d, err
		case '[':
			out := []any{}
			for dec.More() {
				v, err := decodeJSONValue(dec)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		}
		return nil, fmt.Errorf("unexpected %v", x)
	case json.Number:
		return jsonNumber(x)
	case string, bool, nil:
		return x, nil
	}
	return nil, fmt.Errorf("unexpected JSON token %v", t)
}

func jsonNumber(n json.Number) (any, error) {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if i, err := strconv.ParseInt(s, 10, 64); err == nil {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil && !strings.Contains(err.Error(), "range") {
		return nil, err
	}
	return f, nil
}

// sortedKeys returns a Go map's keys in order, for maps converted to *Dict.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
