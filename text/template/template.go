package template

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Template is a parsed Jinja2 template, safe for concurrent Render calls.
type Template struct {
	name  string
	body  []node
	undef map[string]bool
}

// Error is a template error: a syntax error at Parse, or a failure at Render (an
// undefined value used, a type error, raise_exception). Line is 1-based.
type Error struct {
	Template string // the name given to Parse, e.g. the model directory
	Line     int
	Msg      string
	// Raised is set when the template itself called raise_exception(Msg).
	Raised bool
	cause  error
}

func (e *Error) Error() string {
	what := "error"
	if e.Raised {
		what = "raised"
	}
	name := e.Template
	if name == "" {
		name = "<template>"
	}
	return fmt.Sprintf("template %s, line %d: %s: %s", name, e.Line, what, e.Msg)
}

func (e *Error) Unwrap() error { return e.cause }

// raised is the error raise_exception returns; withLine turns it into an *Error.
type raised struct{ msg string }

func (r *raised) Error() string { return r.msg }

// Parse parses a Jinja2 template with the settings transformers renders chat templates
// with: trim_blocks and lstrip_blocks on, keep_trailing_newline off. Unknown filters
// and tests are errors here, as in Jinja2. name appears in every error.
func Parse(name, source string) (*Template, error) {
	body, err := parse(source)
	if err != nil {
		var te *Error
		if errors.As(err, &te) {
			te.Template = name
			return nil, te
		}
		return nil, fmt.Errorf("template %s: %w", name, err)
	}
	return &Template{name: name, body: body, undef: resolveFrames(body)}, nil
}

// Render renders the template with vars as its top-level variables. Values are
// converted to Python's types: Go maps become dicts (keys sorted, since Go maps have no
// order), slices lists, numbers int or float; *Dict, json.RawMessage and the results of
// DecodeJSON keep their key order. strftime_now uses time.Now.
func (t *Template) Render(vars map[string]any) (string, error) {
	return t.render(vars, nil)
}

func (t *Template) render(vars map[string]any, now func() time.Time) (string, error) {
	if now == nil {
		now = time.Now
	}
	context := newScope(nil)
	for k, v := range vars {
		cv, err := convert(v)
		if err != nil {
			return "", fmt.Errorf("template %s: variable %s: %w", t.name, k, err)
		}
		context.vars[k] = cv
	}
	root := frame(context, t.undef)
	var b strings.Builder
	r := &state{out: &b, now: now, globals: globals}
	err := r.execBody(t.body, root)
	if err != nil {
		var te *Error
		if !errors.As(err, &te) {
			te = &Error{Msg: err.Error(), cause: err}
		}
		te.Template = t.name
		var rs *raised
		if errors.As(te.cause, &rs) {
			te.Raised = true
		}
		return "", te
	}
	return b.String(), nil
}

var globals map[string]any

func init() {
	globals = map[string]any{
		"range": builtin(func(r *state, args []any, kw *Dict) (any, error) {
			var start, stop, step int64 = 0, 0, 1
			ints := make([]int64, len(args))
			for i, a := range args {
				n, err := toInt(a, "range() argument")
				if err != nil {
					return nil, err
				}
				ints[i] = n
			}
			switch len(ints) {
			case 1:
				stop = ints[0]
			case 2:
				start, stop = ints[0], ints[1]
			case 3:
				start, stop, step = ints[0], ints[1], ints[2]
			default:
				return nil, fmt.Errorf("range expected 1 to 3 arguments, got %d", len(args))
			}
			if step == 0 {
				return nil, fmt.Errorf("range() arg 3 must not be zero")
			}
			out := []any{}
			for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
				if len(out) >= maxRange {
					return nil, fmt.Errorf("range too big, maximum size for range is %d", maxRange)
				}
				out = append(out, i)
			}
			repr := fmt.Sprintf("range(%d, %d)", start, stop)
			if step != 1 {
				repr = fmt.Sprintf("range(%d, %d, %d)", start, stop, step)
			}
			return &view{kind: "range", items: out, repr: repr}, nil
		}),
		"dict": builtin(func(r *state, args []any, kw *Dict) (any, error) {
			d := NewDict()
			for _, a := range args {
				src, ok := a.(*Dict)
				if !ok {
					return nil, fmt.Errorf("dict() positional argument must be a mapping")
				}
				for _, k := range src.keys {
					d.set(k, src.m[k])
				}
			}
			if kw != nil {
				for _, k := range kw.keys {
					d.set(k, kw.m[k])
				}
			}
			return d, nil
		}),
		"namespace": builtin(func(r *state, args []any, kw *Dict) (any, error) {
			d := NewDict()
			for _, a := range args {
				if src, ok := a.(*Dict); ok {
					for _, k := range src.keys {
						d.set(k, src.m[k])
					}
				}
			}
			if kw != nil {
				for _, k := range kw.keys {
					d.set(k, kw.m[k])
				}
			}
			return &namespace{d: d}, nil
		}),
		"raise_exception": builtin(func(r *state, args []any, kw *Dict) (any, error) {
			msg := ""
			if len(args) > 0 {
				msg = pyStr(args[0])
			}
			return nil, &raised{msg: msg}
		}),
		"strftime_now": builtin(func(r *state, args []any, kw *Dict) (any, error) {
			a, err := bind("strftime_now", args, kw, "format")
			if err != nil {
				return nil, err
			}
			f, ok := asString(a[0])
			if !ok {
				return nil, fmt.Errorf("strftime_now() needs a format string")
			}
			return strftime(r.now(), f), nil
		}),
		"joiner": builtin(func(r *state, args []any, kw *Dict) (any, error) {
			sep := ", "
			if len(args) > 0 {
				sep = pyStr(args[0])
			}
			used := false
			return builtin(func(r *state, args []any, kw *Dict) (any, error) {
				if !used {
					used = true
					return "", nil
				}
				return sep, nil
			}), nil
		}),
	}
}

