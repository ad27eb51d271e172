package template

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Values inside the engine are Python's, in Go clothes:
//
//	None nil, bool, int int64, float float64, str string, Markup, list []any,
//	tuple tuple, dict *Dict (insertion-ordered), Undefined, namespace *namespace,
//	and callables (macros, globals, bound methods, the loop object's functions).
//
// Values handed in from Go are converted once, at Render, by convert (see input.go).

// Dict is a Python dict: keys keep their insertion order, which tojson, items() and
// iteration expose. Keys are str, int, float, bool or None.
type Dict struct {
	keys []any
	m    map[any]any
}

// NewDict returns an empty Dict.
func NewDict() *Dict { return &Dict{m: map[any]any{}} }

// Set adds or replaces key; a new key goes last.
func (d *Dict) Set(key string, v any) { d.set(key, v) }

// Get returns the value stored under key.
func (d *Dict) Get(key string) (any, bool) { v, ok := d.m[key]; return v, ok }

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []string {
	out := make([]string, 0, len(d.keys))
	for _, k := range d.keys {
		out = append(out, pyStr(k))
	}
	return out
}

// Len is the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

func (d *Dict) set(key, v any) {
	key = normKey(key)
	if _, ok := d.m[key]; !ok {
		d.keys = append(d.keys, key)
	}
	d.m[key] = v
}

func (d *Dict) get(key any) (any, bool) {
	if d == nil {
		return nil, false
	}
	switch key.(type) {
	case nil, bool, int64, float64, string:
	case Markup:
	default:
		return nil, false
	}
	v, ok := d.m[normKey(key)]
	return v, ok
}

// normKey makes keys that Python hashes equal compare equal in a Go map.
func normKey(k any) any {
	switch x := k.(type) {
	case Markup:
		return string(x)
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<62 {
			return int64(x)
		}
	case bool:
		if x {
			return int64(1)
		}
		return int64(0)
	}
	return k
}

func (d *Dict) copy() *Dict {
	c := &Dict{keys: append([]any(nil), d.keys...), m: make(map[any]any, len(d.m))}
	for k, v := range d.m {
		c.m[k] = v
	}
	return c
}

type tuple []any

// Markup is a string marked safe (the safe and escape filters make one). Adding a plain
// string to it escapes that string, as markupsafe does.
type Markup string

// Undefined is a name or attribute that does not exist. Like Jinja2's default
// Undefined it prints as "", is false, iterates as empty, and fails on anything else.
type Undefined struct {
	hint string
}

func (u Undefined) err() error { return fmt.Errorf("%s", u.hint) }

func undefinedName(name string) Undefined {
	return Undefined{hint: fmt.Sprintf("'%s' is undefined", name)}
}

func undefinedAttr(obj any, attr any) Undefined {
	if s, ok := attr.(string); ok {
		return Undefined{hint: fmt.Sprintf("'%s object' has no attribute '%s'", typeName(obj), s)}
	}
	return Undefined{hint: fmt.Sprintf("'%s object' has no element %s", typeName(obj), pyRepr(attr))}
}

type namespace struct{ d *Dict }

func typeName(v any) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case Markup:
		return "Markup"
	case []any:
		return "list"
	case tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case Undefined:
		return "Undefined"
	case *namespace:
		return "Namespace"
	case *loopObj:
		return "LoopContext"
	case *macro:
		return "Macro"
	case *iterator:
		return x.kind
	case *view:
		return x.kind
	}
	return "function"
}

// truthy is Python's bool().
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case Markup:
		return x != ""
	case []any:
		return len(x) > 0
	case tuple:
		return len(x) > 0
	case *Dict:
		return len(x.keys) > 0
	case Undefined:
		return false
	case *view:
		return len(x.items) > 0
	}
	return true
}

// asString returns the text of a str or Markup.
func asString(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case Markup:
		return string(x), true
	}
	return "", false
}

// pyStr is Python's str().
func pyStr(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case Markup:
		return string(x)
	case Undefined:
		return ""
	}
	return pyRepr(v)
}

