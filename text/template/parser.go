package template

import (
	"fmt"
	"strings"
)

// ---- AST ----

type expr interface{ line() int }

type pos struct{ ln int }

func (p pos) line() int { return p.ln }

type (
	constExpr struct {
		pos
		v any
	}
	nameExpr struct {
		pos
		name string
	}
	listExpr struct {
		pos
		items []expr
	}
	tupleExpr struct {
		pos
		items []expr
	}
	dictExpr struct {
		pos
		keys, vals []expr
	}
	attrExpr struct {
		pos
		obj  expr
		name string
	}
	itemExpr struct {
		pos
		obj, key expr
	}
	sliceExpr struct {
		pos
		obj               expr
		start, stop, step expr // nil when left out
	}
	callArgs struct {
		args      []expr
		kwNames   []string
		kwVals    []expr
		dynArgs   expr
		dynKwargs expr
	}
	callExpr struct {
		pos
		fn expr
		callArgs
	}
	filterExpr struct {
		pos
		arg  expr // nil for the body of a filter block
		name string
		fn   filterFunc
		callArgs
	}
	testExpr struct {
		pos
		arg  expr
		name string
		fn   testFunc
		callArgs
	}
	unaryExpr struct {
		pos
		op string // "not", "-", "+"
		x  expr
	}
	binExpr struct {
		pos
		op   string
		l, r expr
	}
	concatExpr struct {
		pos
		items []expr
	}
	compareExpr struct {
		pos
		first expr
		ops   []string
		rands []expr
	}
	condExpr struct {
		pos
		cond, yes, no expr // no may be nil
	}
)

type node interface{}

type (
	textNode   struct{ s string }
	outputNode struct {
		pos
		x expr
	}
	ifNode struct {
		pos
		conds  []expr
		bodies [][]node
		els    []node
	}
	forNode struct {
		pos
		target    expr // nameExpr or tupleExpr of names
		iter      expr
		cond      expr
		body, els []node
		recursive bool
		undef     map[string]bool // names this frame reads as undefined until it sets them (frames.go)
		elseUndef map[string]bool // the same for the else body, a frame of its own
	}
	setNode struct {
		pos
		target expr // nameExpr, tupleExpr of names, or attrExpr on a namespace
		x      expr
	}
	setBlockNode struct {
		pos
		target  expr
		filters []*filterExpr
		body    []node
		undef   map[string]bool // names this frame reads as undefined until it sets them (frames.go)
	}
	macroNode struct {
		pos
		m *macroDef
	}
	callBlockNode struct {
		pos
		call   *callExpr
		caller *macroDef
	}
	filterBlockNode struct {
		pos
		filters []*filterExpr
		body    []node
		undef   map[string]bool // names this frame reads as undefined until it sets them (frames.go)
	}
	withNode struct {
		pos
		targets []expr
		vals    []expr
		body    []node
		undef   map[string]bool // names this frame reads as undefined until it sets them (frames.go)
	}
	loopCtlNode struct {
		pos
		brk bool
	}
)

type macroDef struct {
	name     string
	params   []string
	defaults []expr // aligned to the last len(defaults) params
	body     []node
	line     int
	undef    map[string]bool // names this frame reads as undefined until it sets them (frames.go)
	// catchVarargs, catchKwargs, catchCaller: the body mentions varargs, kwargs, caller.
	catchVarargs, catchKwargs, catchCaller bool
}

// ---- parser ----

type parser struct {
	toks  []token
	i     int
	loops int // for bodies being parsed around the current position (0 inside a macro)
	depth int // nesting of expressions and statements, bounded by maxNesting
}

// maxNesting bounds how deeply expressions and blocks nest (Python's own parser and
// recursion limit stop Jinja2 near there too).
const maxNesting = 400

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxNesting {
		return p.errAt(p.cur().line, "template nested more than %d levels deep", maxNesting)
	}
	return nil
}

func parse(src string) ([]node, error) {
	toks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	body, end, err := p.subparse(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.errAt(p.cur().line, "unexpected '%s'", end)
	}
	return body, nil
}

