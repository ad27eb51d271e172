package template

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Limits that keep a hostile or broken template from exhausting memory or the stack.
const (
	maxOutput    = 64 << 20 // bytes of rendered text
	maxDepth     = 200      // nested macro calls and recursive loops
	maxRange     = 100000   // items in range(), as Jinja2's sandbox
	maxRepeatLen = 1 << 20  // bytes or items made by "x" * n
	maxSteps     = 1 << 20  // loop iterations and macro calls in one render
)

// scope is one Jinja2 frame: the template's top level, a loop iteration, a macro call,
// or the body of a set, filter or with block. The render variables sit in a scope of
// their own above the top level.
type scope struct {
	vars   map[string]any
	parent *scope
	// undef holds the names this frame reads as undefined until it assigns them,
	// whatever the frames above have (see resolveFrames).
	undef map[string]bool
}

func newScope(parent *scope) *scope { return &scope{vars: map[string]any{}, parent: parent} }

func frame(parent *scope, undef map[string]bool) *scope {
	return &scope{vars: map[string]any{}, parent: parent, undef: undef}
}

// lookup resolves a name from code running in frame s as Jinja2's compiled frames do:
// the innermost frame that has it; but an enclosing frame whose variable is still
// unassigned hides the frames above it.
func (s *scope) lookup(name string) (any, bool) {
	for f := s; f != nil; f = f.parent {
		if v, ok := f.vars[name]; ok {
			return v, true
		}
		if f != s && f.undef[name] {
			return nil, false
		}
	}
	return nil, false
}

type state struct {
	out     *strings.Builder
	now     func() time.Time
	depth   int
	steps   int
	globals map[string]any
}

// step counts work that a template can repeat without bound (nested loops over
// range(), recursion) and stops it past maxSteps.
func (r *state) step() error {
	r.steps++
	if r.steps > maxSteps {
		return fmt.Errorf("template does too much work: more than %d loop iterations and macro calls", maxSteps)
	}
	return nil
}

// errBreak and errContinue unwind a loop body to its for loop; the parser allows them
// only inside one.
var (
	errBreak    = errors.New("break outside a loop")
	errContinue = errors.New("continue outside a loop")
)

// withLine gives err the template line it happened on, unless it already has one.
func withLine(err error, line int) error {
	if err == nil || err == errBreak || err == errContinue {
		return err
	}
	var te *Error
	if errors.As(err, &te) {
		return err
	}
	return &Error{Line: line, Msg: err.Error(), cause: err}
}

func (r *state) write(s string) error {
	r.out.WriteString(s)
	if r.out.Len() > maxOutput {
		return fmt.Errorf("rendered text exceeds %d MiB", maxOutput>>20)
	}
	return nil
}

func (r *state) execBody(body []node, sc *scope) error {
	for _, n := range body {
		if err := r.exec(n, sc); err != nil {
			return err
		}
	}
	return nil
}

