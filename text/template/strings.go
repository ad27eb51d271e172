package template

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

var (
	upperCaser = cases.Upper(language.Und)
	lowerCaser = cases.Lower(language.Und)
)

// pyUpper and pyLower use Unicode's full case mappings, as Python's str methods do
// ("ß".upper() == "SS").
func pyUpper(s string) string {
	if isASCII(s) {
		return strings.ToUpper(s)
	}
	return upperCaser.String(s)
}

func pyLower(s string) string {
	if isASCII(s) {
		return strings.ToLower(s)
	}
	return lowerCaser.String(s)
}

func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// pyTitle is Python's str.title(): a cased letter after an uncased character starts a word.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			b.WriteString(pyLower(string(r)))
		} else {
			b.WriteRune(unicode.ToTitle(r))
		}
		prevCased = isCased(r)
	}
	return b.String()
}

// capitalize is Python's str.capitalize(): first character title-cased, the rest lowered.
func capitalize(s string) string {
	r, w := utf8.DecodeRuneInString(s)
	if w == 0 {
		return s
	}
	return string(unicode.ToTitle(r)) + pyLower(s[w:])
}

// jinjaTitle is Jinja2's title filter: words split at runs of "-", whitespace and
// opening brackets, each with its first character upper-cased and the rest lowered.
func jinjaTitle(s string) string {
	var b strings.Builder
	start := true
	for _, r := range s {
		sep := r == '-' || r == '(' || r == '{' || r == '[' || r == '<' || isSpace(r)
		switch {
		case sep:
			b.WriteRune(r)
			start = true
		case start:
			b.WriteString(pyUpper(string(r)))
			start = false
		default:
			b.WriteString(pyLower(string(r)))
		}
	}
	return b.String()
}

// pyIsCase is str.islower (upper=false) / str.isupper (upper=true).
func pyIsCase(s string, upper bool) bool {
	cased := false
	for _, r := range s {
		if upper && (unicode.IsLower(r) || unicode.IsTitle(r)) || !upper && (unicode.IsUpper(r) || unicode.IsTitle(r)) {
			return false
		}
		if isCased(r) {
			cased = true
		}
	}
	return cased
}

func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// splitLines is Python's str.splitlines().
func splitLines(s string, keepEnds bool) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		if !isLineBreak(r) {
			i += w
			continue
		}
		end := i + w
		if r == '\r' && end < len(s) && s[end] == '\n' {
			end++
		}
		if keepEnds {
			out = append(out, s[start:end])
		} else {
			out = append(out, s[start:i])
		}
		start, i = end, end
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// strStrip is str.strip/lstrip/rstrip with Python's optional chars argument.
func strStrip(v any, chars any, side string) (any, error) {
	s, ok := asString(v)
	if !ok {
		return nil, fmt.Errorf("strip needs a string, not %s", typeName(v))
	}
	cut := isSpace
	if chars != nil {
		cs, ok := asString(chars)
		if !ok {
			return nil, fmt.Errorf("strip arg must be None or str, not %s", typeName(chars))
		}
		cut = func(r rune) bool { return strings.ContainsRune(cs, r) }
	}
	switch side {
	case "left":
		s = strings.TrimLeftFunc(s, cut)
	case "right":
		s = strings.TrimRightFunc(s, cut)
	default:
		s = strings.TrimFunc(s, cut)
	}
	return sameKind(v, s), nil
}

func strReplace(v, old, repl, count any) (any, error) {
	s, _ := asString(v)
	o, ok1 := asString(old)
	n, ok2 := asString(repl)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("replace() arguments must be str, not %s and %s", typeName(old), typeName(repl))
	}
	c := int64(-1)
	if given(count) && count != nil {
		var err error
		if c, err = toInt(count, "count"); err != nil {
			return nil, err
		}
	}
	if _, ok := v.(Markup); ok {
		if _, ok := old.(Markup); !ok {
			o = htmlEscape(o)
		}
		if _, ok := repl.(Markup); !ok {
			n = htmlEscape(n)
		}
	}
	return sameKind(v, strings.Replace(s, o, n, int(c))), nil
}