func (p *parser) cur() token  { return p.toks[p.i] }
func (p *parser) peek() token { return p.toks[min(p.i+1, len(p.toks)-1)] }
func (p *parser) next() token { t := p.toks[p.i]; p.i = min(p.i+1, len(p.toks)-1); return t }

func (p *parser) errAt(line int, format string, args ...any) error {
	return &Error{Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) isOp(s string) bool { t := p.cur(); return t.kind == tokOp && t.val == s }
func (p *parser) isName(s string) bool {
	t := p.cur()
	return t.kind == tokName && t.val == s
}

func (p *parser) skipOp(s string) bool {
	if p.isOp(s) {
		p.next()
		return true
	}
	return false
}

func (p *parser) skipName(s string) bool {
	if p.isName(s) {
		p.next()
		return true
	}
	return false
}

func (p *parser) expectOp(s string) error {
	if !p.skipOp(s) {
		return p.errAt(p.cur().line, "expected '%s', got %s", s, p.cur())
	}
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tokName {
		return "", p.errAt(t.line, "expected a name, got %s", t)
	}
	p.next()
	return t.val, nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tokBlockEnd {
		return p.errAt(p.cur().line, "expected end of statement '%%}', got %s", p.cur())
	}
	p.next()
	return nil
}

// subparse reads nodes until a block tag whose name is in ends; it returns that name
// (the tag's remaining tokens are left for the caller), or "" at the end of input.
func (p *parser) subparse(ends []string) ([]node, string, error) {
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tokEOF:
			if len(ends) > 0 {
				return nil, "", p.errAt(t.line, "unexpected end of template, expected '%s'", strings.Join(ends, "' or '"))
			}
			return body, "", nil
		case tokData:
			p.next()
			body = append(body, &textNode{s: t.val})
		case tokVarBegin:
			p.next()
			x, err := p.parseTuple(true, false)
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tokVarEnd {
				return nil, "", p.errAt(p.cur().line, "expected end of print statement '}}', got %s", p.cur())
			}
			p.next()
			body = append(body, &outputNode{pos{t.line}, x})
		case tokBlockBegin:
			p.next()
			nt := p.cur()
			if nt.kind != tokName {
				return nil, "", p.errAt(nt.line, "expected a statement name, got %s", nt)
			}
			for _, e := range ends {
				if nt.val == e {
					p.next()
					return body, e, nil
				}
			}
			n, err := p.statement()
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				body = append(body, n)
			}
		default:
			return nil, "", p.errAt(t.line, "unexpected %s", t)
		}
	}
}

func (p *parser) statement() (node, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	t := p.next()
	ln := t.line
	switch t.val {
	case "if":
		return p.parseIf(ln)
	case "for":
		return p.parseFor(ln)
	case "set":
		return p.parseSet(ln)
	case "macro":
		return p.parseMacro(ln)
	case "call":
		return p.parseCallBlock(ln)
	case "filter":
		return p.parseFilterBlock(ln)
	case "with":
		return p.parseWith(ln)
	case "print":
		x, err := p.parseTuple(true, false)
		if err != nil {
			return nil, err
		}
		return &outputNode{pos{ln}, x}, p.expectBlockEnd()
	case "break", "continue":
		if p.loops == 0 {
			return nil, p.errAt(ln, "'%s' outside of a loop", t.val)
		}
		return &loopCtlNode{pos{ln}, t.val == "break"}, p.expectBlockEnd()
	case "generation":
		// transformers' AssistantTracker tag: marks assistant text, renders its body as is.
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		// Its body is a call block's caller, a macro: a frame of its own, outside any loop.
		loops := p.loops
		p.loops = 0
		body, _, err := p.subparse([]string{"endgeneration"})
		p.loops = loops
		if err != nil {
			return nil, err
		}
		return &withNode{pos: pos{ln}, body: body}, p.expectBlockEnd()
	case "extends", "include", "import", "from", "block":
		return nil, p.errAt(ln, "'%s' is not supported: a chat template is rendered from a string, with no loader", t.val)
	}
	return nil, p.errAt(ln, "encountered unknown tag '%s'", t.val)
}

func (p *parser) parseIf(ln int) (node, error) {
	n := &ifNode{pos: pos{ln}}
	for {
		cond, err := p.parseTuple(false, false)
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.subparse([]string{"elif", "else", "endif"})
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			n.els, _, err = p.subparse([]string{"endif"})
			if err != nil {
				return nil, err
			}
		}
		return n, p.expectBlockEnd()
	}
}