func (r *state) exec(n node, sc *scope) error {
	switch n := n.(type) {
	case *textNode:
		return r.write(n.s)
	case *outputNode:
		v, err := r.eval(n.x, sc)
		if err != nil {
			return withLine(err, n.ln)
		}
		return withLine(r.write(pyStr(v)), n.ln)
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, sc)
			if err != nil {
				return withLine(err, c.line())
			}
			if truthy(v) {
				return r.execBody(n.bodies[i], sc)
			}
		}
		return r.execBody(n.els, sc)
	case *forNode:
		return r.execFor(n, sc)
	case *setNode:
		v, err := r.eval(n.x, sc)
		if err != nil {
			return withLine(err, n.ln)
		}
		return withLine(r.assign(n.target, v, sc), n.ln)
	case *setBlockNode:
		v, err := r.filtered(n.body, n.undef, n.filters, n.ln, sc)
		if err != nil {
			return err
		}
		return withLine(r.assign(n.target, v, sc), n.ln)
	case *macroNode:
		sc.vars[n.m.name] = &macro{def: n.m, closure: sc}
		return nil
	case *callBlockNode:
		caller := &macro{def: n.caller, closure: sc}
		v, err := r.call(&n.call.callArgs, n.call.fn, sc, caller)
		if err != nil {
			return withLine(err, n.ln)
		}
		return r.write(pyStr(v))
	case *filterBlockNode:
		v, err := r.filtered(n.body, n.undef, n.filters, n.ln, sc)
		if err != nil {
			return err
		}
		return r.write(pyStr(v))
	case *withNode:
		inner := frame(sc, n.undef)
		for i, t := range n.targets {
			v, err := r.eval(n.vals[i], sc)
			if err != nil {
				return withLine(err, n.ln)
			}
			if err := r.assign(t, v, inner); err != nil {
				return withLine(err, n.ln)
			}
		}
		return r.execBody(n.body, inner)
	case *loopCtlNode:
		if n.brk {
			return errBreak
		}
		return errContinue
	}
	return fmt.Errorf("internal error: unknown node %T", n)
}

// capture renders body into a string of its own.
func (r *state) capture(body []node, sc *scope) (string, error) {
	saved := r.out
	var b strings.Builder
	r.out = &b
	err := r.execBody(body, sc)
	r.out = saved
	return b.String(), err
}

// filtered renders a block's body in a frame of its own, then passes the text through
// the block's filters ({% set x | f %} and {% filter f %}); a filter's error is
// reported at the block's line ln.
func (r *state) filtered(body []node, undef map[string]bool, filters []*filterExpr, ln int, sc *scope) (any, error) {
	s, err := r.capture(body, frame(sc, undef))
	if err != nil {
		return nil, err
	}
	var v any = s
	for _, f := range filters {
		if v, err = r.applyFilter(f, v, sc); err != nil {
			return nil, withLine(err, ln)
		}
	}
	return v, nil
}

func (r *state) assign(target expr, v any, sc *scope) error {
	switch t := target.(type) {
	case *nameExpr:
		sc.vars[t.name] = v
		return nil
	case *tupleExpr:
		items, err := iterate(v)
		if err != nil {
			return fmt.Errorf("cannot unpack non-iterable %s object", typeName(v))
		}
		if len(items) != len(t.items) {
			if len(items) > len(t.items) {
				return fmt.Errorf("too many values to unpack (expected %d)", len(t.items))
			}
			return fmt.Errorf("not enough values to unpack (expected %d, got %d)", len(t.items), len(items))
		}
		for i, it := range t.items {
			if err := r.assign(it, items[i], sc); err != nil {
				return err
			}
		}
		return nil
	case *attrExpr:
		name := t.obj.(*nameExpr).name
		obj, _ := sc.lookup(name)
		ns, ok := obj.(*namespace)
		if !ok {
			return fmt.Errorf("cannot assign attribute on non-namespace object '%s'", name)
		}
		ns.d.set(t.name, v)
		return nil
	}
	return fmt.Errorf("cannot assign to %T", target)
}

type loopObj struct {
	items    []any
	index0   int
	depth0   int
	lastSeen []any
	seen     bool
	recurse  func(v any) (any, error)
}

func (r *state) execFor(n *forNode, sc *scope) error {
	iv, err := r.eval(n.iter, sc)
	if err != nil {
		return withLine(err, n.ln)
	}
	return r.loop(n, iv, sc, 0)
}

