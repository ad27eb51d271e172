package template

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type filterFunc func(r *state, v any, args []any, kw *Dict) (any, error)

type testFunc func(r *state, v any, args []any) (bool, error)

// missing marks a parameter the caller left out.
type missing struct{}

func given(v any) bool { _, m := v.(missing); return !m }

// bind matches positional and keyword arguments to parameter names, Python style.
func bind(fname string, args []any, kw *Dict, names ...string) ([]any, error) {
	out := make([]any, len(names))
	for i := range out {
		out[i] = missing{}
	}
	if len(args) > len(names) {
		return nil, fmt.Errorf("%s() takes at most %d arguments (%d given)", fname, len(names), len(args))
	}
	copy(out, args)
	if kw != nil {
		for _, k := range kw.keys {
			ks, _ := k.(string)
			i := -1
			for j, n := range names {
				if n == ks {
					i = j
				}
			}
			if i < 0 {
				return nil, fmt.Errorf("%s() got an unexpected keyword argument '%s'", fname, ks)
			}
			if i < len(args) {
				return nil, fmt.Errorf("%s() got multiple values for argument '%s'", fname, ks)
			}
			out[i] = kw.m[k]
		}
	}
	return out, nil
}

func or(v, def any) any {
	if given(v) {
		return v
	}
	return def
}

func toInt(v any, what string) (int64, error) {
	if _, i, isInt, ok := number(v); ok && isInt {
		return i, nil
	}
	return 0, fmt.Errorf("%s must be an integer, not %s", what, typeName(v))
}

// softStr is Jinja2's soft_str: Markup stays Markup, everything else becomes str().
func softStr(v any) any {
	if m, ok := v.(Markup); ok {
		return m
	}
	return pyStr(v)
}

// sameKind returns s as the same kind of string as like (Markup or str).
func sameKind(like any, s string) any {
	if _, ok := like.(Markup); ok {
		return Markup(s)
	}
	return s
}

var filters map[string]filterFunc

