package tokenizer

import (
	"encoding/json"
	"fmt"
)

// template is a TemplateProcessing "single" template: the ids to put before
// and after the sequence when special tokens are added.
type template struct {
	before, after []int32
}

func (t *template) apply(ids []int32) []int32 {
	out := make([]int32, 0, len(t.before)+len(ids)+len(t.after))
	out = append(out, t.before...)
	out = append(out, ids...)
	return append(out, t.after...)
}

// parsePostProcessor reads the post_processor. Only TemplateProcessing
// changes ids; ByteLevel only adjusts offsets, which this package does not track.
func parsePostProcessor(raw json.RawMessage) (*template, error) {
	if isNull(raw) {
		return nil, nil
	}
	var head struct {
		Type       string            `json:"type"`
		Processors []json.RawMessage `json:"processors"`
		Single     []struct {
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
			Sequence *struct {
				ID string `json:"id"`
			} `json:"Sequence"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []int32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("post_processor: %w", err)
	}
	switch head.Type {
	case "ByteLevel":
		return nil, nil
	case "Sequence":
		var out *template
		for _, r := range head.Processors {
			t, err := parsePostProcessor(r)
			if err != nil {
				return nil, err
			}
			if t != nil {
				if out != nil {
					return nil, fmt.Errorf("post_processor Sequence: more than one TemplateProcessing is not supported")
				}
				out = t
			}
		}
		return out, nil
	case "TemplateProcessing":
		t := &template{}
		seen := false
		for _, piece := range head.Single {
			switch {
			case piece.Sequence != nil:
				if piece.Sequence.ID != "A" || seen {
					return nil, fmt.Errorf("post_processor TemplateProcessing: single template must hold sequence A once, got %q", piece.Sequence.ID)
				}
				seen = true
			case piece.SpecialToken != nil:
				st, ok := head.SpecialTokens[piece.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("post_processor TemplateProcessing: special token %q is not in special_tokens", piece.SpecialToken.ID)
				}
				if seen {
					t.after = append(t.after, st.IDs...)
				} else {
					t.before = append(t.before, st.IDs...)
				}
			default:
				return nil, fmt.Errorf("post_processor TemplateProcessing: unknown piece in single template")
			}
		}
		if !seen {
			return nil, fmt.Errorf("post_processor TemplateProcessing: single template lacks sequence A")
		}
		return t, nil
	}
	return nil, fmt.Errorf("unsupported post_processor type %q (supported: TemplateProcessing, ByteLevel, Sequence)", head.Type)
}