// pySplit is str.split (fromRight=false) and str.rsplit (true).
func pySplit(s string, sep any, maxsplit int64, fromRight bool) ([]any, error) {
	var parts []string
	if sep == nil {
		parts = splitWhitespace(s, maxsplit, fromRight)
	} else {
		sp, ok := asString(sep)
		if !ok {
			return nil, fmt.Errorf("must be str or None, not %s", typeName(sep))
		}
		if sp == "" {
			return nil, fmt.Errorf("empty separator")
		}
		switch {
		case maxsplit < 0:
			parts = strings.Split(s, sp)
		case !fromRight:
			parts = strings.SplitN(s, sp, int(maxsplit)+1)
		default:
			for int64(len(parts)) < maxsplit {
				i := strings.LastIndex(s, sp)
				if i < 0 {
					break
				}
				parts = append([]string{s[i+len(sp):]}, parts...)
				s = s[:i]
			}
			parts = append([]string{s}, parts...)
		}
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

func splitWhitespace(s string, maxsplit int64, fromRight bool) []string {
	if !fromRight {
		var out []string
		for {
			s = strings.TrimLeftFunc(s, isSpace)
			if s == "" {
				return out
			}
			if maxsplit >= 0 && int64(len(out)) == maxsplit {
				return append(out, s)
			}
			i := strings.IndexFunc(s, isSpace)
			if i < 0 {
				return append(out, s)
			}
			out = append(out, s[:i])
			s = s[i:]
		}
	}
	var out []string
	for {
		s = strings.TrimRightFunc(s, isSpace)
		if s == "" {
			return out
		}
		if maxsplit >= 0 && int64(len(out)) == maxsplit {
			return append([]string{s}, out...)
		}
		i := strings.LastIndexFunc(s, isSpace)
		if i < 0 {
			return append([]string{s}, out...)
		}
		_, w := utf8.DecodeRuneInString(s[i:])
		out = append([]string{s[i+w:]}, out...)
		s = s[:i]
	}
}

var errTooWide = fmt.Errorf("a width over %d characters is refused", maxRepeatLen)

// pad aligns s in width code points: "<", ">" or "^" (Python's center puts the extra
// space on the right).
func pad(s string, width int, align string, fill rune) string {
	n := utf8.RuneCountInString(s)
	if n >= width {
		return s
	}
	total := width - n
	f := string(fill)
	switch align {
	case "<":
		return s + strings.Repeat(f, total)
	case ">":
		return strings.Repeat(f, total) + s
	}
	left := total / 2
	if total%2 == 1 && width%2 == 1 {
		left++
	}
	return strings.Repeat(f, left) + s + strings.Repeat(f, total-left)
}

// runeIndex converts a byte offset in s into a code point offset.
func runeIndex(s string, byteOff int) int64 {
	if byteOff < 0 {
		return -1
	}
	return int64(utf8.RuneCountInString(s[:byteOff]))
}

// subRange applies Python's optional start/end arguments (code point indexes) to s,
// returning the substring and the byte offset it starts at.
func subRange(s string, start, end any) (string, int) {
	if (!given(start) || start == nil) && (!given(end) || end == nil) {
		return s, 0
	}
	runes := []rune(s)
	n := int64(len(runes))
	idx := func(v any, def int64) int64 {
		if !given(v) || v == nil {
			return def
		}
		_, i, _, _ := number(v)
		if i < 0 {
			i += n
		}
		return max(0, min(i, n))
	}
	b, e := idx(start, 0), idx(end, n)
	if b > e {
		return "", -1
	}
	prefix := len(string(runes[:b]))
	return string(runes[b:e]), prefix
}

var strMethods = map[string]bool{
	"strip": true, "lstrip": true, "rstrip": true, "split": true, "rsplit": true, "splitlines": true,
	"startswith": true, "endswith": true, "replace": true, "upper": true, "lower": true, "title": true,
	"capitalize": true, "swapcase": true, "casefold": true, "format": true, "join": true, "find": true,
	"rfind": true, "index": true, "rindex": true, "count": true, "isdigit": true, "isalpha": true,
	"isalnum": true, "isspace": true, "islower": true, "isupper": true, "isnumeric": true,
	"isdecimal": true, "istitle": true, "zfill": true, "center": true, "ljust": true, "rjust": true,
	"removeprefix": true, "removesuffix": true, "partition": true, "rpartition": true,
}

var dictMethods = map[string]bool{"items": true, "keys": true, "values": true, "get": true, "copy": true,
	"pop": false, "popitem": false, "setdefault": false, "update": false, "clear": false}

var listMethods = map[string]bool{"index": true, "count": true, "copy": true,
	"append": false, "extend": false, "insert": false, "pop": false, "remove": false, "reverse": false,
	"sort": false, "clear": false}

// isMethod reports whether name is a method of v's Python type (safe or not).
func isMethod(v any, name string) bool {
	switch v.(type) {
	case string, Markup:
		return strMethods[name]
	case *Dict:
		_, ok := dictMethods[name]
		return ok
	case []any:
		_, ok := listMethods[name]
		return ok
	case tuple:
		return name == "index" || name == "count"
	}
	return false
}

func (r *state) callMethod(recv any, name string, args []any, kw *Dict) (any, error) {
	switch x := recv.(type) {
	case *Dict:
		if !dictMethods[name] {
			return nil, fmt.Errorf("access to attribute '%s' of 'dict' object is unsafe", name)
		}
		switch name {
		case "items":
			return &view{kind: "dict_items", items: dictItems(x)}, nil
		case "keys":
			return &view{kind: "dict_keys", items: append([]any{}, x.keys...)}, nil
		case "values":
			out := make([]any, 0, len(x.keys))
			for _, k := range x.keys {
				out = append(out, x.m[k])
			}
			return &view{kind: "dict_values", items: out}, nil
		case "copy":
			return x.copy(), nil
		case "get":
			a, err := bind("get", args, kw, "key", "default")
			if err != nil {
				return nil, err
			}
			if v, ok := x.get(a[0]); ok {
				return v, nil
			}
			return or(a[1], nil), nil
		}
	case []any, tuple:
		if !listMethods[name] {
			return nil, fmt.Errorf("access to attribute '%s' of '%s' object is unsafe", name, typeName(recv))
		}
		seq, _ := asSeq(x)
		switch name {
		case "copy":
			return append([]any{}, seq...), nil
		case "count":
			if len(args) != 1 {
				return nil, fmt.Errorf("count() takes exactly one argument")
			}
			n := int64(0)
			for _, e := range seq {
				if equal(e, args[0]) {
					n++
				}
			}
			return n, nil
		case "index":
			if len(args) < 1 {
				return nil, fmt.Errorf("index() takes at least 1 argument")
			}
			for i, e := range seq {
				if equal(e, args[0]) {
					return int64(i), nil
				}
			}
			return nil, fmt.Errorf("%s is not in list", pyRepr(args[0]))
		}
	case string, Markup:
		s, _ := asString(x)
		return r.strMethod(x, s, name, args, kw)
	}
	return nil, fmt.Errorf("'%s' object has no attribute '%s'", typeName(recv), name)
}

func (r *state) strMethod(v any, s, name string, args []any, kw *Dict) (any, error) {
	switch name {
	case "format":
		return strFormat(s, args, kw)
	}
	var a []any
	var err error
	params := map[string][]string{
		"strip": {"chars"}, "lstrip": {"chars"}, "rstrip": {"chars"},
		"split": {"sep", "maxsplit"}, "rsplit": {"sep", "maxsplit"}, "splitlines": {"keepends"},
		"startswith": {"prefix", "start", "end"}, "endswith": {"suffix", "start", "end"},
		"replace": {"old", "new", "count"}, "join": {"iterable"},
		"find": {"sub", "start", "end"}, "rfind": {"sub", "start", "end"},
		"index": {"sub", "start", "end"}, "rindex": {"sub", "start", "end"}, "count": {"sub", "start", "end"},
		"zfill": {"width"}, "center": {"width", "fillchar"}, "ljust": {"width", "fillchar"}, "rjust": {"width", "fillchar"},
		"removeprefix": {"prefix"}, "removesuffix": {"suffix"}, "partition": {"sep"}, "rpartition": {"sep"},
	}[name]
	if a, err = bind(name, args, kw, params...); err != nil {
		return nil, err
	}
	need := func(i int) (string, error) {
		if i >= len(a) || !given(a[i]) {
			return "", fmt.Errorf("%s() is missing its argument '%s'", name, params[i])
		}
		t, ok := asString(a[i])
		if !ok {
			return "", fmt.Errorf("%s() argument must be str, not %s", name, typeName(a[i]))
		}
		return t, nil
	}
	switch name {
	case "strip", "lstrip", "rstrip":
		side := map[string]string{"strip": "both", "lstrip": "left", "rstrip": "right"}[name]
		return strStrip(v, or(a[0], nil), side)
	case "split", "rsplit":
		ms := int64(-1)
		if given(a[1]) {
			if ms, err = toInt(a[1], "maxsplit"); err != nil {
				return nil, err
			}
		}
		return pySplit(s, or(a[0], nil), ms, name == "rsplit")
	case "splitlines":
		lines := splitLines(s, truthy(or(a[0], false)))
		out := make([]any, len(lines))
		for i, l := range lines {
			out[i] = l
		}
		return out, nil
	case "startswith", "endswith":
		sub, off := subRange(s, a[1], a[2])
		if off < 0 {
			return false, nil
		}
		var cands []any
		if t, ok := a[0].(tuple); ok {
			cands = t
		} else {
			cands = []any{a[0]}
		}
		for _, c := range cands {
			p, ok := asString(c)
			if !ok {
				return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(c))
			}
			if name == "startswith" && strings.HasPrefix(sub, p) || name == "endswith" && strings.HasSuffix(sub, p) {
				return true, nil
			}
		}
		return false, nil
	case "replace":
		return strReplace(v, a[0], a[1], a[2])
	case "upper":
		return sameKind(v, pyUpper(s)), nil
	case "lower", "casefold":
		return sameKind(v, pyLower(s)), nil
	case "title":
		return sameKind(v, pyTitle(s)), nil
	case "capitalize":
		return sameKind(v, capitalize(s)), nil
	case "swapcase":
		var b strings.Builder
		for _, c := range s {
			switch {
			case unicode.IsUpper(c):
				b.WriteString(pyLower(string(c)))
			case unicode.IsLower(c):
				b.WriteString(pyUpper(string(c)))
			default:
				b.WriteRune(c)
			}
		}
		return sameKind(v, b.String()), nil
	case "join":
		items, err := iterate(a[0])
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(items))
		for i, it := range items {
			p, ok := asString(it)
			if !ok {
				return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
			}
			parts[i] = p
		}
		return sameKind(v, strings.Join(parts, s)), nil
	case "find", "rfind", "index", "rindex", "count":
		sub, err := need(0)
		if err != nil {
			return nil, err
		}
		hay, off := subRange(s, a[1], a[2])
		if name == "count" {
			if off < 0 {
				return int64(0), nil
			}
			if sub == "" {
				return int64(utf8.RuneCountInString(hay) + 1), nil
			}
			return int64(strings.Count(hay, sub)), nil
		}
		i := -1
		if off >= 0 {
			if name == "find" || name == "index" {
				i = strings.Index(hay, sub)
			} else {
				i = strings.LastIndex(hay, sub)
			}
		}
		if i < 0 {
			if name == "index" || name == "rindex" {
				return nil, fmt.Errorf("substring not found")
			}
			return int64(-1), nil
		}
		return runeIndex(s, off+i), nil
	case "isdigit", "isnumeric", "isdecimal":
		return s != "" && strings.IndexFunc(s, func(c rune) bool { return !unicode.IsDigit(c) && !(name != "isdecimal" && unicode.IsNumber(c)) }) < 0, nil
	case "isalpha":
		return s != "" && strings.IndexFunc(s, func(c rune) bool { return !unicode.IsLetter(c) }) < 0, nil
	case "isalnum":
		return s != "" && strings.IndexFunc(s, func(c rune) bool { return !unicode.IsLetter(c) && !unicode.IsNumber(c) }) < 0, nil
	case "isspace":
		return s != "" && strings.IndexFunc(s, func(c rune) bool { return !isSpace(c) }) < 0, nil
	case "islower":
		return pyIsCase(s, false), nil
	case "isupper":
		return pyIsCase(s, true), nil
	case "istitle":
		return s != "" && pyTitle(s) == s && strings.IndexFunc(s, isCased) >= 0, nil
	case "zfill", "center", "ljust", "rjust":
		w, err := toInt(a[0], "width")
		if err != nil {
			return nil, err
		}
		if w > maxRepeatLen {
			return nil, errTooWide
		}
		fill := ' '
		if len(a) > 1 && given(a[1]) {
			f, ok := asString(a[1])
			if !ok || utf8.RuneCountInString(f) != 1 {
				return nil, fmt.Errorf("the fill character must be exactly one character long")
			}
			fill, _ = utf8.DecodeRuneInString(f)
		}
		switch name {
		case "center":
			return sameKind(v, pad(s, int(w), "^", fill)), nil
		case "ljust":
			return sameKind(v, pad(s, int(w), "<", fill)), nil
		case "rjust":
			return sameKind(v, pad(s, int(w), ">", fill)), nil
		}
		sign := ""
		if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
			sign, s = s[:1], s[1:]
		}
		return sameKind(v, sign+pad(s, int(w)-len(sign), ">", '0')), nil
	case "removeprefix", "removesuffix":
		p, err := need(0)
		if err != nil {
			return nil, err
		}
		if name == "removeprefix" {
			return sameKind(v, strings.TrimPrefix(s, p)), nil
		}
		return sameKind(v, strings.TrimSuffix(s, p)), nil
	case "partition", "rpartition":
		sep, err := need(0)
		if err != nil {
			return nil, err
		}
		if sep == "" {
			return nil, fmt.Errorf("empty separator")
		}
		var i int
		if name == "partition" {
			i = strings.Index(s, sep)
		} else {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if name == "partition" {
				return tuple{s, "", ""}, nil
			}
			return tuple{"", "", s}, nil
		}
		return tuple{s[:i], sep, s[i+len(sep):]}, nil
	}
	return nil, fmt.Errorf("'str' object has no attribute '%s'", name)
}

