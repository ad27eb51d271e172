package template

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind int

const (
	tokData       tokKind = iota // literal template text
	tokVarBegin                  // {{
	tokVarEnd                    // }}
	tokBlockBegin                // {%
	tokBlockEnd                  // %}
	tokName
	tokString
	tokInt
	tokFloat
	tokOp
	tokEOF
)

type token struct {
	kind tokKind
	val  string // data text, name, operator, or the decoded string literal
	num  int64
	fnum float64
	line int
}

func (t token) String() string {
	switch t.kind {
	case tokData:
		return "template data"
	case tokVarBegin:
		return "'{{'"
	case tokVarEnd:
		return "'}}'"
	case tokBlockBegin:
		return "'{%'"
	case tokBlockEnd:
		return "'%}'"
	case tokString:
		return "string " + strconv.Quote(t.val)
	case tokInt, tokFloat, tokName, tokOp:
		return "'" + t.val + "'"
	}
	return "end of template"
}

// isSpace is Python's str.isspace / the re module's \s for one rune.
func isSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\f', '\v', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	return r > 0x7f && unicode.IsSpace(r)
}

func trimRightSpace(s string) string { return strings.TrimRightFunc(s, isSpace) }

func spaceLen(s string) int {
	n := 0
	for n < len(s) {
		r, w := utf8.DecodeRuneInString(s[n:])
		if !isSpace(r) {
			break
		}
		n += w
	}
	return n
}

// normalizeNewlines does what Jinja2 does to a template source before lexing: \r\n and
// \r become \n, and (keep_trailing_newline off) one trailing newline is dropped.
func normalizeNewlines(src string) string {
	if strings.IndexByte(src, '\r') >= 0 {
		src = strings.ReplaceAll(src, "\r\n", "\n")
		src = strings.ReplaceAll(src, "\r", "\n")
	}
	return strings.TrimSuffix(src, "\n")
}

type lexer struct {
	src  string
	pos  int
	line int
	toks []token
	// lineStarting: the last thing consumed ended a line (or nothing was consumed yet);
	// lstrip_blocks then also strips indentation before a tag on the first line of data.
	lineStarting bool
}

func lex(src string) ([]token, error) {
	lx := &lexer{src: normalizeNewlines(src), line: 1, lineStarting: true}
	if err := lx.run(); err != nil {
		return nil, err
	}
	lx.toks = append(lx.toks, token{kind: tokEOF, line: lx.line})
	return lx.toks, nil
}

func (lx *lexer) errorf(format string, args ...any) error {
	return &Error{Line: lx.line, Msg: fmt.Sprintf(format, args...)}
}

func (lx *lexer) emitData(text string) {
	if text != "" {
		lx.toks = append(lx.toks, token{kind: tokData, val: text, line: lx.line})
	}
	lx.line += strings.Count(text, "\n")
}

// advance consumes s (already known to be at pos) for line counting.
func (lx *lexer) advance(n int) {
	lx.line += strings.Count(lx.src[lx.pos:lx.pos+n], "\n")
	lx.pos += n
}

// nextTag finds the next "{{", "{%" or "{#" at or after i.
func nextTag(s string, i int) int {
	for {
		j := strings.IndexByte(s[i:], '{')
		if j < 0 || i+j+1 >= len(s) {
			return -1
		}
		k := i + j
		if c := s[k+1]; c == '{' || c == '%' || c == '#' {
			return k
		}
		i = k + 1
	}
}