func (r *state) loop(n *forNode, iv any, sc *scope, depth0 int) error {
	all, err := iterate(iv)
	if err != nil {
		return withLine(err, n.ln)
	}
	items := all
	if n.cond != nil {
		items = nil
		for _, it := range all {
			fs := frame(sc, n.undef)
			if err := r.assign(n.target, it, fs); err != nil {
				return withLine(err, n.ln)
			}
			c, err := r.eval(n.cond, fs)
			if err != nil {
				return withLine(err, n.ln)
			}
			if truthy(c) {
				items = append(items, it)
			}
		}
	}
	if len(items) == 0 {
		return r.execBody(n.els, frame(sc, n.elseUndef))
	}
	lo := &loopObj{items: items, depth0: depth0}
	if n.recursive {
		lo.recurse = func(v any) (any, error) {
			if r.depth >= maxDepth {
				return nil, fmt.Errorf("recursion deeper than %d levels", maxDepth)
			}
			r.depth++
			defer func() { r.depth-- }()
			saved := r.out
			var b strings.Builder
			r.out = &b
			err := r.loop(n, v, sc, depth0+1)
			r.out = saved
			return b.String(), err
		}
	}
	for i, it := range items {
		if err := r.step(); err != nil {
			return withLine(err, n.ln)
		}
		lo.index0 = i
		body := frame(sc, n.undef)
		body.vars["loop"] = lo
		if err := r.assign(n.target, it, body); err != nil {
			return withLine(err, n.ln)
		}
		err := r.execBody(n.body, body)
		if err == errBreak {
			break
		}
		if err != nil && err != errContinue {
			return err
		}
	}
	return nil
}

func (lo *loopObj) attr(name string) (any, bool) {
	n := len(lo.items)
	switch name {
	case "index0":
		return int64(lo.index0), true
	case "index":
		return int64(lo.index0 + 1), true
	case "revindex":
		return int64(n - lo.index0), true
	case "revindex0":
		return int64(n - lo.index0 - 1), true
	case "first":
		return lo.index0 == 0, true
	case "last":
		return lo.index0 == n-1, true
	case "length":
		return int64(n), true
	case "depth0":
		return int64(lo.depth0), true
	case "depth":
		return int64(lo.depth0 + 1), true
	case "previtem":
		if lo.index0 == 0 {
			return Undefined{hint: "there is no previous item"}, true
		}
		return lo.items[lo.index0-1], true
	case "nextitem":
		if lo.index0 == n-1 {
			return Undefined{hint: "there is no next item"}, true
		}
		return lo.items[lo.index0+1], true
	case "cycle":
		return builtin(func(r *state, args []any, kw *Dict) (any, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("no items for cycling given")
			}
			return args[lo.index0%len(args)], nil
		}), true
	case "changed":
		return builtin(func(r *state, args []any, kw *Dict) (any, error) {
			if lo.seen && seqEqual(lo.lastSeen, args) {
				return false, nil
			}
			lo.seen, lo.lastSeen = true, args
			return true, nil
		}), true
	}
	return nil, false
}

// macro is a {% macro %} (or the caller of a {% call %} block) with the scope it was
// defined in.
type macro struct {
	def     *macroDef
	closure *scope
}

type builtin func(r *state, args []any, kw *Dict) (any, error)

// boundMethod is a Python method looked up on a value, e.g. "abc".upper.
type boundMethod struct {
	recv any
	name string
}