// ---- str.format ----

// strFormat is Python's str.format for the replacement fields templates use:
// {} {0} {name} with .attr and [key] lookups, !s/!r conversions and a format spec.
func strFormat(s string, args []any, kw *Dict) (any, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c == '}' {
			if i+1 < len(s) && s[i+1] == '}' {
				b.WriteByte('}')
				i += 2
				continue
			}
			return nil, fmt.Errorf("single '}' encountered in format string")
		}
		if c != '{' {
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 < len(s) && s[i+1] == '{' {
			b.WriteByte('{')
			i += 2
			continue
		}
		depth, j := 1, i+1
		for j < len(s) && depth > 0 {
			if s[j] == '{' {
				depth++
			} else if s[j] == '}' {
				depth--
			}
			j++
		}
		if depth > 0 {
			return nil, fmt.Errorf("single '{' encountered in format string")
		}
		field := s[i+1 : j-1]
		i = j
		spec := ""
		conv := ""
		if k := strings.IndexByte(field, ':'); k >= 0 {
			field, spec = field[:k], field[k+1:]
		}
		if k := strings.IndexByte(field, '!'); k >= 0 {
			field, conv = field[:k], field[k+1:]
		}
		name := field
		rest := ""
		if k := strings.IndexAny(field, ".["); k >= 0 {
			name, rest = field[:k], field[k:]
		}
		var v any
		switch {
		case name == "":
			if auto >= len(args) {
				return nil, fmt.Errorf("Replacement index %d out of range for positional args tuple", auto)
			}
			v = args[auto]
			auto++
		case name[0] >= '0' && name[0] <= '9':
			n, err := strconv.Atoi(name)
			if err != nil || n >= len(args) {
				return nil, fmt.Errorf("Replacement index %s out of range for positional args tuple", name)
			}
			v = args[n]
		default:
			var ok bool
			if kw != nil {
				v, ok = kw.get(name)
			}
			if !ok {
				return nil, fmt.Errorf("KeyError: '%s'", name)
			}
		}
		for rest != "" {
			var err error
			if rest[0] == '.' {
				k := strings.IndexAny(rest[1:], ".[")
				if k < 0 {
					k = len(rest) - 1
				}
				v, err = getAttr(v, rest[1:1+k])
				rest = rest[1+k:]
			} else {
				k := strings.IndexByte(rest, ']')
				if k < 0 {
					return nil, fmt.Errorf("missing ']' in format string")
				}
				var key any = rest[1:k]
				if n, e := strconv.ParseInt(rest[1:k], 10, 64); e == nil {
					key = n
				}
				v, err = getItem(v, key)
				rest = rest[k+1:]
			}
			if err != nil {
				return nil, err
			}
		}
		switch conv {
		case "r", "a":
			v = pyRepr(v)
		case "s":
			v = pyStr(v)
		case "":
		default:
			return nil, fmt.Errorf("unknown conversion specifier %s", conv)
		}
		if strings.Contains(spec, "{") {
			nested, err := strFormat(spec, args[min(auto, len(args)):], kw)
			if err != nil {
				return nil, err
			}
			spec = pyStr(nested)
		}
		out, err := formatSpec(v, spec)
		if err != nil {
			return nil, err
		}
		b.WriteString(out)
	}
	return b.String(), nil
}

