package template

// Jinja2 compiles each frame (the top level, a loop body, a macro, a set/filter/with
// block body) into Python locals, and decides once per frame where each name it uses
// starts from. If the frame's first reference to a name, in source order, is an
// unconditional assignment ({% set %}, a macro definition) and no enclosing frame
// refers to the name, the variable starts undefined: code in nested frames (loop
// bodies, macros) that runs before the assignment sees it undefined, even when the
// render variables have that name. A frame whose first reference is a read, or an
// assignment inside an if, starts from the enclosing frames or the render variables.
// resolveFrames records the first kind of name on each frame (the undef fields) and
// scope.lookup honours it.

type frameWalker struct {
	seen       map[string]bool
	firstStore map[string]bool
	loads      map[string]bool // names read, here and (after the children ran) in nested frames
	children   []func(ancestors []map[string]bool) map[string]bool
}

func newFrameWalker(params ...string) *frameWalker {
	w := &frameWalker{seen: map[string]bool{}, firstStore: map[string]bool{}, loads: map[string]bool{}}
	for _, p := range params {
		w.seen[p] = true
	}
	return w
}

func (w *frameWalker) load(name string) {
	w.seen[name] = true
	w.loads[name] = true
}

func (w *frameWalker) store(name string, conditional bool) {
	if !w.seen[name] {
		w.seen[name] = true
		if !conditional {
			w.firstStore[name] = true
		}
	}
}

func (w *frameWalker) storeTarget(target expr, conditional bool) {
	switch t := target.(type) {
	case *nameExpr:
		w.store(t.name, conditional)
	case *tupleExpr:
		for _, it := range t.items {
			w.storeTarget(it, conditional)
		}
	case *attrExpr: // {% set ns.attr = ... %} reads ns
		w.expr(t.obj)
	}
}

func (w *frameWalker) args(a *callArgs) {
	for _, x := range a.args {
		w.expr(x)
	}
	for _, x := range a.kwVals {
		w.expr(x)
	}
	w.expr(a.dynArgs)
	w.expr(a.dynKwargs)
}

// expr records the names an expression reads.
func (w *frameWalker) expr(x expr) {
	switch x := x.(type) {
	case *nameExpr:
		w.load(x.name)
	case *listExpr:
		for _, it := range x.items {
			w.expr(it)
		}
	case *tupleExpr:
		for _, it := range x.items {
			w.expr(it)
		}
	case *dictExpr:
		for i := range x.keys {
			w.expr(x.keys[i])
			w.expr(x.vals[i])
		}
	case *attrExpr:
		w.expr(x.obj)
	case *itemExpr:
		w.expr(x.obj)
		w.expr(x.key)
	case *sliceExpr:
		w.expr(x.obj)
		w.expr(x.start)
		w.expr(x.stop)
		w.expr(x.step)
	case *callExpr:
		w.expr(x.fn)
		w.args(&x.callArgs)
	case *filterExpr:
		w.expr(x.arg)
		w.args(&x.callArgs)
	case *testExpr:
		w.expr(x.arg)
		w.args(&x.callArgs)
	case *unaryExpr:
		w.expr(x.x)
	case *binExpr:
		w.expr(x.l)
		w.expr(x.r)
	case *concatExpr:
		for _, it := range x.items {
			w.expr(it)
		}
	case *compareExpr:
		w.expr(x.first)
		for _, r := range x.rands {
			w.expr(r)
		}
	case *condExpr:
		w.expr(x.yes)
		w.expr(x.cond)
		w.expr(x.no)
	}
}

func (w *frameWalker) filters(fs []*filterExpr) {
	for _, f := range fs {
		w.args(&f.callArgs)
	}
}

// child queues a nested frame, analysed once this frame's own names are all known.
func (w *frameWalker) child(undef *map[string]bool, body []node, pre []expr, params ...string) {
	w.children = append(w.children, func(ancestors []map[string]bool) map[string]bool {
		u, loads := analyzeFrame(body, pre, params, ancestors)
		*undef = u
		return loads
	})
}

// macro queues a macro's frame; like Jinja2, a macro accepts extra positional or
// keyword arguments, or a call block's caller, only if its body mentions varargs,
// kwargs or caller.
func (w *frameWalker) macro(m *macroDef) {
	w.children = append(w.children, func(ancestors []map[string]bool) map[string]bool {
		u, loads := analyzeFrame(m.body, m.defaults, append([]string{"varargs", "kwargs", "caller"}, m.params...), ancestors)
		m.undef = u
		m.catchVarargs, m.catchKwargs, m.catchCaller = loads["varargs"], loads["kwargs"], loads["caller"]
		return loads
	})
}

func (w *frameWalker) body(body []node, conditional bool) {
	for _, n := range body {
		switch n := n.(type) {
		case *outputNode:
			w.expr(n.x)
		case *ifNode:
			for i, c := range n.conds {
				w.expr(c)
				w.body(n.bodies[i], true)
			}
			w.body(n.els, true)
		case *forNode:
			w.expr(n.iter)
			params := []string{"loop"}
			collectNames(n.target, &params)
			pre := []expr{}
			if n.cond != nil {
				pre = append(pre, n.cond)
			}
			w.child(&n.undef, n.body, pre, params...)
			w.child(&n.elseUndef, n.els, nil)
		case *setNode:
			w.expr(n.x)
			w.storeTarget(n.target, conditional)
		case *setBlockNode:
			w.filters(n.filters)
			w.storeTarget(n.target, conditional)
			w.child(&n.undef, n.body, nil)
		case *macroNode:
			w.store(n.m.name, conditional)
			w.macro(n.m)
		case *callBlockNode:
			w.expr(n.call.fn)
			w.args(&n.call.callArgs)
			w.macro(n.caller)
		case *filterBlockNode:
			w.filters(n.filters)
			w.child(&n.undef, n.body, nil)
		case *withNode:
			for _, v := range n.vals {
				w.expr(v)
			}
			var params []string
			for _, t := range n.targets {
				collectNames(t, &params)
			}
			w.child(&n.undef, n.body, nil, params...)
		}
	}
}

func collectNames(target expr, out *[]string) {
	switch t := target.(type) {
	case *nameExpr:
		*out = append(*out, t.name)
	case *tupleExpr:
		for _, it := range t.items {
			collectNames(it, out)
		}
	}
}

// analyzeFrame returns the names of one frame that start undefined and the names read
// in it or in frames nested in it, and analyses those frames. ancestors are the names
// each enclosing frame refers to.
func analyzeFrame(body []node, pre []expr, params []string, ancestors []map[string]bool) (map[string]bool, map[string]bool) {
	w := newFrameWalker(params...)
	for _, x := range pre {
		w.expr(x)
	}
	w.body(body, false)
	undef := map[string]bool{}
	for name := range w.firstStore {
		outer := false
		for _, a := range ancestors {
			if a[name] {
				outer = true
				break
			}
		}
		if !outer {
			undef[name] = true
		}
	}
	inner := append(append([]map[string]bool(nil), ancestors...), w.seen)
	for _, c := range w.children {
		for name := range c(inner) {
			w.loads[name] = true
		}
	}
	if len(undef) == 0 {
		undef = nil
	}
	return undef, w.loads
}

// resolveFrames analyses a template's frames and returns its top level's undef names.
func resolveFrames(body []node) map[string]bool {
	undef, _ := analyzeFrame(body, nil, nil, nil)
	return undef
}
