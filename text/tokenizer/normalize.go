package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites a piece of text before pre-tokenization. Offsets are not
// tracked: the package produces ids, not alignments.
type normalizer interface {
	normalize(s string) string
}

type unicodeNorm struct{ form norm.Form }

func (n unicodeNorm) normalize(s string) string { return n.form.String(s) }

type replaceNorm struct{ old, new string }

func (r replaceNorm) normalize(s string) string { return strings.ReplaceAll(s, r.old, r.new) }

type prependNorm struct{ prefix string }

func (p prependNorm) normalize(s string) string {
	if s == "" {
		return s
	}
	return p.prefix + s
}

type normSequence []normalizer

func (q normSequence) normalize(s string) string {
	for _, n := range q {
		s = n.normalize(s)
	}
	return s
}

// pattern is the pattern of a Replace normalizer or a Split pre-tokenizer.
type pattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head struct {
		Type        string            `json:"type"`
		Normalizers []json.RawMessage `json:"normalizers"`
		Pattern     pattern           `json:"pattern"`
		Content     string            `json:"content"`
		Prepend     string            `json:"prepend"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("normalizer: %w", err)
	}
	switch head.Type {
	case "NFC":
		return unicodeNorm{norm.NFC}, nil
	case "NFD":
		return unicodeNorm{norm.NFD}, nil
	case "NFKC":
		return unicodeNorm{norm.NFKC}, nil
	case "NFKD":
		return unicodeNorm{norm.NFKD}, nil
	case "Prepend":
		return prependNorm{head.Prepend}, nil
	case "Replace":
		if head.Pattern.String == nil {
			return nil, fmt.Errorf("normalizer Replace: only a String pattern is supported, not %s", raw)
		}
		return replaceNorm{*head.Pattern.String, head.Content}, nil
	case "Sequence":
		var seq normSequence
		for _, r := range head.Normalizers {
			n, err := parseNormalizer(r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				seq = append(seq, n)
			}
		}
		if len(seq) == 0 {
			return nil, nil
		}
		return seq, nil
	}
	return nil, fmt.Errorf("unsupported normalizer type %q (supported: NFC, NFD, NFKC, NFKD, Prepend, Replace, Sequence)", head.Type)
}

func isNull(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s == "" || s == "null"
}