// formatSpec is Python's format(v, spec): [[fill]align][sign][#][0][width][,][.precision][type].
func formatSpec(v any, spec string) (string, error) {
	if spec == "" {
		return pyStr(v), nil
	}
	rs := []rune(spec)
	i := 0
	fill, align := ' ', ""
	isAlign := func(r rune) bool { return r == '<' || r == '>' || r == '^' || r == '=' }
	if len(rs) >= 2 && isAlign(rs[1]) {
		fill, align, i = rs[0], string(rs[1]), 2
	} else if len(rs) >= 1 && isAlign(rs[0]) {
		align, i = string(rs[0]), 1
	}
	sign := ""
	if i < len(rs) && (rs[i] == '+' || rs[i] == '-' || rs[i] == ' ') {
		sign = string(rs[i])
		i++
	}
	if i < len(rs) && rs[i] == '#' {
		i++
	}
	if i < len(rs) && rs[i] == '0' {
		if align == "" {
			fill, align = '0', "="
		}
		i++
	}
	width := 0
	for i < len(rs) && rs[i] >= '0' && rs[i] <= '9' {
		width = width*10 + int(rs[i]-'0')
		i++
		if width > maxRepeatLen {
			return "", errTooWide
		}
	}
	comma := false
	if i < len(rs) && (rs[i] == ',' || rs[i] == '_') {
		comma = true
		i++
	}
	prec := -1
	if i < len(rs) && rs[i] == '.' {
		i++
		prec = 0
		for i < len(rs) && rs[i] >= '0' && rs[i] <= '9' {
			prec = prec*10 + int(rs[i]-'0')
			i++
			if prec > maxRepeatLen {
				return "", errTooWide
			}
		}
	}
	typ := ""
	if i < len(rs) {
		typ = string(rs[i:])
	}
	var body string
	neg := false
	f, n, isInt, isNum := number(v)
	if _, isBool := v.(bool); isBool && typ == "" {
		isNum = false
	}
	switch {
	case !isNum:
		s, ok := asString(v)
		if !ok {
			s = pyStr(v)
		}
		if typ != "" && typ != "s" {
			return "", fmt.Errorf("unknown format code '%s' for object of type '%s'", typ, typeName(v))
		}
		if prec >= 0 && utf8.RuneCountInString(s) > prec {
			s = string([]rune(s)[:prec])
		}
		if align == "" {
			align = "<"
		}
		return padAlign(s, "", width, align, fill), nil
	case isInt && (typ == "" || typ == "d" || typ == "n" || typ == "x" || typ == "X" || typ == "o" || typ == "b" || typ == "c"):
		neg = n < 0
		if neg {
			n = -n
		}
		base := map[string]int{"x": 16, "X": 16, "o": 8, "b": 2}[typ]
		if base == 0 {
			base = 10
		}
		if typ == "c" {
			body = string(rune(n))
		} else {
			body = strconv.FormatInt(n, base)
		}
		if typ == "X" {
			body = strings.ToUpper(body)
		}
		if comma {
			body = groupThousands(body)
		}
	default:
		neg = f < 0 || (f == 0 && math.Signbit(f))
		f = math.Abs(f)
		switch typ {
		case "f", "F", "%":
			if prec < 0 {
				prec = 6
			}
			if typ == "%" {
				f *= 100
			}
			body = strconv.FormatFloat(f, 'f', prec, 64)
			if comma {
				ip, fp, _ := strings.Cut(body, ".")
				body = groupThousands(ip)
				if fp != "" {
					body += "." + fp
				}
			}
			if typ == "%" {
				body += "%"
			}
		case "e", "E":
			if prec < 0 {
				prec = 6
			}
			body = pyExp(strconv.FormatFloat(f, 'e', prec, 64))
			if typ == "E" {
				body = strings.ToUpper(body)
			}
		case "g", "G", "":
			if prec < 0 && typ == "" {
				body = floatRepr(f)
				if isInt {
					body = strconv.FormatInt(int64(f), 10)
				}
			} else {
				if prec < 0 {
					prec = 6
				}
				if prec == 0 {
					prec = 1
				}
				body = pyExp(strconv.FormatFloat(f, 'g', prec, 64))
				if typ == "" && !strings.ContainsAny(body, ".e") {
					body += ".0"
				}
			}
		default:
			return "", fmt.Errorf("unknown format code '%s' for object of type '%s'", typ, typeName(v))
		}
	}
	signStr := ""
	if neg {
		signStr = "-"
	} else if sign == "+" || sign == " " {
		signStr = sign
	}
	if align == "" {
		align = ">"
	}
	return padAlign(body, signStr, width, align, fill), nil
}