// pyRepr is Python's repr().
func pyRepr(v any) string {
	var b strings.Builder
	writeRepr(&b, v, nil)
	return b.String()
}

// writeRepr writes repr(v); active holds the containers being written, so that a
// value that contains itself (through a namespace) prints "{...}" or "[...]" as in
// Python.
func writeRepr(b *strings.Builder, v any, active map[any]bool) {
	var id any
	switch x := v.(type) {
	case *Dict:
		id = x
	case []any:
		if len(x) > 0 {
			id = &x[0]
		}
	}
	if id != nil {
		if active[id] {
			if _, ok := v.(*Dict); ok {
				b.WriteString("{...}")
			} else {
				b.WriteString("[...]")
			}
			return
		}
		if active == nil {
			active = map[any]bool{}
		}
		active[id] = true
		defer delete(active, id)
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(floatRepr(x))
	case string:
		writeStrRepr(b, x)
	case Markup:
		b.WriteString("Markup(")
		writeStrRepr(b, string(x))
		b.WriteString(")")
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e, active)
		}
		b.WriteByte(']')
	case tuple:
		b.WriteByte('(')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e, active)
		}
		if len(x) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *Dict:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, k, active)
			b.WriteString(": ")
			writeRepr(b, x.m[k], active)
		}
		b.WriteByte('}')
	case Undefined:
		b.WriteString("Undefined")
	case *namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, x.d, active)
		b.WriteString(">")
	case *view:
		b.WriteString(x.String())
	case *iterator:
		fmt.Fprintf(b, "<%s object>", x.kind)
	default:
		fmt.Fprintf(b, "<%s>", typeName(v))
	}
}

// floatRepr is Python's repr(float): the shortest round-tripping digits, positional
// notation for exponents in [-4, 16), scientific otherwise.
func floatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // -d.ddde±XX
	mant, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	neg := strings.HasPrefix(mant, "-")
	mant = strings.TrimPrefix(mant, "-")
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp >= -4 && exp < 16 {
		if exp >= 0 {
			if len(digits) <= exp+1 {
				out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
			} else {
				out = digits[:exp+1] + "." + digits[exp+1:]
			}
		} else {
			out = "0." + strings.Repeat("0", -exp-1) + digits
		}
	} else {
		out = digits[:1]
		if len(digits) > 1 {
			out += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		out += fmt.Sprintf("e%s%02d", sign, exp)
	}
	if neg {
		out = "-" + out
	}
	return out
}

