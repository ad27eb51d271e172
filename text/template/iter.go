package template

import (
	"fmt"
	"strings"
)

// iterator is a one-shot Python iterator: what Jinja2's generator filters (map,
// select, reject, selectattr, rejectattr, unique, batch, slice, items) and reversed()
// return. Like a generator it is always true, has no len(), is not a sequence, does
// its work only as it is consumed (so errors surface then), and iterating it uses it up.
type iterator struct {
	kind string // Python's type name: "generator", "list_reverseiterator", ...
	next func() (any, bool, error)
}

// view is a dict view (dict_items, dict_keys, dict_values) or a range: sized,
// re-iterable, and printed the way Python prints them.
type view struct {
	kind  string
	items []any
	repr  string // for range: "range(0, 3)"
}

func newGenerator(next func() (any, bool, error)) *iterator {
	return &iterator{kind: "generator", next: next}
}

func (v *view) String() string {
	if v.repr != "" {
		return v.repr
	}
	var b strings.Builder
	b.WriteString(v.kind)
	b.WriteByte('(')
	writeRepr(&b, v.items, nil)
	b.WriteByte(')')
	return b.String()
}

// pull returns a function that yields v's items one at a time, as Python's iter(v).
func pull(v any) (func() (any, bool, error), error) {
	switch x := v.(type) {
	case *iterator:
		return x.next, nil
	case *view:
		return pullSlice(x.items), nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	return pullSlice(items), nil
}

func pullSlice(items []any) func() (any, bool, error) {
	i := 0
	return func() (any, bool, error) {
		if i >= len(items) {
			return nil, false, nil
		}
		i++
		return items[i-1], true, nil
	}
}

// drain consumes an iterator into a list.
func drain(next func() (any, bool, error)) ([]any, error) {
	out := []any{}
	for {
		v, ok, err := next()
		if err != nil || !ok {
			return out, err
		}
		out = append(out, v)
	}
}

// reversedValue is Jinja2's reverse filter for non-strings: Python's reversed(), or a
// reversed list copy of what reversed() refuses.
func reversedValue(v any) (any, error) {
	var items []any
	kind := "list_reverseiterator"
	switch x := v.(type) {
	case []any:
		items = x
	case tuple:
		items, kind = x, "reversed"
	case *Dict:
		items, kind = x.keys, "dict_reversekeyiterator"
	case *view:
		items = x.items
		kind = map[string]string{"dict_items": "dict_reverseitemiterator", "dict_keys": "dict_reversekeyiterator",
			"dict_values": "dict_reversevalueiterator", "range": "range_iterator"}[x.kind]
	default:
		all, err := iterate(v)
		if err != nil {
			return nil, fmt.Errorf("argument must be iterable")
		}
		out := make([]any, len(all))
		for i, it := range all {
			out[len(all)-1-i] = it
		}
		return out, nil
	}
	i := len(items)
	return &iterator{kind: kind, next: func() (any, bool, error) {
		if i <= 0 {
			return nil, false, nil
		}
		i--
		return items[i], true, nil
	}}, nil
}

// lazily returns a generator whose items are computed when it is first consumed.
func lazily(produce func() ([]any, error)) *iterator {
	var next func() (any, bool, error)
	return newGenerator(func() (any, bool, error) {
		if next == nil {
			items, err := produce()
			if err != nil {
				next = func() (any, bool, error) { return nil, false, nil }
				return nil, false, err
			}
			next = pullSlice(items)
		}
		return next()
	})
}

// generate returns a generator over src's items passed through step, which maps an
// item to (value, keep). Jinja2's map and select family skip a false src entirely.
func generate(src any, skipFalse bool, step func(any) (any, bool, error)) *iterator {
	var next func() (any, bool, error)
	return newGenerator(func() (any, bool, error) {
		if next == nil {
			if skipFalse && !truthy(src) {
				next = pullSlice(nil)
			} else {
				p, err := pull(src)
				if err != nil {
					next = pullSlice(nil)
					return nil, false, err
				}
				next = p
			}
		}
		for {
			it, ok, err := next()
			if err != nil || !ok {
				return nil, false, err
			}
			v, keep, err := step(it)
			if err != nil {
				return nil, false, err
			}
			if keep {
				return v, true, nil
			}
		}
	})
}