// pyExp rewrites Go's exponent (e+07) into Python's (e+07 too, but at least two digits).
func pyExp(s string) string {
	k := strings.IndexAny(s, "eE")
	if k < 0 {
		return s
	}
	mant, exp := s[:k], s[k+1:]
	sign := exp[:1]
	digits := strings.TrimLeft(exp[1:], "0")
	for len(digits) < 2 {
		digits = "0" + digits
	}
	return mant + s[k:k+1] + sign + digits
}

func groupThousands(d string) string {
	var b strings.Builder
	for i, c := range d {
		if i > 0 && (len(d)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func padAlign(body, sign string, width int, align string, fill rune) string {
	if align == "=" {
		return sign + pad(body, width-utf8.RuneCountInString(sign), ">", fill)
	}
	return pad(sign+body, width, align, fill)
}

// ---- printf-style "%" formatting ----

func percentFormat(s string, arg any) (any, error) {
	var args []any
	var mapping any // anything with __getitem__ but a tuple or str: Python takes it for a mapping
	switch x := arg.(type) {
	case tuple:
		args = x
	case *Dict, Undefined, []any:
		mapping = x
		args = []any{x}
	case *view:
		if x.kind == "range" {
			mapping = x
		}
		args = []any{x}
	default:
		args = []any{arg}
	}
	next := 0
	take := func() (any, error) {
		if next >= len(args) {
			return nil, fmt.Errorf("not enough arguments for format string")
		}
		next++
		return args[next-1], nil
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		if c != '%' {
			j := strings.IndexByte(s[i:], '%')
			if j < 0 {
				j = len(s) - i
			}
			b.WriteString(s[i : i+j])
			i += j
			continue
		}
		i++
		if i >= len(s) {
			return nil, fmt.Errorf("incomplete format")
		}
		var v any
		hasV := false
		if s[i] == '(' {
			k := strings.IndexByte(s[i:], ')')
			if k < 0 || mapping == nil {
				return nil, fmt.Errorf("format requires a mapping")
			}
			key := s[i+1 : i+k]
			d, isDict := mapping.(*Dict)
			if !isDict {
				if u, ok := mapping.(Undefined); ok {
					return nil, u.err()
				}
				return nil, fmt.Errorf("%s indices must be integers or slices, not str", typeName(mapping))
			}
			val, ok := d.get(key)
			if !ok {
				return nil, fmt.Errorf("KeyError: '%s'", key)
			}
			v, hasV = val, true
			i += k + 1
		}
		flags := ""
		for i < len(s) && strings.IndexByte("-+ #0", s[i]) >= 0 {
			flags += s[i : i+1]
			i++
		}
		width := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			width = width*10 + int(s[i]-'0')
			i++
			if width > maxRepeatLen {
				return nil, errTooWide
			}
		}
		prec := ""
		if i < len(s) && s[i] == '.' {
			i++
			p := 0
			for i < len(s) && s[i] >= '0' && s[i] <= '9' {
				p = p*10 + int(s[i]-'0')
				i++
				if p > maxRepeatLen {
					return nil, errTooWide
				}
			}
			prec = "." + strconv.Itoa(p)
		}
		if i >= len(s) {
			return nil, fmt.Errorf("incomplete format")
		}
		typ := s[i]
		i++
		if typ == '%' {
			b.WriteByte('%')
			continue
		}
		if !hasV {
			var err error
			if v, err = take(); err != nil {
				return nil, err
			}
		}
		align := ">"
		fill := ' '
		if strings.Contains(flags, "-") {
			align = "<"
		} else if strings.Contains(flags, "0") && typ != 's' && typ != 'r' {
			align, fill = "=", '0'
		}
		signFlag := ""
		if strings.Contains(flags, "+") {
			signFlag = "+"
		} else if strings.Contains(flags, " ") {
			signFlag = " "
		}
		var spec string
		switch typ {
		case 's', 'r', 'a':
			str := pyStr(v)
			if typ != 's' {
				str = pyRepr(v)
			}
			if prec != "" {
				p, _ := strconv.Atoi(prec[1:])
				if utf8.RuneCountInString(str) > p {
					str = string([]rune(str)[:p])
				}
			}
			b.WriteString(pad(str, width, align, ' '))
			continue
		case 'd', 'i', 'u':
			_, n, isInt, ok := number(v)
			if !ok {
				if _, undef := v.(Undefined); !undef {
					return nil, fmt.Errorf("%%d format: a real number is required, not %s", typeName(v))
				}
			}
			if !isInt {
				f, _, _, _ := number(v)
				n = int64(f)
			}
			v = n
			spec = "d"
		case 'f', 'F', 'e', 'E', 'g', 'G':
			f, ok := toFloat(v)
			if _, isStr := asString(v); !ok || isStr {
				return nil, fmt.Errorf("must be real number, not %s", typeName(v))
			}
			v = f
			spec = prec + string(typ)
			if prec == "" {
				spec = ".6" + string(typ)
			}
		case 'x', 'X', 'o':
			_, n, isInt, ok := number(v)
			if !ok || !isInt {
				return nil, fmt.Errorf("%%%c format: an integer is required, not %s", typ, typeName(v))
			}
			v, spec = n, string(typ)
		case 'c':
			v = pyStr(v)
			spec = "s"
		default:
			return nil, fmt.Errorf("unsupported format character '%c'", typ)
		}
		out, err := formatSpec(v, string(fill)+align+signFlag+strconv.Itoa(width)+spec)
		if err != nil {
			return nil, err
		}
		b.WriteString(out)
	}
	if mapping == nil && next < len(args) {
		return nil, fmt.Errorf("not all arguments converted during string formatting")
	}
	return b.String(), nil
}