// strftime formats t like Python's datetime.strftime on glibc, including the "-"
// flag (%-d) that strips padding.
func strftime(t time.Time, f string) string {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		noPad := false
		if f[i] == '-' && i+1 < len(f) {
			noPad = true
			i++
		}
		num := func(n, width int) {
			s := strconv.Itoa(n)
			if !noPad {
				for len(s) < width {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		switch f[i] {
		case 'Y':
			num(t.Year(), 4)
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			s := strconv.Itoa(t.Day())
			if len(s) < 2 && !noPad {
				s = " " + s
			}
			b.WriteString(s)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'f':
			num(t.Nanosecond()/1000, 6)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'b', 'h':
			b.WriteString(t.Month().String()[:3])
		case 'B':
			b.WriteString(t.Month().String())
		case 'a':
			b.WriteString(t.Weekday().String()[:3])
		case 'A':
			b.WriteString(t.Weekday().String())
		case 'w':
			num(int(t.Weekday()), 1)
		case 'u':
			wd := int(t.Weekday())
			if wd == 0 {
				wd = 7
			}
			num(wd, 1)
		case 'F':
			b.WriteString(t.Format("2006-01-02"))
		case 'T':
			b.WriteString(t.Format("15:04:05"))
		case 'D':
			b.WriteString(t.Format("01/02/06"))
		case 'R':
			b.WriteString(t.Format("15:04"))
		case 'c':
			b.WriteString(t.Format("Mon Jan _2 15:04:05 2006"))
		case 'x':
			b.WriteString(t.Format("01/02/06"))
		case 'X':
			b.WriteString(t.Format("15:04:05"))
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		case 'Z', 'z':
			// datetime.now() is naive: no zone name or offset.
		default:
			b.WriteByte('%')
			if noPad {
				b.WriteByte('-')
			}
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

// convert turns a Go value into the engine's Python-like values.
func convert(v any) (any, error) {
	return convertDepth(v, 0)
}

func convertDepth(v any, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("value nested deeper than %d levels", maxDepth)
	}
	switch x := v.(type) {
	case nil, bool, string, int64, float64, Markup, Undefined:
		return x, nil
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case float32:
		return float64(x), nil
	case json.Number:
		return jsonNumber(x)
	case json.RawMessage:
		return DecodeJSON(x)
	case []byte:
		return string(x), nil
	case *Dict:
		d := NewDict()
		for _, k := range x.keys {
			cv, err := convertDepth(x.m[k], depth+1)
			if err != nil {
				return nil, err
			}
			d.set(k, cv)
		}
		return d, nil
	case map[string]any:
		d := NewDict()
		for _, k := range sortedKeys(x) {
			cv, err := convertDepth(x[k], depth+1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			d.set(k, cv)
		}
		return d, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			cv, err := convertDepth(e, depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = cv
		}
		return out, nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return rv.Int(), nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return int64(rv.Uint()), nil
	case reflect.Float32, reflect.Float64:
		return rv.Float(), nil
	case reflect.String:
		return rv.String(), nil
	case reflect.Bool:
		return rv.Bool(), nil
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return nil, nil
		}
		out := make([]any, rv.Len())
		for i := range out {
			cv, err := convertDepth(rv.Index(i).Interface(), depth+1)
			if err != nil {
				return nil, err
			}
			out[i] = cv
		}
		return out, nil
	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			if rv.IsNil() {
				return nil, nil
			}
			m := make(map[string]any, rv.Len())
			for it := rv.MapRange(); it.Next(); {
				m[it.Key().String()] = it.Value().Interface()
			}
			return convertDepth(m, depth)
		}
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return nil, nil
		}
	}
	// Structs and the rest go through encoding/json, which keeps struct field order.
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cannot use a %T in a template: %w", v, err)
	}
	return DecodeJSON(data)
}