func (r *state) callMacro(m *macro, args []any, kw *Dict, caller *macro) (any, error) {
	if r.depth >= maxDepth {
		return nil, fmt.Errorf("macro '%s' recursed deeper than %d levels", m.def.name, maxDepth)
	}
	if err := r.step(); err != nil {
		return nil, err
	}
	r.depth++
	defer func() { r.depth-- }()
	sc := frame(m.closure, m.def.undef)
	d := m.def
	firstDefault := len(d.params) - len(d.defaults)
	for i, p := range d.params {
		if i < len(args) {
			sc.vars[p] = args[i]
			continue
		}
		if v, ok := kw.get(p); ok {
			sc.vars[p] = v
			continue
		}
		if i >= firstDefault {
			v, err := r.eval(d.defaults[i-firstDefault], sc)
			if err != nil {
				return nil, err
			}
			sc.vars[p] = v
			continue
		}
		sc.vars[p] = Undefined{hint: fmt.Sprintf("parameter '%s' was not provided", p)}
	}
	var varargs []any
	if len(args) > len(d.params) {
		if !d.catchVarargs {
			return nil, fmt.Errorf("macro '%s' takes not more than %d argument(s)", d.name, len(d.params))
		}
		varargs = append(varargs, args[len(d.params):]...)
	}
	sc.vars["varargs"] = tuple(varargs)
	extra := NewDict()
	if kw != nil {
		for i, k := range kw.keys {
			s, _ := k.(string)
			if j := indexStr(d.params, s); j >= len(args) {
				continue // bound to its parameter above
			}
			if !d.catchKwargs {
				return nil, fmt.Errorf("macro '%s' takes no keyword argument '%s'", d.name, s)
			}
			extra.set(k, kw.m[kw.keys[i]])
		}
	}
	sc.vars["kwargs"] = extra
	if caller != nil {
		if !d.catchCaller {
			return nil, fmt.Errorf("macro '%s' was invoked with two values for the special caller argument. This is most likely a bug.", d.name)
		}
		sc.vars["caller"] = caller
	}
	return r.capture(d.body, sc)
}

// indexStr returns the index of s in list, or -1.
func indexStr(list []string, s string) int {
	for i, x := range list {
		if x == s {
			return i
		}
	}
	return -1
}

// callValue calls fn with evaluated arguments.
func (r *state) callValue(fn any, args []any, kw *Dict, caller *macro) (any, error) {
	switch f := fn.(type) {
	case *macro:
		return r.callMacro(f, args, kw, caller)
	case builtin:
		return f(r, args, kw)
	case boundMethod:
		return r.callMethod(f.recv, f.name, args, kw)
	case *loopObj:
		if f.recurse == nil {
			return nil, fmt.Errorf("the loop is not recursive: add 'recursive' to the for tag to call loop()")
		}
		if len(args) != 1 {
			return nil, fmt.Errorf("loop() takes exactly one argument")
		}
		return f.recurse(args[0])
	case Undefined:
		return nil, f.err()
	}
	return nil, fmt.Errorf("'%s' object is not callable", typeName(fn))
}

func (r *state) evalArgs(a *callArgs, sc *scope) ([]any, *Dict, error) {
	args := make([]any, 0, len(a.args))
	for _, x := range a.args {
		v, err := r.eval(x, sc)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, v)
	}
	if a.dynArgs != nil {
		v, err := r.eval(a.dynArgs, sc)
		if err != nil {
			return nil, nil, err
		}
		more, err := iterate(v)
		if err != nil {
			return nil, nil, err
		}
		args = append(args, more...)
	}
	var kw *Dict
	if len(a.kwNames) > 0 || a.dynKwargs != nil {
		kw = NewDict()
	}
	for i, name := range a.kwNames {
		v, err := r.eval(a.kwVals[i], sc)
		if err != nil {
			return nil, nil, err
		}
		kw.set(name, v)
	}
	if a.dynKwargs != nil {
		v, err := r.eval(a.dynKwargs, sc)
		if err != nil {
			return nil, nil, err
		}
		d, ok := v.(*Dict)
		if !ok {
			return nil, nil, fmt.Errorf("argument after ** must be a mapping, not %s", typeName(v))
		}
		for _, k := range d.keys {
			kw.set(k, d.m[k])
		}
	}
	return args, kw, nil
}

func (r *state) call(a *callArgs, fnExpr expr, sc *scope, caller *macro) (any, error) {
	fn, err := r.eval(fnExpr, sc)
	if err != nil {
		return nil, err
	}
	args, kw, err := r.evalArgs(a, sc)
	if err != nil {
		return nil, err
	}
	return r.callValue(fn, args, kw, caller)
}

func (r *state) applyFilter(f *filterExpr, v any, sc *scope) (any, error) {
	args, kw, err := r.evalArgs(&f.callArgs, sc)
	if err != nil {
		return nil, err
	}
	return f.fn(r, v, args, kw)
}

