package parser

import "strings"

type thinkState int

const (
	thinkLook     thinkState = iota // before any output: is there an opening tag after leading whitespace?
	thinkEatSpace                   // inside <think>, dropping the whitespace that starts it
	thinkIn                         // inside <think>
	thinkAfter                      // after </think>, dropping the whitespace before the content
	thinkDone                       // content only
)

// thinkStage moves <think>…</think> (or the family's own tags) to thinking. Whitespace right inside the tags and right after the closing
// tag is layout, not text, and is dropped; a reply without an opening tag is all content, untouched.
type thinkStage struct {
	open, close string // <think> and </think>, or another family's tags ([THINK] and [/THINK])
	state       thinkState
	buf         string
}

func (t *thinkStage) add(s string, done bool) (thinking, content string) {
	t.buf += s
	var th, co strings.Builder
	for {
		switch t.state {
		case thinkLook:
			trimmed := trimLeftSpace(t.buf)
			switch {
			case strings.HasPrefix(trimmed, t.open):
				t.buf = trimmed[len(t.open):]
				t.state = thinkEatSpace
				continue
			case strings.HasPrefix(t.open, trimmed) && !done:
				return th.String(), co.String() // whitespace or a partial tag: wait
			}
			t.state = thinkDone
			continue
		case thinkEatSpace, thinkAfter:
			t.buf = trimLeftSpace(t.buf)
			if t.buf == "" {
				return th.String(), co.String()
			}
			if t.state == thinkEatSpace {
				t.state = thinkIn
			} else {
				t.state = thinkDone
			}
			continue
		case thinkIn:
			if i := strings.Index(t.buf, t.close); i >= 0 {
				before := t.buf[:i]
				th.WriteString(before[:len(before)-trailingSpace(before)])
				t.buf = t.buf[i+len(t.close):]
				t.state = thinkAfter
				continue
			}
			if done {
				th.WriteString(t.buf[:len(t.buf)-trailingSpace(t.buf)])
				t.buf = ""
				return th.String(), co.String()
			}
			// Hold back what may start the closing tag, and the whitespace before it.
			keep := heldSuffix(t.buf, t.close)
			keep += trailingSpace(t.buf[:len(t.buf)-keep])
			th.WriteString(t.buf[:len(t.buf)-keep])
			t.buf = t.buf[len(t.buf)-keep:]
			return th.String(), co.String()
		default: // thinkDone
			co.WriteString(t.buf)
			t.buf = ""
			return th.String(), co.String()
		}
	}
}