func init() {
	filters = map[string]filterFunc{
		"abs": func(r *state, v any, args []any, kw *Dict) (any, error) {
			f, i, isInt, ok := number(v)
			if !ok {
				return nil, fmt.Errorf("bad operand type for abs(): '%s'", typeName(v))
			}
			if isInt {
				if i < 0 {
					return -i, nil
				}
				return i, nil
			}
			return math.Abs(f), nil
		},
		"attr": func(r *state, v any, args []any, kw *Dict) (any, error) {
			a, err := bind("attr", args, kw, "name")
			if err != nil {
				return nil, err
			}
			name, _ := asString(a[0])
			switch x := v.(type) {
			case *namespace:
				if val, ok := x.d.m[name]; ok {
					return val, nil
				}
			case *loopObj:
				if val, ok := x.attr(name); ok {
					return val, nil
				}
			case Undefined:
				return nil, x.err()
			default:
				if isMethod(v, name) {
					return boundMethod{v, name}, nil
				}
			}
			return undefinedAttr(v, name), nil
		},
		"batch": filterBatch,
		"capitalize": func(r *state, v any, args []any, kw *Dict) (any, error) {
			return sameKind(v, capitalize(pyStr(v))), nil
		},
		"center": func(r *state, v any, args []any, kw *Dict) (any, error) {
			a, err := bind("center", args, kw, "width")
			if err != nil {
				return nil, err
			}
			w, err := toInt(or(a[0], int64(80)), "width")
			if err != nil {
				return nil, err
			}
			if w > maxRepeatLen {
				return nil, errTooWide
			}
			return pad(pyStr(v), int(w), "^", ' '), nil
		},
		"count":    filterLength,
		"length":   filterLength,
		"default":  filterDefault,
		"d":        filterDefault,
		"dictsort": filterDictsort,
		"escape":   filterEscape,
		"e":        filterEscape,
		"forceescape": func(r *state, v any, args []any, kw *Dict) (any, error) {
			return Markup(htmlEscape(pyStr(v))), nil
		},
		"first": func(r *state, v any, args []any, kw *Dict) (any, error) {
			next, err := pull(v)
			if err != nil {
				return nil, err
			}
			item, ok, err := next()
			if err != nil {
				return nil, err
			}
			if !ok {
				return Undefined{hint: "No first item, sequence was empty."}, nil
			}
			return item, nil
		},
		"last": func(r *state, v any, args []any, kw *Dict) (any, error) {
			if it, ok := v.(*iterator); ok {
				return nil, fmt.Errorf("'%s' object is not reversible", it.kind)
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			if len(items) == 0 {
				return Undefined{hint: "No last item, sequence was empty."}, nil
			}
			return items[len(items)-1], nil
		},
		"float": func(r *state, v any, args []any, kw *Dict) (any, error) {
			a, err := bind("float", args, kw, "default")
			if err != nil {
				return nil, err
			}
			if u, ok := v.(Undefined); ok {
				return nil, u.err() // float(Undefined) fails, and Jinja2 does not catch that
			}
			if f, ok := toFloat(v); ok {
				return f, nil
			}
			return or(a[0], 0.0), nil
		},
		"int": func(r *state, v any, args []any, kw *Dict) (any, error) {
			a, err := bind("int", args, kw, "default", "base")
			if err != nil {
				return nil, err
			}
			base, err := toInt(or(a[1], int64(10)), "base")
			if err != nil {
				return nil, err
			}
			if u, ok := v.(Undefined); ok {
				return nil, u.err() // int(Undefined) fails, and Jinja2 does not catch that
			}
			if i, ok := toIntValue(v, int(base)); ok {
				return i, nil
			}
			return or(a[0], int64(0)), nil
		},
		"format": func(r *state, v any, args []any, kw *Dict) (any, error) {
			s, _ := asString(softStr(v))
			if kw != nil && len(kw.keys) > 0 {
				if len(args) > 0 {
					return nil, fmt.Errorf("can't handle positional and keyword arguments at the same time")
				}
				return percentFormat(s, kw)
			}
			return percentFormat(s, tuple(args))
		},
		"groupby": filterGroupby,
		"indent":  filterIndent,
		"items": func(r *state, v any, args []any, kw *Dict) (any, error) {
			return lazily(func() ([]any, error) {
				switch x := v.(type) {
				case Undefined:
					return nil, nil
				case *Dict:
					return dictItems(x), nil
				}
				return nil, fmt.Errorf("can only get item pairs from a mapping, not %s", typeName(v))
			}), nil
		},
		"join": filterJoin,
		"list": func(r *state, v any, args []any, kw *Dict) (any, error) {
			items, err := iterate(v)
			return append([]any{}, items...), err
		},
		"lower": func(r *state, v any, args []any, kw *Dict) (any, error) { return sameKind(v, pyLower(pyStr(v))), nil },
		"upper": func(r *state, v any, args []any, kw *Dict) (any, error) { return sameKind(v, pyUpper(pyStr(v))), nil },
		"map":   filterMap,
		"max":   func(r *state, v any, args []any, kw *Dict) (any, error) { return minMax(r, v, args, kw, true) },
		"min":   func(r *state, v any, args []any, kw *Dict) (any, error) { return minMax(r, v, args, kw, false) },
		"select": func(r *state, v any, args []any, kw *Dict) (any, error) {
			return selectReject(r, v, args, kw, false, true)
		},
		"reject": func(r *state, v any, args []any, kw *Dict) (any, error) {
			return selectReject(r, v, args, kw, false, false)
		},
		"selectattr": func(r *state, v any, args []any, kw *Dict) (any, error) {
			return selectReject(r, v, args, kw, true, true)
		},
		"rejectattr": func(r *state, v any, args []any, kw *Dict) (any, error) {
			return selectReject(r, v, args, kw, true, false)
		},
		"replace": func(r *state, v any, args []any, kw *Dict) (any, error) {
			a, err := bind("replace", args, kw, "old", "new", "count")
			if err != nil {
				return nil, err
			}
			return strReplace(softStr(v), a[0], a[1], a[2])
		},
		"reverse": func(r *state, v any, args []any, kw *Dict) (any, error) {
			if s, ok := asString(v); ok {
				runes := []rune(s)
				for i, j := 0, len(runes)-1; i < j; i, j = i+1, j-1 {
					runes[i], runes[j] = runes[j], runes[i]
				}
				return sameKind(v, string(runes)), nil
			}
			return reversedValue(v)
		},
		"round": filterRound,
		"safe": func(r *state, v any, args []any, kw *Dict) (any, error) {
			return Markup(pyStr(v)), nil
		},
		"slice": filterSlice,
		"sort":  filterSort,
		"string": func(r *state, v any, args []any, kw *Dict) (any, error) {
			return softStr(v), nil
		},
		"sum": func(r *state, v any, args []any, kw *Dict) (any, error) {
			a, err := bind("sum", args, kw, "attribute", "start")
			if err != nil {
				return nil, err
			}
			items, err := iterate(v)
			if err != nil {
				return nil, err
			}
			var total any = or(a[1], int64(0))
			for _, it := range items {
				if given(a[0]) && a[0] != nil {
					if it, err = attrPath(it, a[0]); err != nil {
						return nil, err
					}
				}
				if total, err = binary("+", total, it); err != nil {
					return nil, err
				}
			}
			return total, nil
		},
		"title": func(r *state, v any, args []any, kw *Dict) (any, error) {
			return sameKind(v, jinjaTitle(pyStr(v))), nil
		},
		"tojson": filterToJSON,
		"trim": func(r *state, v any, args []any, kw *Dict) (any, error) {
			a, err := bind("trim", args, kw, "chars")
			if err != nil {
				return nil, err
			}
			return strStrip(softStr(v), or(a[0], nil), "both")
		},
		"unique": filterUnique,
		"wordcount": func(r *state, v any, args []any, kw *Dict) (any, error) {
			n := 0
			inWord := false
			for _, c := range pyStr(v) {
				w := c == '_' || unicode.IsLetter(c) || unicode.IsDigit(c)
				if w && !inWord {
					n++
				}
				inWord = w
			}
			return int64(n), nil
		},
		"truncate": filterTruncate,
	}
}

func filterLength(r *state, v any, args []any, kw *Dict) (any, error) {
	n, err := length(v)
	return int64(n), err
}

func filterDefault(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("default", args, kw, "default_value", "boolean")
	if err != nil {
		return nil, err
	}
	_, undef := v.(Undefined)
	if undef || (given(a[1]) && truthy(a[1]) && !truthy(v)) {
		return or(a[0], ""), nil
	}
	return v, nil
}

func filterEscape(r *state, v any, args []any, kw *Dict) (any, error) {
	if m, ok := v.(Markup); ok {
		return m, nil
	}
	return Markup(htmlEscape(pyStr(v))), nil
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

func dictItems(d *Dict) []any {
	out := make([]any, 0, len(d.keys))
	for _, k := range d.keys {
		out = append(out, tuple{k, d.m[k]})
	}
	return out
}

// sortKey lowercases strings unless the sort is case sensitive.
func sortKey(v any, caseSensitive bool) any {
	if s, ok := asString(v); ok && !caseSensitive {
		return pyLower(s)
	}
	return v
}

func filterDictsort(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("dictsort", args, kw, "case_sensitive", "by", "reverse")
	if err != nil {
		return nil, err
	}
	d, ok := v.(*Dict)
	if !ok {
		return nil, fmt.Errorf("dictsort filter needs a mapping, not %s", typeName(v))
	}
	pos := 0
	if by, _ := asString(or(a[1], "key")); by == "value" {
		pos = 1
	} else if by != "key" {
		return nil, fmt.Errorf("you can only sort by either 'key' or 'value'")
	}
	cs := truthy(or(a[0], false))
	return sortValues(dictItems(d), func(it any) (any, error) { return sortKey(it.(tuple)[pos], cs), nil }, truthy(or(a[2], false)))
}

func filterBatch(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("batch", args, kw, "linecount", "fill_with")
	if err != nil {
		return nil, err
	}
	return lazily(func() ([]any, error) { return batch(v, a) }), nil
}

func batch(v any, a []any) ([]any, error) {
	n, err := toInt(a[0], "linecount")
	if err != nil || n <= 0 || n > maxRepeatLen {
		return nil, fmt.Errorf("batch() needs a positive linecount up to %d", maxRepeatLen)
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var out []any
	for i := 0; i < len(items); i += int(n) {
		row := append([]any{}, items[i:min(i+int(n), len(items))]...)
		for given(a[1]) && a[1] != nil && len(row) < int(n) {
			row = append(row, a[1])
		}
		out = append(out, row)
	}
	return append([]any{}, out...), nil
}

func filterSlice(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("slice", args, kw, "slices", "fill_with")
	if err != nil {
		return nil, err
	}
	return lazily(func() ([]any, error) { return slices(v, a) }), nil
}

func slices(v any, a []any) ([]any, error) {
	n, err := toInt(a[0], "slices")
	if err != nil || n <= 0 || n > maxRepeatLen {
		return nil, fmt.Errorf("slice() needs a positive number of slices up to %d", maxRepeatLen)
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	per, extra := len(items)/int(n), len(items)%int(n)
	offset := 0
	out := []any{}
	for i := 0; i < int(n); i++ {
		start := offset + i*per
		if i < extra {
			offset++
		}
		end := offset + (i+1)*per
		row := append([]any{}, items[start:end]...)
		if given(a[1]) && a[1] != nil && i >= extra {
			row = append(row, a[1])
		}
		out = append(out, row)
	}
	return out, nil
}

// attrPath looks up a Jinja2 attribute path such as "a.b" or "0" on v (item first).
func attrPath(v any, attr any) (any, error) {
	if _, i, isInt, ok := number(attr); ok && isInt {
		return getItem(v, i)
	}
	s, ok := asString(attr)
	if !ok {
		return getItem(v, attr)
	}
	for _, part := range strings.Split(s, ".") {
		var key any = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		var err error
		if v, err = getItem(v, key); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func filterSort(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("sort", args, kw, "reverse", "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	cs := truthy(or(a[1], false))
	// Jinja2 sorts by a list of keys, one per comma-separated attribute, so keys that
	// are equal (Undefined ones too) never need ordering.
	var attrs []any
	if s, ok := asString(or(a[2], nil)); ok {
		for _, part := range strings.Split(s, ",") {
			attrs = append(attrs, part)
		}
	} else if given(a[2]) && a[2] != nil {
		attrs = []any{a[2]}
	}
	return sortValues(items, func(it any) (any, error) {
		if attrs == nil {
			return []any{sortKey(it, cs)}, nil
		}
		keys := make([]any, len(attrs))
		for i, attr := range attrs {
			k, err := attrPath(it, attr)
			if err != nil {
				return nil, err
			}
			keys[i] = sortKey(k, cs)
		}
		return keys, nil
	}, truthy(or(a[0], false)))
}

func filterUnique(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("unique", args, kw, "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	cs := truthy(or(a[0], false))
	var seen []any
	return generate(v, false, func(it any) (any, bool, error) {
		k := it
		if given(a[1]) && a[1] != nil {
			var err error
			if k, err = attrPath(it, a[1]); err != nil {
				return nil, false, err
			}
		}
		k = sortKey(k, cs)
		for _, s := range seen {
			if equal(s, k) {
				return nil, false, nil
			}
		}
		seen = append(seen, k)
		return it, true, nil
	}), nil
}

func minMax(r *state, v any, args []any, kw *Dict, max bool) (any, error) {
	a, err := bind("max", args, kw, "case_sensitive", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return Undefined{hint: "No aggregated item, sequence was empty."}, nil
	}
	cs := truthy(or(a[0], false))
	key := func(it any) (any, error) {
		if given(a[1]) && a[1] != nil {
			var err error
			if it, err = attrPath(it, a[1]); err != nil {
				return nil, err
			}
		}
		return sortKey(it, cs), nil
	}
	best := items[0]
	bk, err := key(best)
	if err != nil {
		return nil, err
	}
	for _, it := range items[1:] {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		c, err := compare(k, bk)
		if err != nil {
			return nil, err
		}
		if (max && c > 0) || (!max && c < 0) {
			best, bk = it, k
		}
	}
	return best, nil
}

func filterJoin(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("join", args, kw, "d", "attribute")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	sep := pyStr(or(a[0], ""))
	parts := make([]string, len(items))
	for i, it := range items {
		if given(a[1]) && a[1] != nil {
			if it, err = attrPath(it, a[1]); err != nil {
				return nil, err
			}
		}
		parts[i] = pyStr(it)
	}
	return strings.Join(parts, sep), nil
}

// filterMap is a generator, as in Jinja2 (which maps over a false value as over nothing).
func filterMap(r *state, v any, args []any, kw *Dict) (any, error) {
	if len(args) == 0 && kw != nil {
		attr, ok := kw.get("attribute")
		if !ok {
			return nil, fmt.Errorf("map() needs a filter name or attribute=")
		}
		def, hasDef := kw.get("default")
		return generate(v, true, func(it any) (any, bool, error) {
			x, err := attrPath(it, attr)
			if err != nil {
				return nil, false, err
			}
			if _, undef := x.(Undefined); undef && hasDef {
				x = def
			}
			return x, true, nil
		}), nil
	}
	if len(args) == 0 {
		return nil, fmt.Errorf("map() needs a filter name or attribute=")
	}
	name, _ := asString(args[0])
	f, ok := filters[name]
	if !ok {
		return nil, fmt.Errorf("no filter named '%s'", name)
	}
	return generate(v, true, func(it any) (any, bool, error) {
		x, err := f(r, it, args[1:], kw)
		return x, true, err
	}), nil
}

// selectReject is a generator, as in Jinja2 (where a false value selects nothing,
// iterable or not).
func selectReject(r *state, v any, args []any, kw *Dict, byAttr, want bool) (any, error) {
	var attr any
	if byAttr {
		if len(args) == 0 {
			return nil, fmt.Errorf("missing parameter for attribute name")
		}
		attr, args = args[0], args[1:]
	}
	var test testFunc
	if len(args) > 0 {
		name, _ := asString(args[0])
		t, ok := tests[name]
		if !ok {
			return nil, fmt.Errorf("no test named '%s'", name)
		}
		test, args = t, args[1:]
	}
	return generate(v, true, func(it any) (any, bool, error) {
		x := it
		var err error
		if byAttr {
			if x, err = attrPath(it, attr); err != nil {
				return nil, false, err
			}
		}
		ok := truthy(x)
		if test != nil {
			if ok, err = test(r, x, args); err != nil {
				return nil, false, err
			}
		}
		return it, ok == want, nil
	}), nil
}

func filterRound(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("round", args, kw, "precision", "method")
	if err != nil {
		return nil, err
	}
	prec, err := toInt(or(a[0], int64(0)), "precision")
	if err != nil {
		return nil, err
	}
	method, _ := asString(or(a[1], "common"))
	f, _, _, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("round filter needs a number, not %s", typeName(v))
	}
	p := math.Pow(10, float64(prec))
	switch method {
	case "common":
		if _, i, isInt, _ := number(v); isInt && prec >= 0 {
			return i, nil // Python's round(int, n) stays an int
		}
		// Python's round(): the decimal value nearest to f, ties to even.
		s := strconv.FormatFloat(f, 'f', int(max(prec, 0)), 64)
		if prec < 0 {
			return math.RoundToEven(f*p) / p, nil
		}
		out, _ := strconv.ParseFloat(s, 64)
		return out, nil
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	}
	return nil, fmt.Errorf("method must be 'common', 'ceil' or 'floor'")
}

func filterIndent(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("indent", args, kw, "width", "first", "blank")
	if err != nil {
		return nil, err
	}
	ind := "    "
	if w := or(a[0], int64(4)); true {
		if s, ok := asString(w); ok {
			ind = s
		} else if n, err := toInt(w, "width"); err == nil {
			if n > maxRepeatLen {
				return nil, errTooWide
			}
			ind = strings.Repeat(" ", int(max(n, 0)))
		} else {
			return nil, err
		}
	}
	str, ok := asString(v)
	if !ok {
		return nil, fmt.Errorf("indent needs a string, not %s", typeName(v))
	}
	s := str + "\n"
	lines := splitLines(s, false)
	var rv string
	if truthy(or(a[2], false)) {
		rv = strings.Join(lines, "\n"+ind)
	} else {
		rv = lines[0]
		rest := lines[1:]
		if len(rest) > 0 {
			for i, l := range rest {
				if l != "" {
					rest[i] = ind + l
				}
			}
			rv += "\n" + strings.Join(rest, "\n")
		}
	}
	if truthy(or(a[1], false)) {
		rv = ind + rv
	}
	return sameKind(v, rv), nil
}

func filterGroupby(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("groupby", args, kw, "attribute", "default", "case_sensitive")
	if err != nil {
		return nil, err
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	cs := truthy(or(a[2], false))
	key := func(it any) (any, error) {
		k, err := attrPath(it, a[0])
		if err != nil {
			return nil, err
		}
		if _, undef := k.(Undefined); undef && given(a[1]) {
			k = a[1]
		}
		return sortKey(k, cs), nil
	}
	sorted, err := sortValues(items, key, false)
	if err != nil {
		return nil, err
	}
	out := []any{}
	for i := 0; i < len(sorted); {
		k, _ := key(sorted[i])
		j := i + 1
		for j < len(sorted) {
			k2, _ := key(sorted[j])
			if !equal(k, k2) {
				break
			}
			j++
		}
		grouper := k
		if !cs {
			grouper, _ = attrPath(sorted[i], a[0])
		}
		out = append(out, tuple{grouper, append([]any{}, sorted[i:j]...)})
		i = j
	}
	return out, nil
}

func filterTruncate(r *state, v any, args []any, kw *Dict) (any, error) {
	a, err := bind("truncate", args, kw, "length", "killwords", "end", "leeway")
	if err != nil {
		return nil, err
	}
	n, err := toInt(or(a[0], int64(255)), "length")
	if err != nil {
		return nil, err
	}
	leeway, err := toInt(or(a[3], int64(5)), "leeway")
	if err != nil {
		return nil, err
	}
	end := pyStr(or(a[2], "..."))
	endLen := int64(utf8.RuneCountInString(end))
	if n < endLen || leeway < 0 {
		return nil, fmt.Errorf("truncate: expected length >= %d and leeway >= 0", endLen)
	}
	s, ok := asString(v)
	if !ok {
		// Jinja2 measures any sized value and returns it whole when it is short enough.
		l, err := length(v)
		if err != nil {
			return nil, err
		}
		if int64(l) > n+leeway {
			return nil, fmt.Errorf("truncate needs a string, not %s", typeName(v))
		}
		return v, nil
	}
	runes := []rune(s)
	if int64(len(runes)) <= n+leeway {
		return v, nil
	}
	head := string(runes[:n-endLen])
	if !truthy(or(a[1], false)) {
		if i := strings.LastIndex(head, " "); i >= 0 {
			head = head[:i]
		}
	}
	return head + end, nil
}

func toFloat(v any) (float64, bool) {
	if f, _, _, ok := number(v); ok {
		return f, true
	}
	if s, ok := asString(v); ok {
		s = strings.TrimFunc(s, isSpace)
		f, err := strconv.ParseFloat(strings.ReplaceAll(s, "_", ""), 64)
		if err == nil {
			return f, true
		}
		switch strings.ToLower(s) {
		case "inf", "+inf", "infinity", "+infinity":
			return math.Inf(1), true
		case "-inf", "-infinity":
			return math.Inf(-1), true
		case "nan", "+nan", "-nan":
			return math.NaN(), true
		}
	}
	return 0, false
}

func toIntValue(v any, base int) (int64, bool) {
	if f, i, isInt, ok := number(v); ok {
		if isInt {
			return i, true
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, false
		}
		return int64(f), true
	}
	s, ok := asString(v)
	if !ok {
		return 0, false
	}
	s = strings.TrimFunc(s, isSpace)
	if i, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), base, 64); err == nil {
		return i, true
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return int64(f), true
	}
	return 0, false
}

// ---- tests ----

var tests map[string]testFunc

func init() {
	cmp := func(op string) testFunc {
		return func(r *state, v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("test needs one argument")
			}
			return compareOp(op, v, args[0])
		}
	}
	isStr := func(v any) bool { _, ok := asString(v); return ok }
	tests = map[string]testFunc{
		"boolean": func(r *state, v any, args []any) (bool, error) { _, ok := v.(bool); return ok, nil },
		"callable": func(r *state, v any, args []any) (bool, error) {
			switch v.(type) {
			case *macro, builtin, boundMethod, Undefined: // Undefined has __call__ (which fails)
				return true, nil
			}
			return false, nil
		},
		"defined":   func(r *state, v any, args []any) (bool, error) { _, u := v.(Undefined); return !u, nil },
		"undefined": func(r *state, v any, args []any) (bool, error) { _, u := v.(Undefined); return u, nil },
		"divisibleby": func(r *state, v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("divisibleby needs one argument")
			}
			m, err := binary("%", v, args[0])
			if err != nil {
				return false, err
			}
			return equal(m, int64(0)), nil
		},
		"eq": cmp("=="), "equalto": cmp("=="), "==": cmp("=="),
		"ne": cmp("!="), "!=": cmp("!="),
		"lt": cmp("<"), "lessthan": cmp("<"), "<": cmp("<"),
		"le": cmp("<="), "<=": cmp("<="),
		"gt": cmp(">"), "greaterthan": cmp(">"), ">": cmp(">"),
		"ge": cmp(">="), ">=": cmp(">="),
		"escaped": func(r *state, v any, args []any) (bool, error) { _, ok := v.(Markup); return ok, nil },
		"even": func(r *state, v any, args []any) (bool, error) {
			m, err := binary("%", v, int64(2))
			return err == nil && equal(m, int64(0)), err
		},
		"odd": func(r *state, v any, args []any) (bool, error) {
			m, err := binary("%", v, int64(2))
			return err == nil && equal(m, int64(1)), err
		},
		"false": func(r *state, v any, args []any) (bool, error) { return v == false, nil },
		"true":  func(r *state, v any, args []any) (bool, error) { return v == true, nil },
		"none":  func(r *state, v any, args []any) (bool, error) { return v == nil, nil },
		"filter": func(r *state, v any, args []any) (bool, error) {
			s, _ := asString(v)
			_, ok := filters[s]
			return ok, nil
		},
		"test": func(r *state, v any, args []any) (bool, error) {
			s, _ := asString(v)
			_, ok := tests[s]
			return ok, nil
		},
		"float": func(r *state, v any, args []any) (bool, error) { _, ok := v.(float64); return ok, nil },
		"integer": func(r *state, v any, args []any) (bool, error) {
			_, ok := v.(int64)
			return ok, nil
		},
		"number": func(r *state, v any, args []any) (bool, error) { _, _, _, ok := number(v); return ok, nil },
		"in": func(r *state, v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("in test needs one argument")
			}
			return contains(args[0], v)
		},
		"iterable": func(r *state, v any, args []any) (bool, error) {
			switch v.(type) {
			case string, Markup, []any, tuple, *Dict, Undefined, *view, *iterator:
				return true, nil
			}
			return false, nil
		},
		"sequence": func(r *state, v any, args []any) (bool, error) {
			switch x := v.(type) {
			case string, Markup, []any, tuple, *Dict, Undefined:
				return true, nil
			case *view:
				return x.kind == "range", nil // dict views have len() but no indexing
			}
			return false, nil
		},
		"mapping": func(r *state, v any, args []any) (bool, error) { _, ok := v.(*Dict); return ok, nil },
		"string":  func(r *state, v any, args []any) (bool, error) { return isStr(v), nil },
		"lower":   func(r *state, v any, args []any) (bool, error) { return pyIsCase(pyStr(v), false), nil },
		"upper":   func(r *state, v any, args []any) (bool, error) { return pyIsCase(pyStr(v), true), nil },
		"sameas": func(r *state, v any, args []any) (bool, error) {
			if len(args) != 1 {
				return false, fmt.Errorf("sameas needs one argument")
			}
			switch x := v.(type) {
			case nil, bool:
				return v == args[0], nil
			case int64:
				y, ok := args[0].(int64)
				return ok && x == y && x >= -5 && x <= 256, nil // CPython's small-int cache
			case *Dict, *namespace, *macro, *loopObj:
				return v == args[0], nil
			case []any:
				y, ok := args[0].([]any)
				return ok && len(x) > 0 && len(y) == len(x) && &x[0] == &y[0], nil
			case string:
				y, ok := args[0].(string)
				return ok && x == y, nil
			}
			return false, nil
		},
	}
}