func (r *state) eval(x expr, sc *scope) (any, error) {
	switch x := x.(type) {
	case *constExpr:
		return x.v, nil
	case *nameExpr:
		if v, ok := sc.lookup(x.name); ok {
			return v, nil
		}
		if v, ok := r.globals[x.name]; ok {
			return v, nil
		}
		return undefinedName(x.name), nil
	case *listExpr:
		out := make([]any, 0, len(x.items))
		for _, it := range x.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case *tupleExpr:
		out := make(tuple, 0, len(x.items))
		for _, it := range x.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case *dictExpr:
		d := NewDict()
		for i := range x.keys {
			k, err := r.eval(x.keys[i], sc)
			if err != nil {
				return nil, err
			}
			switch k.(type) {
			case nil, bool, int64, float64, string, Markup:
			default:
				return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
			}
			v, err := r.eval(x.vals[i], sc)
			if err != nil {
				return nil, err
			}
			d.set(k, v)
		}
		return d, nil
	case *attrExpr:
		obj, err := r.eval(x.obj, sc)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, x.name)
	case *itemExpr:
		obj, err := r.eval(x.obj, sc)
		if err != nil {
			return nil, err
		}
		k, err := r.eval(x.key, sc)
		if err != nil {
			return nil, err
		}
		return getItem(obj, k)
	case *sliceExpr:
		return r.evalSlice(x, sc)
	case *callExpr:
		return r.call(&x.callArgs, x.fn, sc, nil)
	case *filterExpr:
		v, err := r.eval(x.arg, sc)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(x, v, sc)
	case *testExpr:
		v, err := r.eval(x.arg, sc)
		if err != nil {
			return nil, err
		}
		args, kw, err := r.evalArgs(&x.callArgs, sc)
		if err != nil {
			return nil, err
		}
		if kw != nil {
			for _, k := range kw.keys {
				args = append(args, kw.m[k])
			}
		}
		ok, err := x.fn(r, v, args)
		return ok, err
	case *unaryExpr:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		return unary(x.op, v)
	case *binExpr:
		l, err := r.eval(x.l, sc)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "and":
			if !truthy(l) {
				return l, nil
			}
			return r.eval(x.r, sc)
		case "or":
			if truthy(l) {
				return l, nil
			}
			return r.eval(x.r, sc)
		}
		rv, err := r.eval(x.r, sc)
		if err != nil {
			return nil, err
		}
		return binary(x.op, l, rv)
	case *concatExpr:
		var b strings.Builder
		for _, it := range x.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			b.WriteString(pyStr(v))
		}
		return b.String(), nil
	case *compareExpr:
		l, err := r.eval(x.first, sc)
		if err != nil {
			return nil, err
		}
		for i, op := range x.ops {
			rv, err := r.eval(x.rands[i], sc)
			if err != nil {
				return nil, err
			}
			ok, err := compareOp(op, l, rv)
			if err != nil || !ok {
				return false, err
			}
			l = rv
		}
		return true, nil
	case *condExpr:
		c, err := r.eval(x.cond, sc)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(x.yes, sc)
		}
		if x.no == nil {
			return Undefined{hint: fmt.Sprintf("the inline if-expression on line %d evaluated to false and no else section was defined", x.ln)}, nil
		}
		return r.eval(x.no, sc)
	}
	return nil, fmt.Errorf("internal error: unknown expression %T", x)
}

func compareOp(op string, l, r any) (bool, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "in":
		return contains(r, l)
	case "notin":
		ok, err := contains(r, l)
		return !ok, err
	}
	if u, ok := l.(Undefined); ok {
		return false, u.err()
	}
	if u, ok := r.(Undefined); ok {
		return false, u.err()
	}
	c, err := compare(l, r)
	if err != nil {
		return false, fmt.Errorf("'%s' not supported between instances of '%s' and '%s'", op, typeName(l), typeName(r))
	}
	switch op {
	case "<":
		return c < 0, nil
	case "<=":
		return c <= 0, nil
	case ">":
		return c > 0, nil
	}
	return c >= 0, nil
}