func (lx *lexer) run() error {
	for lx.pos < len(lx.src) {
		k := nextTag(lx.src, lx.pos)
		if k < 0 {
			lx.emitData(lx.src[lx.pos:])
			lx.pos = len(lx.src)
			return nil
		}
		text := lx.src[lx.pos:k]
		kind := lx.src[k+1]
		sign := byte(0)
		if k+2 < len(lx.src) && (lx.src[k+2] == '-' || lx.src[k+2] == '+') {
			sign = lx.src[k+2]
		}
		switch {
		case sign == '-':
			text = trimRightSpace(text)
		case sign != '+' && kind != '{':
			// lstrip_blocks: drop the indentation before a block or comment tag that
			// starts its line.
			l := strings.LastIndexByte(text, '\n') + 1
			if (l > 0 || lx.lineStarting) && l < len(text) && spaceLen(text[l:]) == len(text)-l {
				text = text[:l]
			}
		}
		lx.emitData(text)
		lx.line += strings.Count(lx.src[lx.pos+len(text):k], "\n")
		lx.pos = k + 2
		if sign != 0 {
			lx.pos++
		}
		var err error
		switch kind {
		case '#':
			err = lx.comment()
		case '{':
			lx.toks = append(lx.toks, token{kind: tokVarBegin, line: lx.line})
			err = lx.inside("}}", tokVarEnd)
		default:
			if lx.isRaw() {
				err = lx.raw()
			} else {
				lx.toks = append(lx.toks, token{kind: tokBlockBegin, line: lx.line})
				err = lx.inside("%}", tokBlockEnd)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// tagEnd consumes a closing "%}", "#}" or "}}" (with its whitespace control) at pos if
// there is one; trim says whether trim_blocks applies (block and comment tags).
func (lx *lexer) tagEnd(end string, trim bool) bool {
	s := lx.src[lx.pos:]
	n := 0
	switch {
	case strings.HasPrefix(s, "-"+end):
		n = len(end) + 1
		n += spaceLen(s[n:])
	case trim && strings.HasPrefix(s, "+"+end):
		n = len(end) + 1
	case strings.HasPrefix(s, end):
		n = len(end)
		if trim && strings.HasPrefix(s[n:], "\n") {
			n++
		}
	default:
		return false
	}
	lx.lineStarting = s[n-1] == '\n'
	lx.advance(n)
	return true
}

func (lx *lexer) comment() error {
	start := lx.line
	for {
		j := strings.Index(lx.src[lx.pos:], "#}")
		if j < 0 {
			lx.line = start
			return lx.errorf("comment is never closed (missing '#}')")
		}
		// "-#}" or "+#}" end where the sign precedes "#}".
		at := lx.pos + j
		if at > lx.pos && (lx.src[at-1] == '-' || lx.src[at-1] == '+') {
			at--
		}
		lx.advance(at - lx.pos)
		if lx.tagEnd("#}", true) {
			return nil
		}
		lx.advance(1)
	}
}

// isRaw reports whether the block tag at pos is "raw".
func (lx *lexer) isRaw() bool {
	s := lx.src[lx.pos:]
	s = s[spaceLen(s):]
	if !strings.HasPrefix(s, "raw") {
		return false
	}
	s = s[3:]
	s = s[spaceLen(s):]
	return strings.HasPrefix(s, "%}") || strings.HasPrefix(s, "-%}")
}

func (lx *lexer) raw() error {
	start := lx.line
	lx.advance(spaceLen(lx.src[lx.pos:]))
	lx.advance(3)
	lx.advance(spaceLen(lx.src[lx.pos:]))
	if !lx.tagEnd("%}", false) {
		return lx.errorf("malformed raw tag")
	}
	for i := lx.pos; ; {
		k := strings.Index(lx.src[i:], "{%")
		if k < 0 {
			lx.line = start
			return lx.errorf("raw block is never closed (missing '{%% endraw %%}')")
		}
		k += i
		j := k + 2
		sign := byte(0)
		if j < len(lx.src) && (lx.src[j] == '-' || lx.src[j] == '+') {
			sign = lx.src[j]
			j++
		}
		j += spaceLen(lx.src[j:])
		if !strings.HasPrefix(lx.src[j:], "endraw") {
			i = k + 2
			continue
		}
		j += len("endraw")
		j += spaceLen(lx.src[j:])
		text := lx.src[lx.pos:k]
		if sign == '-' {
			text = trimRightSpace(text)
		}
		lx.toks = append(lx.toks, token{kind: tokData, val: text, line: lx.line})
		lx.advance(j - lx.pos)
		if !lx.tagEnd("%}", true) {
			return lx.errorf("malformed endraw tag")
		}
		return nil
	}
}

var operators = []string{"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"}

// inside lexes the expression tokens of a {{ }} or {% %} tag up to its end.
func (lx *lexer) inside(end string, endKind tokKind) error {
	var stack []byte
	trim := endKind == tokBlockEnd
	for {
		lx.advance(spaceLen(lx.src[lx.pos:]))
		if lx.pos >= len(lx.src) {
			return lx.errorf("unexpected end of template, expected '%s'", end)
		}
		if len(stack) == 0 {
			line := lx.line
			if lx.tagEnd(end, trim) {
				lx.toks = append(lx.toks, token{kind: endKind, line: line})
				return nil
			}
		}
		s := lx.src[lx.pos:]
		c := s[0]
		line := lx.line
		switch {
		case c == '\'' || c == '"':
			val, n, err := lexString(s)
			if err != nil {
				return lx.errorf("%v", err)
			}
			lx.advance(n)
			lx.toks = append(lx.toks, token{kind: tokString, val: val, line: line})
		case c >= '0' && c <= '9':
			tok, n, err := lexNumber(s)
			if err != nil {
				return lx.errorf("%v", err)
			}
			tok.line = line
			lx.advance(n)
			lx.toks = append(lx.toks, tok)
		case c == '_' || isASCIILetter(c) || c >= 0x80:
			n := 0
			for n < len(s) {
				r, w := utf8.DecodeRuneInString(s[n:])
				if !(r == '_' || unicode.IsLetter(r) || (n > 0 && unicode.IsDigit(r))) {
					break
				}
				n += w
			}
			if n == 0 {
				r, _ := utf8.DecodeRuneInString(s)
				return lx.errorf("unexpected character %q", r)
			}
			lx.toks = append(lx.toks, token{kind: tokName, val: s[:n], line: line})
			lx.advance(n)
		default:
			op := ""
			for _, o := range operators {
				if strings.HasPrefix(s, o) {
					op = o
					break
				}
			}
			if op == "" {
				r, _ := utf8.DecodeRuneInString(s)
				return lx.errorf("unexpected character %q", r)
			}
			switch op {
			case "(", "[", "{":
				stack = append(stack, op[0])
			case ")", "]", "}":
				want := map[string]byte{")": '(', "]": '[', "}": '{'}[op]
				if len(stack) == 0 || stack[len(stack)-1] != want {
					return lx.errorf("unexpected '%s'", op)
				}
				stack = stack[:len(stack)-1]
			}
			lx.toks = append(lx.toks, token{kind: tokOp, val: op, line: line})
			lx.advance(len(op))
		}
	}
}

func isASCIILetter(c byte) bool { return c|0x20 >= 'a' && c|0x20 <= 'z' }

func lexNumber(s string) (token, int, error) {
	n := 0
	digits := func() {
		for n < len(s) && (s[n] >= '0' && s[n] <= '9' || s[n] == '_' && n+1 < len(s) && s[n+1] >= '0' && s[n+1] <= '9') {
			n++
		}
	}
	digits()
	isFloat := false
	if n+1 < len(s) && s[n] == '.' && s[n+1] >= '0' && s[n+1] <= '9' {
		isFloat = true
		n++
		digits()
	}
	if n < len(s) && (s[n] == 'e' || s[n] == 'E') {
		m := n + 1
		if m < len(s) && (s[m] == '+' || s[m] == '-') {
			m++
		}
		if m < len(s) && s[m] >= '0' && s[m] <= '9' {
			isFloat = true
			n = m
			digits()
		}
	}
	text := strings.ReplaceAll(s[:n], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return token{}, 0, fmt.Errorf("bad number %q", s[:n])
		}
		return token{kind: tokFloat, val: s[:n], fnum: f}, n, nil
	}
	i, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(text, 64)
		if ferr != nil {
			return token{}, 0, fmt.Errorf("bad number %q", s[:n])
		}
		return token{kind: tokFloat, val: s[:n], fnum: f}, n, nil
	}
	return token{kind: tokInt, val: s[:n], num: i}, n, nil
}

// lexString reads a quoted literal with Python's unicode-escape rules (Jinja2 decodes
// string literals that way; unknown escapes stay as written).
func lexString(s string) (string, int, error) {
	q := s[0]
	var b strings.Builder
	i := 1
	for i < len(s) {
		c := s[i]
		if c == q {
			return b.String(), i + 1, nil
		}
		if c != '\\' {
			j := i + 1
			for j < len(s) && s[j] != q && s[j] != '\\' {
				j++
			}
			b.WriteString(s[i:j])
			i = j
			continue
		}
		if i+1 >= len(s) {
			break
		}
		e := s[i+1]
		i += 2
		switch e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte('\v')
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+n > len(s) {
				return "", 0, fmt.Errorf("truncated \\%c escape in string literal", e)
			}
			v, err := strconv.ParseUint(s[i:i+n], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return "", 0, fmt.Errorf("bad \\%c escape in string literal", e)
			}
			b.WriteRune(rune(v))
			i += n
		case '0', '1', '2', '3', '4', '5', '6', '7':
			v := int(e - '0')
			for k := 0; k < 2 && i < len(s) && s[i] >= '0' && s[i] <= '7'; k++ {
				v = v*8 + int(s[i]-'0')
				i++
			}
			b.WriteRune(rune(v))
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", 0, fmt.Errorf("string literal is never closed")
}