func (p *parser) parseAssignTarget(withNamespace bool) (expr, error) {
	t := p.cur()
	if withNamespace && t.kind == tokName && p.peek().kind == tokOp && p.peek().val == "." {
		p.next()
		p.next()
		attr, err := p.expectName()
		if err != nil {
			return nil, err
		}
		return &attrExpr{pos{t.line}, &nameExpr{pos{t.line}, t.val}, attr}, nil
	}
	paren := p.skipOp("(")
	var names []expr
	isTuple := false
	for {
		nt := p.cur()
		if nt.kind != tokName || isReservedName(nt.val) {
			return nil, p.errAt(nt.line, "can't assign to %s", nt)
		}
		p.next()
		names = append(names, &nameExpr{pos{nt.line}, nt.val})
		if !p.skipOp(",") {
			break
		}
		isTuple = true
		if p.isName("in") || p.isOp("=") || p.isOp(")") || p.cur().kind == tokBlockEnd {
			break
		}
	}
	if err := p.closeParen(paren); err != nil {
		return nil, err
	}
	if !isTuple {
		return names[0], nil
	}
	return &tupleExpr{pos{t.line}, names}, nil
}

func (p *parser) closeParen(paren bool) error {
	if paren {
		return p.expectOp(")")
	}
	return nil
}

func isReservedName(s string) bool {
	switch s {
	case "true", "false", "none", "True", "False", "None", "in", "not", "and", "or", "is", "if", "else":
		return true
	}
	return false
}