func unary(op string, v any) (any, error) {
	if op == "not" {
		return !truthy(v), nil
	}
	if u, ok := v.(Undefined); ok {
		return nil, u.err()
	}
	f, i, isInt, ok := number(v)
	if !ok {
		return nil, fmt.Errorf("bad operand type for unary %s: '%s'", op, typeName(v))
	}
	if op == "+" {
		if isInt {
			return i, nil
		}
		return f, nil
	}
	if isInt {
		return -i, nil
	}
	return -f, nil
}

func binary(op string, l, r any) (any, error) {
	if s, ok := asString(l); ok && op == "%" {
		return percentFormat(s, r) // str % anything, Undefined included, is str.__mod__
	}
	if u, ok := l.(Undefined); ok {
		return nil, u.err()
	}
	if u, ok := r.(Undefined); ok {
		return nil, u.err()
	}
	fl, il, lInt, lNum := number(l)
	fr, ir, rInt, rNum := number(r)
	if lNum && rNum {
		return arith(op, fl, il, lInt, fr, ir, rInt)
	}
	switch op {
	case "+":
		ls, lStr := asString(l)
		rs, rStr := asString(r)
		if lStr && rStr {
			_, lm := l.(Markup)
			_, rm := r.(Markup)
			switch {
			case lm && !rm:
				return Markup(ls + htmlEscape(rs)), nil
			case rm && !lm:
				return Markup(htmlEscape(ls) + rs), nil
			case lm && rm:
				return Markup(ls + rs), nil
			}
			return ls + rs, nil
		}
		if a, ok := l.([]any); ok {
			if b, ok := r.([]any); ok {
				out := make([]any, 0, len(a)+len(b))
				return append(append(out, a...), b...), nil
			}
		}
		if a, ok := l.(tuple); ok {
			if b, ok := r.(tuple); ok {
				out := make(tuple, 0, len(a)+len(b))
				return append(append(out, a...), b...), nil
			}
		}
	case "*":
		if rInt {
			return repeat(l, ir)
		}
		if lInt {
			return repeat(r, il)
		}
	}
	if op == "+" {
		switch l.(type) {
		case string, Markup, []any, tuple:
			// Python's own wording for str/list/tuple concatenation.
			return nil, fmt.Errorf("can only concatenate %s (not \"%s\") to %s", typeName(l), typeName(r), typeName(l))
		}
	}
	return nil, fmt.Errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
}

func repeat(v any, n int64) (any, error) {
	if n < 0 {
		n = 0
	}
	switch x := v.(type) {
	case string, Markup:
		s, _ := asString(x)
		if s == "" {
			n = 0
		}
		if n > 0 && int64(len(s)) > maxRepeatLen/n {
			return nil, fmt.Errorf("repeated string would exceed %d MiB", maxRepeatLen>>20)
		}
		if m, ok := x.(Markup); ok {
			return Markup(strings.Repeat(string(m), int(n))), nil
		}
		return strings.Repeat(s, int(n)), nil
	case []any, tuple:
		seq, _ := asSeq(x)
		if len(seq) == 0 {
			n = 0
		}
		if n > 0 && int64(len(seq)) > maxRepeatLen/n {
			return nil, fmt.Errorf("repeated list would exceed %d items", maxRepeatLen)
		}
		out := make([]any, 0, len(seq)*int(n))
		for i := int64(0); i < n; i++ {
			out = append(out, seq...)
		}
		if _, ok := x.(tuple); ok {
			return tuple(out), nil
		}
		return out, nil
	}
	return nil, fmt.Errorf("can't multiply sequence of type '%s' by an int", typeName(v))
}

