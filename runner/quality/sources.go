package quality

import (
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

// A Source is a text qwen3-tiny was trained on (its README lists them), read from the
// Debian package that installs it, never kept in this repository. The model predicts
// such text well (perplexity in the tens, against hundreds on the SQLite pages), so a KV
// layout's error shows where the answers are clear rather than near-ties. The training
// held out 1% of each source's documents at random and did not record which, so the
// passages measured may have been trained on; the model's 4.7 M layer weights cannot
// hold its 5.8 M training tokens, so what it predicts well there is the kind of text,
// not memorized positions (see Perplexity in the bench's table).
type Source struct {
	Name, Package, Path string
	// Verses, when set, are the King James Bible's verses read with the bible-kjv
	// package's program (its text package holds them compressed in its own format).
	Verses string
	// From is where the passage starts: the text after the From-th occurrence of
	// Start (skipping a table of contents or licence), 1 for the first.
	Start string
	From  int
}

// Sources are the own-source passages, by name; the first is the bench's default.
var Sources = []Source{
	{Name: "bible", Package: "bible-kjv", Path: "/usr/bin/bible", Verses: "John1:1-21:25"},
	{Name: "gnu-standards", Package: "gnu-standards", Path: "/usr/share/doc/gnu-standards/standards.text.gz", Start: "1 About the GNU Coding Standards", From: 2},
	{Name: "gnu-maintain", Package: "gnu-standards", Path: "/usr/share/doc/gnu-standards/maintain.text.gz", Start: "1 About This Document", From: 2},
	{Name: "jargon", Package: "jargon-text", Path: "/usr/share/doc/jargon-text/jargon.txt.gz", Start: "The Jargon Lexicon", From: 2},
	{Name: "devil", Package: "dict-devil", Path: "/usr/share/dictd/devil.dict.dz", Start: "ABASEMENT", From: 1},
}

// SourceNames lists the names LoadSource takes: the Sources and "sqlite" (LoadHeldOut).
func SourceNames() []string {
	var n []string
	for _, s := range Sources {
		n = append(n, s.Name)
	}
	return append(n, "sqlite")
}

// LoadSource reads the text named name (SourceNames).
func LoadSource(name string) (string, error) {
	if name == "sqlite" {
		return LoadHeldOut("")
	}
	i := slices.IndexFunc(Sources, func(s Source) bool { return s.Name == name })
	if i < 0 {
		return "", fmt.Errorf("no text %q (texts: %s)", name, strings.Join(SourceNames(), ", "))
	}
	s := Sources[i]
	if s.Verses != "" {
		// One verse a line, as many columns as it takes.
		out, err := exec.Command(s.Path, "-l100000", s.Verses).Output()
		if err != nil {
			return "", fmt.Errorf("the text %q comes from Debian's %s package (apt-get install %s): %w", name, s.Package, s.Package, err)
		}
		return strings.TrimSpace(string(out)), nil
	}
	text, err := readGzip(s.Path)
	if err != nil {
		return "", fmt.Errorf("the text %q comes from Debian's %s package (apt-get install %s): %w", name, s.Package, s.Package, err)
	}
	return passage(text, s.Start, s.From)
}

// passage is text after the from-th occurrence of start, start included, with
// carriage returns dropped.
func passage(text, start string, from int) (string, error) {
	at := -1
	for range from {
		i := strings.Index(text[at+1:], start)
		if i < 0 {
			return "", fmt.Errorf("%q occurs fewer than %d times", start, from)
		}
		at += 1 + i
	}
	return strings.ReplaceAll(text[at:], "\r", ""), nil
}

// readGzip reads a gzip (or dictzip, which is gzip) file.
func readGzip(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	b, err := io.ReadAll(z)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return string(b), nil
}