func (p *parser) parseFor(ln int) (node, error) {
	target, err := p.parseAssignTarget(false)
	if err != nil {
		return nil, err
	}
	if !p.skipName("in") {
		return nil, p.errAt(p.cur().line, "expected 'in' in for loop, got %s", p.cur())
	}
	iter, err := p.parseTuple(false, false)
	if err != nil {
		return nil, err
	}
	n := &forNode{pos: pos{ln}, target: target, iter: iter}
	if p.skipName("if") {
		if n.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	n.recursive = p.skipName("recursive")
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	p.loops++
	body, end, err := p.subparse([]string{"else", "endfor"})
	p.loops--
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		if n.els, _, err = p.subparse([]string{"endfor"}); err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSet(ln int) (node, error) {
	target, err := p.parseAssignTarget(true)
	if err != nil {
		return nil, err
	}
	if p.skipOp("=") {
		x, err := p.parseTuple(true, false)
		if err != nil {
			return nil, err
		}
		return &setNode{pos{ln}, target, x}, p.expectBlockEnd()
	}
	n := &setBlockNode{pos: pos{ln}, target: target}
	for p.skipOp("|") {
		f, err := p.parseFilter(nil, ln)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	if n.body, _, err = p.subparse([]string{"endset"}); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSignature(m *macroDef) error {
	if err := p.expectOp("("); err != nil {
		return err
	}
	for !p.isOp(")") {
		if len(m.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return err
			}
			if p.isOp(")") {
				break
			}
		}
		name, err := p.expectName()
		if err != nil {
			return err
		}
		m.params = append(m.params, name)
		if p.skipOp("=") {
			d, err := p.parseExpression(true)
			if err != nil {
				return err
			}
			m.defaults = append(m.defaults, d)
		} else if len(m.defaults) > 0 {
			return p.errAt(p.cur().line, "non-default argument %s follows default argument", name)
		}
	}
	p.next()
	return nil
}

func (p *parser) parseMacro(ln int) (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	m := &macroDef{name: name, line: ln}
	if err := p.parseSignature(m); err != nil {
		return nil, err
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	loops := p.loops
	p.loops = 0
	m.body, _, err = p.subparse([]string{"endmacro"})
	p.loops = loops
	if err != nil {
		return nil, err
	}
	if p.cur().kind == tokName { // {% endmacro name %}
		p.next()
	}
	return &macroNode{pos{ln}, m}, p.expectBlockEnd()
}

func (p *parser) parseCallBlock(ln int) (node, error) {
	caller := &macroDef{name: "caller", line: ln}
	if p.isOp("(") {
		if err := p.parseSignature(caller); err != nil {
			return nil, err
		}
	}
	x, err := p.parseExpression(true)
	if err != nil {
		return nil, err
	}
	call, ok := x.(*callExpr)
	if !ok {
		return nil, p.errAt(ln, "expected a call after 'call'")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	loops := p.loops
	p.loops = 0
	caller.body, _, err = p.subparse([]string{"endcall"})
	p.loops = loops
	if err != nil {
		return nil, err
	}
	return &callBlockNode{pos{ln}, call, caller}, p.expectBlockEnd()
}

func (p *parser) parseFilterBlock(ln int) (node, error) {
	n := &filterBlockNode{pos: pos{ln}}
	for first := true; first || p.skipOp("|"); first = false {
		f, err := p.parseFilter(nil, ln)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	var err error
	if n.body, _, err = p.subparse([]string{"endfilter"}); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseWith(ln int) (node, error) {
	n := &withNode{pos: pos{ln}}
	for p.cur().kind != tokBlockEnd {
		if len(n.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		t, err := p.parseAssignTarget(false)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, t)
		n.vals = append(n.vals, v)
	}
	p.next()
	var err error
	if n.body, _, err = p.subparse([]string{"endwith"}); err != nil {
		return nil, err
	}
	return n, p.expectBlockEnd()
}

// ---- expressions ----

// parseTuple parses an expression, or a tuple if commas follow.
func (p *parser) parseTuple(withCond, explicitParens bool) (expr, error) {
	ln := p.cur().line
	var items []expr
	comma := false
	for {
		if len(items) > 0 {
			if !p.skipOp(",") {
				break
			}
			comma = true
		}
		if p.tupleEnds() {
			break
		}
		x, err := p.parseExpression(withCond)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	if !comma {
		if len(items) == 1 {
			return items[0], nil
		}
		if !explicitParens {
			return nil, p.errAt(ln, "expected an expression, got %s", p.cur())
		}
	}
	return &tupleExpr{pos{ln}, items}, nil
}

func (p *parser) tupleEnds() bool {
	t := p.cur()
	switch t.kind {
	case tokVarEnd, tokBlockEnd, tokEOF:
		return true
	case tokOp:
		return t.val == ")"
	case tokName:
		return t.val == "recursive" || t.val == "if"
	}
	return false
}

func (p *parser) parseExpression(withCond bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	if !withCond {
		return p.parseOr()
	}
	ln := p.cur().line
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.skipName("if") {
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var no expr
		if p.skipName("else") {
			if no, err = p.parseExpression(true); err != nil {
				return nil, err
			}
		}
		x = &condExpr{pos{ln}, cond, x, no}
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) { return p.parseChain("or", p.parseAnd) }

func (p *parser) parseAnd() (expr, error) { return p.parseChain("and", p.parseNot) }

// parseChain parses operands joined by the keyword op, left to right: a op b op c is
// (a op b) op c, each operand parsed by operand (the next tighter level).
func (p *parser) parseChain(op string, operand func() (expr, error)) (expr, error) {
	x, err := operand()
	for err == nil && p.isName(op) {
		ln := p.next().line
		var r expr
		if r, err = operand(); err == nil {
			x = &binExpr{pos{ln}, op, x, r}
		}
	}
	return x, err
}

func (p *parser) parseNot() (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	if p.isName("not") {
		ln := p.next().line
		x, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{pos{ln}, "not", x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	ln := p.cur().line
	x, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{pos: pos{ln}, first: x}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tokOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == ">" || t.val == "<=" || t.val == ">="):
			op = t.val
			p.next()
		case p.isName("in"):
			op = "in"
			p.next()
		case p.isName("not") && p.peek().kind == tokName && p.peek().val == "in":
			op = "notin"
			p.next()
			p.next()
		default:
			if len(c.ops) == 0 {
				return x, nil
			}
			return c, nil
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rands = append(c.rands, r)
	}
}

func (p *parser) parseMath1() (expr, error) {
	x, err := p.parseConcat()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		t := p.next()
		var r expr
		if r, err = p.parseConcat(); err == nil {
			x = &binExpr{pos{t.line}, t.val, x, r}
		}
	}
	return x, err
}

func (p *parser) parseConcat() (expr, error) {
	ln := p.cur().line
	x, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	items := []expr{x}
	for p.skipOp("~") {
		r, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		items = append(items, r)
	}
	if len(items) == 1 {
		return x, nil
	}
	return &concatExpr{pos{ln}, items}, nil
}

func (p *parser) parseMath2() (expr, error) {
	x, err := p.parsePow()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		t := p.next()
		var r expr
		if r, err = p.parsePow(); err == nil {
			x = &binExpr{pos{t.line}, t.val, x, r}
		}
	}
	return x, err
}

func (p *parser) parsePow() (expr, error) {
	x, err := p.parseUnary(true)
	for err == nil && p.isOp("**") {
		t := p.next()
		var r expr
		if r, err = p.parseUnary(true); err == nil {
			x = &binExpr{pos{t.line}, "**", x, r}
		}
	}
	return x, err
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	var x expr
	var err error
	if p.isOp("-") || p.isOp("+") {
		t := p.next()
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		x = &unaryExpr{pos{t.line}, t.val, inner}
	} else if x, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	ln := t.line
	switch t.kind {
	case tokName:
		p.next()
		switch t.val {
		case "true", "True":
			return &constExpr{pos{ln}, true}, nil
		case "false", "False":
			return &constExpr{pos{ln}, false}, nil
		case "none", "None":
			return &constExpr{pos{ln}, nil}, nil
		}
		return &nameExpr{pos{ln}, t.val}, nil
	case tokString:
		p.next()
		s := t.val
		for p.cur().kind == tokString { // adjacent literals concatenate
			s += p.next().val
		}
		return &constExpr{pos{ln}, s}, nil
	case tokInt:
		p.next()
		return &constExpr{pos{ln}, t.num}, nil
	case tokFloat:
		p.next()
		return &constExpr{pos{ln}, t.fnum}, nil
	case tokOp:
		switch t.val {
		case "(":
			p.next()
			x, err := p.parseTuple(true, true)
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			p.next()
			l := &listExpr{pos: pos{ln}}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				x, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			p.next()
			return l, nil
		case "{":
			p.next()
			d := &dictExpr{pos: pos{ln}}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.next()
			return d, nil
		}
	}
	return nil, p.errAt(ln, "unexpected %s", t)
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		t := p.cur()
		switch {
		case t.kind == tokOp && t.val == ".":
			p.next()
			a := p.next()
			switch a.kind {
			case tokName:
				x = &attrExpr{pos{t.line}, x, a.val}
			case tokInt:
				x = &itemExpr{pos{t.line}, x, &constExpr{pos{t.line}, a.num}}
			default:
				return nil, p.errAt(a.line, "expected an attribute name after '.', got %s", a)
			}
		case t.kind == tokOp && t.val == "[":
			p.next()
			var err error
			if x, err = p.parseSubscript(x, t.line); err != nil {
				return nil, err
			}
		case t.kind == tokOp && t.val == "(":
			var err error
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}

// parseSubscript parses what follows "[" as Jinja2 does: one index or slice, or any
// other number of them separated by commas, which make a tuple key (x[] is x[()]).
func (p *parser) parseSubscript(obj expr, ln int) (expr, error) {
	var keys []expr
	for !p.isOp("]") {
		if len(keys) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		k, err := p.parseSubscribed(obj, ln)
		if err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	p.next()
	if len(keys) == 1 {
		return keys[0], nil
	}
	items := make([]expr, len(keys))
	for i, k := range keys {
		it, ok := k.(*itemExpr)
		if !ok {
			return nil, p.errAt(ln, "a slice inside a tuple subscript is not supported")
		}
		items[i] = it.key
	}
	return &itemExpr{pos{ln}, obj, &tupleExpr{pos{ln}, items}}, nil
}

// parseSubscribed parses one index or slice, leaving "]" or "," unread.
func (p *parser) parseSubscribed(obj expr, ln int) (expr, error) {
	var parts [3]expr
	n := 0
	isSlice := false
	for {
		if p.isOp(":") {
			isSlice = true
			p.next()
			n++
			if n > 2 {
				return nil, p.errAt(ln, "invalid slice")
			}
			continue
		}
		if p.isOp("]") || p.isOp(",") {
			break
		}
		if parts[n] != nil {
			return nil, p.errAt(p.cur().line, "expected ']' in subscript, got %s", p.cur())
		}
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		parts[n] = x
	}
	if !isSlice {
		if parts[0] == nil {
			return nil, p.errAt(ln, "empty subscript")
		}
		return &itemExpr{pos{ln}, obj, parts[0]}, nil
	}
	return &sliceExpr{pos{ln}, obj, parts[0], parts[1], parts[2]}, nil
}

func (p *parser) parseCallArgs() (callArgs, error) {
	var a callArgs
	if err := p.expectOp("("); err != nil {
		return a, err
	}
	for !p.isOp(")") {
		if len(a.args)+len(a.kwNames) > 0 || a.dynArgs != nil || a.dynKwargs != nil {
			if err := p.expectOp(","); err != nil {
				return a, err
			}
			if p.isOp(")") {
				break
			}
		}
		switch {
		case p.isOp("*"):
			p.next()
			x, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.dynArgs = x
		case p.isOp("**"):
			p.next()
			x, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.dynKwargs = x
		case p.cur().kind == tokName && p.peek().kind == tokOp && p.peek().val == "=":
			name := p.next().val
			p.next()
			x, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.kwNames = append(a.kwNames, name)
			a.kwVals = append(a.kwVals, x)
		default:
			if len(a.kwNames) > 0 {
				return a, p.errAt(p.cur().line, "positional argument follows keyword argument")
			}
			x, err := p.parseExpression(true)
			if err != nil {
				return a, err
			}
			a.args = append(a.args, x)
		}
	}
	p.next()
	return a, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	ln := p.cur().line
	a, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{pos{ln}, fn, a}, nil
}

func (p *parser) dottedName() (string, int, error) {
	t := p.cur()
	name, err := p.expectName()
	if err != nil {
		return "", 0, err
	}
	for p.isOp(".") {
		p.next()
		more, err := p.expectName()
		if err != nil {
			return "", 0, err
		}
		name += "." + more
	}
	return name, t.line, nil
}

func (p *parser) parseFilter(arg expr, ln int) (*filterExpr, error) {
	name, nln, err := p.dottedName()
	if err != nil {
		return nil, err
	}
	fn, ok := filters[name]
	if !ok {
		return nil, p.errAt(nln, "no filter named '%s'", name)
	}
	f := &filterExpr{pos: pos{nln}, arg: arg, name: name, fn: fn}
	if p.isOp("(") {
		if f.callArgs, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		switch {
		case p.isOp("|"):
			ln := p.next().line
			f, err := p.parseFilter(x, ln)
			if err != nil {
				return nil, err
			}
			x = f
		case p.isName("is"):
			ln := p.next().line
			negated := p.skipName("not")
			name, nln, err := p.dottedName()
			if err != nil {
				return nil, err
			}
			fn, ok := tests[name]
			if !ok {
				return nil, p.errAt(nln, "no test named '%s'", name)
			}
			t := &testExpr{pos: pos{ln}, arg: x, name: name, fn: fn}
			c := p.cur()
			switch {
			case p.isOp("("):
				if t.callArgs, err = p.parseCallArgs(); err != nil {
					return nil, err
				}
			case c.kind == tokString || c.kind == tokInt || c.kind == tokFloat || (c.kind == tokOp && (c.val == "[" || c.val == "{")) ||
				(c.kind == tokName && c.val != "else" && c.val != "or" && c.val != "and"):
				if c.kind == tokName && c.val == "is" {
					return nil, p.errAt(c.line, "you cannot chain multiple tests with is")
				}
				a, err := p.parsePrimary()
				if err != nil {
					return nil, err
				}
				if a, err = p.parsePostfix(a); err != nil {
					return nil, err
				}
				t.args = []expr{a}
			}
			x = t
			if negated {
				x = &unaryExpr{pos{ln}, "not", t}
			}
		case p.isOp("("):
			var err error
			if x, err = p.parseCall(x); err != nil {
				return nil, err
			}
		default:
			return x, nil
		}
	}
}