func arith(op string, fl float64, il int64, lInt bool, fr float64, ir int64, rInt bool) (any, error) {
	both := lInt && rInt
	switch op {
	case "+":
		if both {
			s := il + ir
			if (s > il) != (ir > 0) {
				return nil, errIntOverflow
			}
			return s, nil
		}
		return fl + fr, nil
	case "-":
		if both {
			d := il - ir
			if (d < il) != (ir > 0) {
				return nil, errIntOverflow
			}
			return d, nil
		}
		return fl - fr, nil
	case "*":
		if both {
			p := il * ir
			if il != 0 && (p/il != ir || (il == -1 && ir == math.MinInt64)) {
				return nil, errIntOverflow
			}
			return p, nil
		}
		return fl * fr, nil
	case "/":
		if fr == 0 {
			return nil, fmt.Errorf("division by zero")
		}
		return fl / fr, nil
	case "//", "%":
		if fr == 0 {
			if both {
				return nil, fmt.Errorf("integer division or modulo by zero")
			}
			return nil, fmt.Errorf("float floor division by zero")
		}
		if both {
			q, m := il/ir, il%ir
			if m != 0 && ((m < 0) != (ir < 0)) {
				q--
				m += ir
			}
			if op == "//" {
				return q, nil
			}
			return m, nil
		}
		q, m := floatDivmod(fl, fr)
		if op == "//" {
			return q, nil
		}
		return m, nil
	case "**":
		if both && ir >= 0 {
			switch {
			case ir == 0 || il == 1:
				return int64(1), nil
			case il == 0:
				return int64(0), nil
			case il == -1:
				return int64(1 - 2*(ir%2)), nil
			}
			res := int64(1)
			for e := int64(0); e < ir; e++ { // |il| >= 2: overflows within 63 steps
				next := res * il
				if next/il != res {
					return nil, errIntOverflow
				}
				res = next
			}
			return res, nil
		}
		if fl == 0 && fr < 0 {
			return nil, fmt.Errorf("0.0 cannot be raised to a negative power")
		}
		if fl < 0 && fr != math.Trunc(fr) {
			return nil, fmt.Errorf("a negative number raised to a fractional power is complex, which templates do not support")
		}
		p := math.Pow(fl, fr)
		if math.IsInf(p, 0) && !math.IsInf(fl, 0) && !math.IsInf(fr, 0) {
			return nil, fmt.Errorf("(34, 'Numerical result out of range')")
		}
		return p, nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

func (r *state) evalSlice(x *sliceExpr, sc *scope) (any, error) {
	obj, err := r.eval(x.obj, sc)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, e := range []expr{x.start, x.stop, x.step} {
		if e == nil {
			continue
		}
		v, err := r.eval(e, sc)
		if err != nil {
			return nil, err
		}
		if v == nil {
			continue
		}
		_, n, isInt, ok := number(v)
		if !ok || !isInt {
			return nil, fmt.Errorf("slice indices must be integers or None, not %s", typeName(v))
		}
		bounds[i] = &n
	}
	return sliceValue(obj, bounds[0], bounds[1], bounds[2])
}

// sliceValue is Python's obj[start:stop:step].
func sliceValue(obj any, start, stop, step *int64) (any, error) {
	var seq []any
	var runes []rune
	n := 0
	switch x := obj.(type) {
	case []any:
		seq, n = x, len(x)
	case tuple:
		seq, n = x, len(x)
	case string, Markup:
		s, _ := asString(x)
		runes = []rune(s)
		n = len(runes)
	case Undefined:
		return nil, x.err()
	case *view:
		if x.kind != "range" {
			return nil, fmt.Errorf("'%s' object is not subscriptable", typeName(obj))
		}
		seq, n = x.items, len(x.items)
	default:
		return nil, fmt.Errorf("'%s' object is not subscriptable", typeName(obj))
	}
	st := int64(1)
	if step != nil {
		st = *step
	}
	if st == 0 {
		return nil, fmt.Errorf("slice step cannot be zero")
	}
	adjust := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += int64(n)
			if v < 0 {
				if st < 0 {
					return -1
				}
				return 0
			}
		} else if v >= int64(n) {
			if st < 0 {
				return int64(n) - 1
			}
			return int64(n)
		}
		return v
	}
	var b, e int64
	if st > 0 {
		b, e = adjust(start, 0), adjust(stop, int64(n))
	} else {
		b, e = adjust(start, int64(n)-1), adjust(stop, -1)
	}
	var idx []int
	for i := b; (st > 0 && i < e) || (st < 0 && i > e); i += st {
		idx = append(idx, int(i))
	}
	if runes != nil || seq == nil {
		out := make([]rune, 0, len(idx))
		for _, i := range idx {
			out = append(out, runes[i])
		}
		if _, ok := obj.(Markup); ok {
			return Markup(string(out)), nil
		}
		return string(out), nil
	}
	out := make([]any, 0, len(idx))
	for _, i := range idx {
		out = append(out, seq[i])
	}
	if _, ok := obj.(tuple); ok {
		return tuple(out), nil
	}
	return out, nil
}

