package quality

import (
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// HeldOutDir is where Debian's sqlite3-doc package puts the SQLite documentation.
const HeldOutDir = "/usr/share/doc/sqlite3"

// HeldOutPages are the pages the held-out text is made of, in order: English prose that the
// trained test model (qwen3-tiny) never saw, about 9,000 of its tokens, public domain. The
// text is read from the installed package, never kept in this repository.
var HeldOutPages = []string{"whentouse.html", "howtocorrupt.html"}

// LoadHeldOut reads the held-out text from the SQLite documentation installed under dir
// (HeldOutDir when empty; `apt-get install sqlite3-doc`), reduced to its prose: one
// paragraph a line, paragraphs separated by a blank line.
func LoadHeldOut(dir string) (string, error) {
	if dir == "" {
		dir = HeldOutDir
	}
	var pages []string
	for _, name := range HeldOutPages {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("the held-out text comes from Debian's sqlite3-doc package (apt-get install sqlite3-doc): %w", err)
		}
		pages = append(pages, htmlProse(string(b)))
	}
	return strings.Join(pages, "\n\n"), nil
}

var (
	invisible  = regexp.MustCompile(`(?is)<(script|style|head)\b.*?</(script|style|head)>`)
	blockBreak = regexp.MustCompile(`(?i)<(/?p|/?h[1-6]|/?li|/?ul|/?ol|/?div|/?table|/?tr|/?pre|/?blockquote|br|hr|/?dd|/?dt)\b[^>]*>`)
	anyTag     = regexp.MustCompile(`(?s)<[^>]*>`)
)

// htmlProse turns a documentation page into its prose: everything from its first heading
// on (the navigation bar comes before it), tags dropped, entities decoded, each block one
// line of single-spaced words.
func htmlProse(page string) string {
	page = invisible.ReplaceAllString(page, "")
	if i := strings.Index(strings.ToLower(page), "<h1"); i >= 0 {
		page = page[i:]
	}
	page = blockBreak.ReplaceAllString(page, "\n\n")
	page = anyTag.ReplaceAllString(page, "")
	var paras []string
	for _, block := range strings.Split(page, "\n\n") {
		words := strings.Fields(html.UnescapeString(block))
		if len(words) > 0 {
			paras = append(paras, strings.Join(words, " "))
		}
	}
	return strings.Join(paras, "\n\n")
}