// writeStrRepr quotes like Python's repr(str).
func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == utf8.RuneError:
			b.WriteRune(r)
		case !unicode.IsPrint(r):
			switch {
			case r < 0x100:
				fmt.Fprintf(b, `\x%02x`, r)
			case r < 0x10000:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				fmt.Fprintf(b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
}

// number returns v as a float64 and whether it is an int (bool counts as int).
func number(v any) (f float64, i int64, isInt, ok bool) {
	switch x := v.(type) {
	case bool:
		if x {
			return 1, 1, true, true
		}
		return 0, 0, true, true
	case int64:
		return float64(x), x, true, true
	case float64:
		return x, 0, false, true
	}
	return 0, 0, false, false
}

// equal is Python's ==.
func equal(a, b any) bool {
	if fa, ia, aInt, ok := number(a); ok {
		if fb, ib, bInt, ok := number(b); ok {
			if aInt && bInt {
				return ia == ib
			}
			return fa == fb
		}
		return false
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case string, Markup:
		s, _ := asString(x)
		t, ok := asString(b)
		return ok && s == t
	case []any:
		y, ok := b.([]any)
		return ok && seqEqual(x, y)
	case tuple:
		y, ok := b.(tuple)
		return ok && seqEqual(x, y)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || len(x.keys) != len(y.keys) {
			return false
		}
		for _, k := range x.keys {
			v, ok := y.m[k]
			if !ok || !equal(x.m[k], v) {
				return false
			}
		}
		return true
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case *view:
		y, ok := b.(*view)
		return ok && x.kind == y.kind && x.kind != "dict_values" && seqEqual(x.items, y.items)
	}
	return a == b
}

func seqEqual(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// compare is Python's ordering for numbers, strings, lists and tuples: -1, 0 or 1.
func compare(a, b any) (int, error) {
	if fa, ia, aInt, ok := number(a); ok {
		if fb, ib, bInt, ok := number(b); ok {
			if aInt && bInt {
				return cmpOrdered(ia, ib), nil
			}
			return cmpOrdered(fa, fb), nil
		}
	}
	if s, ok := asString(a); ok {
		if t, ok := asString(b); ok {
			return strings.Compare(s, t), nil
		}
	}
	sa, okA := asSeq(a)
	sb, okB := asSeq(b)
	if okA && okB && typeName(a) == typeName(b) {
		for i := 0; i < len(sa) && i < len(sb); i++ {
			if equal(sa[i], sb[i]) {
				continue
			}
			return compare(sa[i], sb[i])
		}
		return cmpOrdered(len(sa), len(sb)), nil
	}
	return 0, fmt.Errorf("'<' not supported between instances of '%s' and '%s'", typeName(a), typeName(b))
}

func cmpOrdered[T int | int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func asSeq(v any) ([]any, bool) {
	switch x := v.(type) {
	case []any:
		return x, true
	case tuple:
		return x, true
	}
	return nil, false
}

// iterate returns the items a for loop over v visits: a list's items, a dict's keys,
// a string's characters; Undefined is empty.
func iterate(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case tuple:
		return x, nil
	case *Dict:
		return append([]any(nil), x.keys...), nil
	case string, Markup:
		s, _ := asString(x)
		out := make([]any, 0, len(s))
		for _, r := range s {
			out = append(out, string(r))
		}
		return out, nil
	case Undefined:
		return nil, nil
	case *view:
		return x.items, nil
	case *iterator:
		return drain(x.next)
	}
	return nil, fmt.Errorf("'%s' object is not iterable", typeName(v))
}

func length(v any) (int, error) {
	switch x := v.(type) {
	case string:
		return utf8.RuneCountInString(x), nil
	case Markup:
		return utf8.RuneCountInString(string(x)), nil
	case []any:
		return len(x), nil
	case tuple:
		return len(x), nil
	case *Dict:
		return len(x.keys), nil
	case Undefined:
		return 0, nil
	case *namespace:
		return len(x.d.keys), nil
	case *view:
		return len(x.items), nil
	}
	return 0, fmt.Errorf("object of type '%s' has no len()", typeName(v))
}

// contains is Python's "item in container".
func contains(container, item any) (bool, error) {
	switch x := container.(type) {
	case string, Markup:
		s, _ := asString(x)
		t, ok := asString(item)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(item))
		}
		return strings.Contains(s, t), nil
	case []any, tuple:
		seq, _ := asSeq(x)
		for _, e := range seq {
			if equal(e, item) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		switch item.(type) {
		case []any, *Dict:
			return false, fmt.Errorf("unhashable type: '%s'", typeName(item))
		}
		_, ok := x.get(item)
		return ok, nil
	case Undefined:
		return false, nil
	case *view, *iterator:
		next, _ := pull(x)
		for {
			v, ok, err := next()
			if err != nil || !ok {
				return false, err
			}
			if equal(v, item) {
				return true, nil
			}
		}
	}
	return false, fmt.Errorf("argument of type '%s' is not iterable", typeName(container))
}

// sortValues sorts a copy of items with Python's ordering (stable).
func sortValues(items []any, key func(any) (any, error), reverse bool) ([]any, error) {
	out := append([]any(nil), items...)
	keys := make([]any, len(out))
	for i, it := range out {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		keys[i] = k
	}
	idx := make([]int, len(out))
	for i := range idx {
		idx[i] = i
	}
	var err error
	sort.SliceStable(idx, func(i, j int) bool {
		c, e := compare(keys[idx[i]], keys[idx[j]])
		if e != nil && err == nil {
			err = e
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	if err != nil {
		return nil, err
	}
	res := make([]any, len(out))
	for i, k := range idx {
		res[i] = out[k]
	}
	return res, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