// getAttr is Jinja2's obj.name: a Python attribute (a method) first, then the item.
func getAttr(obj any, name string) (any, error) {
	switch x := obj.(type) {
	case Undefined:
		return nil, x.err()
	case *Dict:
		if isMethod(obj, name) {
			return boundMethod{obj, name}, nil
		}
		if v, ok := x.m[name]; ok {
			return v, nil
		}
	case *namespace:
		if v, ok := x.d.m[name]; ok {
			return v, nil
		}
	case *loopObj:
		if v, ok := x.attr(name); ok {
			return v, nil
		}
	default:
		if isMethod(obj, name) {
			return boundMethod{obj, name}, nil
		}
	}
	return undefinedAttr(obj, name), nil
}

// getItem is Jinja2's obj[key]: the item first, then for a string key the attribute.
func getItem(obj, key any) (any, error) {
	switch x := obj.(type) {
	case Undefined:
		return nil, x.err()
	case *Dict:
		if v, ok := x.get(key); ok {
			return v, nil
		}
	case *view:
		if _, i, isInt, ok := number(key); ok && isInt && x.kind == "range" {
			if i < 0 {
				i += int64(len(x.items))
			}
			if i >= 0 && i < int64(len(x.items)) {
				return x.items[i], nil
			}
		}
	case []any, tuple, string, Markup:
		if _, i, isInt, ok := number(key); ok && isInt {
			if s, ok := asString(x); ok {
				runes := []rune(s)
				if i < 0 {
					i += int64(len(runes))
				}
				if i >= 0 && i < int64(len(runes)) {
					return string(runes[i]), nil
				}
				return undefinedAttr(obj, key), nil
			}
			seq, _ := asSeq(x)
			if i < 0 {
				i += int64(len(seq))
			}
			if i >= 0 && i < int64(len(seq)) {
				return seq[i], nil
			}
			return undefinedAttr(obj, key), nil
		}
	}
	if s, ok := key.(string); ok {
		return getAttr(obj, s)
	}
	return undefinedAttr(obj, key), nil
}

// errIntOverflow: Python's ints are unbounded, the engine's are 64-bit.
var errIntOverflow = errors.New("integer result does not fit in 64 bits")

// floatDivmod is CPython's float divmod, whose floor quotient is not always
// math.Floor(x/y): 1 // 0.1 == 9.0 because fmod(1, 0.1) is 0.09999999999999995.
func floatDivmod(x, y float64) (float64, float64) {
	mod := math.Mod(x, y)
	div := (x - mod) / y
	if mod != 0 {
		if (y < 0) != (mod < 0) {
			mod += y
			div -= 1
		}
	} else {
		mod = math.Copysign(0, y)
	}
	var floordiv float64
	if div != 0 {
		floordiv = math.Floor(div)
		if div-floordiv > 0.5 {
			floordiv++
		}
	} else {
		floordiv = math.Copysign(0, x/y)
	}
	return floordiv, mod
}
