package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

type variant struct {
	Name  string                     `json:"name"`
	Base  string                     `json:"base"`
	Patch map[string]json.RawMessage `json:"patch"`
	Added []map[string]any           `json:"added"`
	Cases []struct {
		Text        string  `json:"text"`
		IDs         []int32 `json:"ids"`
		Decoded     string  `json:"decoded"`
		DecodedSkip string  `json:"decoded_skip"`
	} `json:"cases"`
}

// patchedTokenizer builds a variant's tokenizer.json the way scripts/tokref/gen.js does.
func patchedTokenizer(t *testing.T, v *variant, dir string) *Tokenizer {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer.json"))
	if err != nil {
		t.Fatal(err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		t.Fatal(err)
	}
	for k, raw := range v.Patch {
		top[k] = raw
	}
	if len(v.Added) > 0 {
		var added []map[string]any
		if err := json.Unmarshal(top["added_tokens"], &added); err != nil {
			t.Fatal(err)
		}
		next := len(family(t, v.Base).model.vocab) + len(added)
		for _, a := range v.Added {
			a["id"] = next
			next++
			added = append(added, a)
		}
		if top["added_tokens"], err = json.Marshal(added); err != nil {
			t.Fatal(err)
		}
	}
	// Assembled by hand: json.Marshal would re-validate the 10 MB model.
	var buf bytes.Buffer
	buf.WriteByte('{')
	for k, raw := range top {
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		fmt.Fprintf(&buf, "%q:", k)
		if raw == nil {
			raw = json.RawMessage("null")
		}
		buf.Write(raw)
	}
	buf.WriteByte('}')
	data = buf.Bytes()
	tok, err := parse(data)
	if err != nil {
		t.Fatalf("variant %s: %v", v.Name, err)
	}
	return tok
}

// TestVariants covers components and options the five families do not use
// (GPT-2's ByteLevel regex, every Split behavior and invert, regexes on
// regexp2, NFKC/NFD, lstrip/rstrip/single_word/normalized added tokens),
// against HF's output for the same patched tokenizer.json.
func TestVariants(t *testing.T) {
	var variants []variant
	readJSON(t, "ref_variants.json", &variants)
	for i := range variants {
		v := &variants[i]
		t.Run(v.Name, func(t *testing.T) {
			family(t, v.Base) // skips when the asset is missing
			tok := patchedTokenizer(t, v, testdataDir(t, v.Base))
			for _, c := range v.Cases {
				if got := tok.Encode(c.Text, false); !slices.Equal(got, c.IDs) {
					t.Errorf("Encode(%q)\n got %v\nwant %v", c.Text, got, c.IDs)
				}
				if got := tok.Decode(c.IDs, false); got != c.Decoded {
					t.Errorf("Decode(%v) = %q, want %q", c.IDs, got, c.Decoded)
				}
				if got := tok.Decode(c.IDs, true); got != c.DecodedSkip {
					t.Errorf("Decode(%v, skipSpecial) = %q, want %q", c.IDs, got, c.DecodedSkip)
				}
			}
		})
	}
}
