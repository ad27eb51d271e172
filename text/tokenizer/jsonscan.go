package tokenizer

import (
	"errors"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner reads the large parts of tokenizer.json (the vocab and the
// merges, up to a million entries) without reflection: encoding/json's
// reflection per entry would dominate loading a large vocabulary (Gemma 3's
// file is 33 MB). Everything else is handed to encoding/json as raw bytes.
type jsonScanner struct {
	data []byte
	pos  int
	buf  []byte // scratch for strings with escapes
}

func (s *jsonScanner) errorf(format string, args ...any) error {
	return fmt.Errorf("JSON at byte %d: %s", s.pos, fmt.Sprintf(format, args...))
}

func (s *jsonScanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek returns the next non-space byte, 0 at the end.
func (s *jsonScanner) peek() byte {
	s.ws()
	if s.pos >= len(s.data) {
		return 0
	}
	return s.data[s.pos]
}

func (s *jsonScanner) expect(c byte) error {
	if s.peek() != c {
		return s.errorf("want %q", c)
	}
	s.pos++
	return nil
}

// more is for the separators of an object or array: it consumes a comma and
// reports true, or consumes the closing byte and reports false.
func (s *jsonScanner) more(closing byte) (bool, error) {
	switch s.peek() {
	case ',':
		s.pos++
		return true, nil
	case closing:
		s.pos++
		return false, nil
	}
	return false, s.errorf("want ',' or %q", closing)
}

// str reads a string. The result aliases the input or the scratch buffer:
// it is valid until the next call.
func (s *jsonScanner) str() ([]byte, error) {
	if err := s.expect('"'); err != nil {
		return nil, err
	}
	start := s.pos
	for i := start; i < len(s.data); i++ {
		switch c := s.data[i]; {
		case c == '"':
			s.pos = i + 1
			if !utf8.Valid(s.data[start:i]) {
				return nil, s.errorf("string is not valid UTF-8")
			}
			return s.data[start:i], nil
		case c == '\\':
			return s.escaped(start, i)
		case c < 0x20:
			s.pos = i
			return nil, s.errorf("control character in string")
		}
	}
	return nil, s.errorf("unterminated string")
}

func (s *jsonScanner) escaped(start, i int) ([]byte, error) {
	s.buf = append(s.buf[:0], s.data[start:i]...)
	for i < len(s.data) {
		c := s.data[i]
		switch {
		case c == '"':
			s.pos = i + 1
			if !utf8.Valid(s.buf) {
				return nil, s.errorf("string is not valid UTF-8")
			}
			return s.buf, nil
		case c < 0x20:
			s.pos = i
			return nil, s.errorf("control character in string")
		case c != '\\':
			s.buf = append(s.buf, c)
			i++
			continue
		}
		if i+1 >= len(s.data) {
			break
		}
		i += 2
		switch e := s.data[i-1]; e {
		case '"', '\\', '/':
			s.buf = append(s.buf, e)
		case 'b':
			s.buf = append(s.buf, '\b')
		case 'f':
			s.buf = append(s.buf, '\f')
		case 'n':
			s.buf = append(s.buf, '\n')
		case 'r':
			s.buf = append(s.buf, '\r')
		case 't':
			s.buf = append(s.buf, '\t')
		case 'u':
			r, ok := hex4(s.data, i)
			if !ok {
				s.pos = i
				return nil, s.errorf("bad \\u escape")
			}
			i += 4
			if utf16.IsSurrogate(r) {
				if r2, ok := hex4(s.data, i+2); ok && s.data[i] == '\\' && s.data[i+1] == 'u' {
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
						i += 6
					}
				}
			}
			s.buf = utf8.AppendRune(s.buf, r) // a lone surrogate becomes U+FFFD, as in encoding/json
		default:
			s.pos = i - 1
			return nil, s.errorf("bad escape \\%c", e)
		}
	}
	return nil, s.errorf("unterminated string")
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[i:i+4]), 16, 16)
	return rune(v), err == nil
}

func (s *jsonScanner) integer() (int64, error) {
	s.ws()
	start := s.pos
	for s.pos < len(s.data) && (s.data[s.pos] >= '0' && s.data[s.pos] <= '9' || s.data[s.pos] == '-') {
		s.pos++
	}
	v, err := strconv.ParseInt(string(s.data[start:s.pos]), 10, 64)
	if err != nil {
		s.pos = start
		return 0, s.errorf("want an integer")
	}
	return v, nil
}

// skip passes over one value of any kind and returns its bytes.
func (s *jsonScanner) skip() ([]byte, error) {
	s.ws()
	start := s.pos
	depth := 0
	for s.pos < len(s.data) {
		switch c := s.data[s.pos]; c {
		case '"':
			if _, err := s.str(); err != nil {
				return nil, err
			}
			if depth == 0 {
				return s.data[start:s.pos], nil
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // the end of the enclosing value
				return s.data[start:s.pos], nil
			}
			depth--
			if depth == 0 {
				s.pos++
				return s.data[start:s.pos], nil
			}
		case ',', ':', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return s.data[start:s.pos], nil
			}
		}
		s.pos++
	}
	if depth > 0 || s.pos == start {
		return nil, errors.New("unexpected end of JSON")
	}
	return s.data[start:s.pos], nil
}

// object calls f for each key of an object; f must consume the value.
func (s *jsonScanner) object(f func(key []byte) error) error {
	if err := s.expect('{'); err != nil {
		return err
	}
	if s.peek() == '}' {
		s.pos++
		return nil
	}
	for {
		key, err := s.str()
		if err != nil {
			return err
		}
		if err := s.expect(':'); err != nil {
			return err
		}
		if err := f(key); err != nil {
			return err
		}
		more, err := s.more('}')
		if err != nil || !more {
			return err
		}
	}
}

// array calls f for each element of an array; f must consume it.
func (s *jsonScanner) array(f func(i int) error) error {
	if err := s.expect('['); err != nil {
		return err
	}
	if s.peek() == ']' {
		s.pos++
		return nil
	}
	for i := 0; ; i++ {
		if err := f(i); err != nil {
			return err
		}
		more, err := s.more(']')
		if err != nil || !more {
			return err
		}
	}
}
