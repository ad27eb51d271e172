package tokenizer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"
)

// Tokenizer is safe for concurrent use.
type Tokenizer struct {
	model      *bpe
	added      []addedToken
	addedByID  map[int32]int // index into added
	addedByTok map[string]int
	special    map[string]bool // contents of special added tokens (HF checks by content)
	rawTrie    *trie           // added tokens with normalized=false, matched on raw text
	normTrie   *trie           // normalized=true ones, matched on normalized text
	norm       normalizer
	pre        preTokenizer
	lazyBytes  bool // the pre-tokenizer ends in ByteLevel: words are raw bytes
	post       *template
	dec        decoder
	decBytes   byteSource // where the decoder takes raw bytes from, for streaming
	vocabSize  int

	bos    int32
	hasBOS bool
	eos    []int32
}

// bpeJSON holds the BPE model's options; vocab and merges are read by
// readModel with the jsonScanner.
type bpeJSON struct {
	Type                    string   `json:"type"`
	UnkToken                *string  `json:"unk_token"`
	FuseUnk                 bool     `json:"fuse_unk"`
	ByteFallback            bool     `json:"byte_fallback"`
	IgnoreMerges            bool     `json:"ignore_merges"`
	Dropout                 *float64 `json:"dropout"`
	ContinuingSubwordPrefix *string  `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string  `json:"end_of_word_suffix"`
}

// Load reads dir/tokenizer.json, and dir/tokenizer_config.json and
// dir/generation_config.json when present.
func Load(dir string) (*Tokenizer, error) {
	path := filepath.Join(dir, "tokenizer.json")
	data, err := os.ReadFile(path)
	if err != nil {
		if err := TekkenOnly(dir); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("tokenizer: %w (a checkpoint needs a tokenizer.json; slow-tokenizer files alone are not supported)", err)
	}
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer %s: %w", path, err)
	}
	if err := t.readConfigs(dir); err != nil {
		return nil, err
	}
	return t, nil
}

// TekkenOnly reports an error when dir holds Mistral's own tokenizer file (tekken.json, read by
// mistral-common) but no tokenizer.json: mlxg reads Hugging Face's format only. Mistral's repos that
// transformers loads ship both; a repo with tekken.json alone needs a tokenizer.json converted from it
// (transformers' convert_tekken_tokenizer, or a repo that has one, as mlx-community's conversions do).
func TekkenOnly(dir string) error {
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); err == nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "tekken.json")); err != nil {
		return nil
	}
	return fmt.Errorf("tokenizer: %s has Mistral's tekken.json but no tokenizer.json; mlxg reads Hugging Face's tokenizer.json only: use a repo that ships one (Mistral's transformers-format repos and mlx-community's conversions do), or write it from tekken.json with transformers' convert_tekken_tokenizer", dir)
}

func parse(data []byte) (*Tokenizer, error) {
	var raw struct{ added, normalizer, pre, post, decoder, model []byte }
	sc := &jsonScanner{data: data}
	err := sc.object(func(key []byte) error {
		v, err := sc.skip()
		switch string(key) {
		case "added_tokens":
			raw.added = v
		case "normalizer":
			raw.normalizer = v
		case "pre_tokenizer":
			raw.pre = v
		case "post_processor":
			raw.post = v
		case "decoder":
			raw.decoder = v
		case "model":
			raw.model = v
		}
		return err
	})
	if err == nil && sc.peek() != 0 {
		err = sc.errorf("data after the top-level object")
	}
	if err != nil {
		return nil, fmt.Errorf("not valid tokenizer JSON: %w", err)
	}
	if raw.model == nil {
		return nil, fmt.Errorf("no model")
	}
	model, err := readModel(raw.model)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{model: model}
	if t.norm, err = parseNormalizer(raw.normalizer); err != nil {
		return nil, err
	}
	if t.pre, err = parsePreTokenizer(raw.pre, true, &t.lazyBytes); err != nil {
		return nil, err
	}
	if t.post, err = parsePostProcessor(raw.post); err != nil {
		return nil, err
	}
	if t.dec, err = parseDecoder(raw.decoder); err != nil {
		return nil, err
	}
	t.decBytes = bytesOf(t.dec)
	var added []addedToken
	if !isNull(raw.added) {
		if err := json.Unmarshal(raw.added, &added); err != nil {
			return nil, fmt.Errorf("added_tokens: %w", err)
		}
	}
	t.setAdded(added)
	return t, nil
}

// readModel reads the "model" object: its options with encoding/json, its
// vocab and merges with the jsonScanner.
func readModel(data []byte) (*bpe, error) {
	var vocabRaw, mergesRaw []byte
	options := []byte{'{'}
	sc := &jsonScanner{data: data}
	err := sc.object(func(key []byte) error {
		v, err := sc.skip()
		switch string(key) {
		case "vocab":
			vocabRaw = v
		case "merges":
			mergesRaw = v
		default:
			if len(options) > 1 {
				options = append(options, ',')
			}
			options = strconv.AppendQuote(options, string(key))
			options = append(append(options, ':'), v...)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	var o bpeJSON
	if err := json.Unmarshal(append(options, '}'), &o); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if o.Type != "BPE" {
		return nil, fmt.Errorf("unsupported model type %q (supported: BPE)", o.Type)
	}
	if o.Dropout != nil && *o.Dropout > 0 {
		return nil, fmt.Errorf("BPE dropout %v is not supported (it makes encoding random)", *o.Dropout)
	}
	if vocabRaw == nil {
		return nil, fmt.Errorf("model: no vocab")
	}
	vocab := make(map[string]int32, bytes.Count(vocabRaw, []byte(`":`)))
	sc = &jsonScanner{data: vocabRaw}
	err = sc.object(func(key []byte) error {
		k := string(key)
		id, err := sc.integer()
		if err != nil {
			return err
		}
		if id < 0 || id > math.MaxInt32 {
			return fmt.Errorf("token %q has id %d", k, id)
		}
		vocab[k] = int32(id)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("model.vocab: %w", err)
	}
	deref := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	m, err := newBPE(vocab, nil, o.UnkToken, o.FuseUnk, o.ByteFallback, o.IgnoreMerges,
		deref(o.ContinuingSubwordPrefix), deref(o.EndOfWordSuffix))
	if err != nil {
		return nil, err
	}
	if err := readMerges(m, mergesRaw); err != nil {
		return nil, err
	}
	return m, nil
}

// readMerges adds the merges in either serialization: ["a b", ...] or
// [["a", "b"], ...]. It scans them, looks their ids up on all cores (up to
// three vocab lookups each, half a million merges for Gemma 3), then fills
// the map in rank order.
func readMerges(m *bpe, data []byte) error {
	if isNull(data) {
		return nil
	}
	var pairs [][2][]byte
	sc := &jsonScanner{data: data}
	// str's result aliases data unless the string had escapes.
	own := func(b []byte) []byte {
		if len(b) > 0 && len(sc.buf) > 0 && &b[0] == &sc.buf[0] {
			return bytes.Clone(b)
		}
		return b
	}
	err := sc.array(func(rank int) error {
		if sc.peek() == '[' {
			sc.pos++
			a, err := sc.str()
			if err != nil {
				return err
			}
			a = own(a)
			if err := sc.expect(','); err != nil {
				return err
			}
			b, err := sc.str()
			if err != nil {
				return err
			}
			pairs = append(pairs, [2][]byte{a, own(b)})
			return sc.expect(']')
		}
		line, err := sc.str()
		if err != nil {
			return err
		}
		line = own(line)
		i := bytes.IndexByte(line, ' ')
		if i < 0 || bytes.IndexByte(line[i+1:], ' ') >= 0 {
			return fmt.Errorf("model.merges[%d] %q: want two tokens separated by one space", rank, line)
		}
		pairs = append(pairs, [2][]byte{line[:i], line[i+1:]})
		return nil
	})
	if err != nil {
		return fmt.Errorf("model.merges: %w", err)
	}
	keys := make([]uint64, len(pairs))
	vals := make([]merge, len(pairs))
	workers := min(runtime.GOMAXPROCS(0), len(pairs)/4096+1)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			var scratch []byte
			for i := w * len(pairs) / workers; i < (w+1)*len(pairs)/workers; i++ {
				var err error
				if keys[i], vals[i], err = m.resolveMerge(i, pairs[i][0], pairs[i][1], &scratch); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("model.merges: %w", err)
	}
	m.merges = make(map[uint64]merge, len(pairs))
	for i, k := range keys {
		m.merges[k] = vals[i] // in rank order: a repeated pair keeps its last rank
	}
	return nil
}

// setAdded installs the added tokens. Like HF, it ignores the ids written in
// the file: a token whose content is in the vocab takes that id, any other the
// next id after the model vocab (the two agree in well-formed files).
func (t *Tokenizer) setAdded(tokens []addedToken) {
	t.added = t.added[:0]
	t.addedByID = make(map[int32]int, len(tokens))
	t.addedByTok = make(map[string]int, len(tokens))
	t.special = make(map[string]bool)
	t.rawTrie, t.normTrie = newTrie(), newTrie()
	t.vocabSize = len(t.model.tokens)
	next := int32(len(t.model.vocab))
	for _, a := range tokens {
		if a.Content == "" {
			continue
		}
		if i, ok := t.addedByTok[a.Content]; ok {
			a.ID = t.added[i].ID
			t.added[i] = a // a repeated token takes the later flags
			continue
		}
		if id, ok := t.model.vocab[a.Content]; ok {
			a.ID = id
		} else {
			a.ID = next
			next++
		}
		t.addedByID[a.ID] = len(t.added)
		t.addedByTok[a.Content] = len(t.added)
		t.added = append(t.added, a)
	}
	for i, a := range t.added {
		if a.Special {
			t.special[a.Content] = true
		}
		if a.Normalized {
			content := a.Content
			if t.norm != nil {
				content = t.norm.normalize(content)
			}
			t.normTrie.insert(content, int32(i))
		} else {
			t.rawTrie.insert(a.Content, int32(i))
		}
		t.vocabSize = max(t.vocabSize, int(a.ID)+1)
	}
}

// configJSON is what Load reads from tokenizer_config.json.
type configJSON struct {
	TokenizerClass     string                `json:"tokenizer_class"`
	AddBOS             *bool                 `json:"add_bos_token"`
	AddEOS             *bool                 `json:"add_eos_token"`
	BOS                tokenRef              `json:"bos_token"`
	EOS                tokenRef              `json:"eos_token"`
	AddedTokensDecoder map[string]addedToken `json:"added_tokens_decoder"`
}

// tokenRef is a special token in tokenizer_config.json: a string, or an
// AddedToken object with "content", or null.
type tokenRef struct{ content string }

func (r *tokenRef) UnmarshalJSON(b []byte) error {
	if isNull(b) {
		return nil
	}
	if b[0] == '"' {
		return json.Unmarshal(b, &r.content)
	}
	var obj struct {
		Content string `json:"content"`
	}
	if err := json.Unmarshal(b, &obj); err != nil {
		return err
	}
	r.content = obj.Content
	return nil
}

// classesWithBOSFlags are the tokenizer classes whose transformers
// implementation rebuilds the post-processor from add_bos_token/add_eos_token.
var classesWithBOSFlags = map[string]bool{
	"LlamaTokenizer": true, "LlamaTokenizerFast": true,
	"GemmaTokenizer": true, "GemmaTokenizerFast": true,
	"CodeLlamaTokenizer": true, "CodeLlamaTokenizerFast": true,
}

func (t *Tokenizer) readConfigs(dir string) error {
	path := filepath.Join(dir, "tokenizer_config.json")
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("tokenizer config: %w", err)
	}
	if err == nil {
		var c configJSON
		if err := json.Unmarshal(data, &c); err != nil {
			return fmt.Errorf("tokenizer config %s: not valid JSON: %w", path, err)
		}
		if err := t.applyConfig(&c, path); err != nil {
			return err
		}
	}
	path = filepath.Join(dir, "generation_config.json")
	data, err = os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("generation config: %w", err)
	}
	var g struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &g); err != nil {
		return fmt.Errorf("generation config %s: not valid JSON: %w", path, err)
	}
	var ids []int32
	var one int32
	switch {
	case isNull(g.EOS):
	case json.Unmarshal(g.EOS, &one) == nil:
		ids = []int32{one}
	case json.Unmarshal(g.EOS, &ids) == nil:
	default:
		return fmt.Errorf("generation config %s: eos_token_id %s is neither an id nor a list of ids", path, g.EOS)
	}
	for _, id := range ids {
		t.addEOS(id)
	}
	return nil
}

func (t *Tokenizer) addEOS(id int32) {
	for _, e := range t.eos {
		if e == id {
			return
		}
	}
	t.eos = append(t.eos, id)
}

func (t *Tokenizer) applyConfig(c *configJSON, path string) error {
	// Tokens of added_tokens_decoder that tokenizer.json lacks: transformers adds them.
	var extra []addedToken
	for key, a := range c.AddedTokensDecoder {
		var id int32
		if _, err := fmt.Sscan(key, &id); err != nil {
			return fmt.Errorf("tokenizer config %s: added_tokens_decoder key %q is not an id", path, key)
		}
		if _, ok := t.addedByTok[a.Content]; ok || a.Content == "" {
			continue
		}
		a.ID = id
		extra = append(extra, a)
	}
	if len(extra) > 0 {
		slices.SortFunc(extra, func(a, b addedToken) int { return cmp.Compare(a.ID, b.ID) })
		t.setAdded(append(slices.Clone(t.added), extra...))
	}
	if c.BOS.content != "" {
		id, ok := t.TokenID(c.BOS.content)
		if !ok {
			return fmt.Errorf("tokenizer config %s: bos_token %q is not a token", path, c.BOS.content)
		}
		t.bos, t.hasBOS = id, true
	}
	if c.EOS.content != "" {
		id, ok := t.TokenID(c.EOS.content)
		if !ok {
			return fmt.Errorf("tokenizer config %s: eos_token %q is not a token", path, c.EOS.content)
		}
		t.addEOS(id)
	}
	if classesWithBOSFlags[c.TokenizerClass] && (c.AddBOS != nil || c.AddEOS != nil) {
		addBOS := c.AddBOS == nil || *c.AddBOS // transformers' defaults for these classes
		addEOS := c.AddEOS != nil && *c.AddEOS
		post := &template{}
		if addBOS {
			if !t.hasBOS {
				return fmt.Errorf("tokenizer config %s: add_bos_token is set but bos_token is not", path)
			}
			post.before = []int32{t.bos}
		}
		if addEOS {
			if len(t.eos) == 0 {
				return fmt.Errorf("tokenizer config %s: add_eos_token is set but eos_token is not", path)
			}
			post.after = []int32{t.eos[0]}
		}
		t.post = post
	}
	return nil
}

// Encode returns the ids of text. addSpecial applies the post-processor (the
// BOS/EOS template); chat templates write their special tokens themselves and
// are encoded with addSpecial false. Special tokens written in text are
// recognised as tokens.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	if !utf8.ValidString(text) {
		text = lossy([]byte(text))
	}
	ids := make([]int32, 0, len(text)/3+4)
	var words []piece
	for _, seg := range splitAdded(nil, text, t.rawTrie, t.added) {
		if seg.token >= 0 {
			ids = append(ids, seg.token)
			continue
		}
		s := seg.text
		if t.norm != nil {
			s = t.norm.normalize(s)
		}
		for _, sub := range splitAdded(nil, s, t.normTrie, t.added) {
			if sub.token >= 0 {
				ids = append(ids, sub.token)
				continue
			}
			words = words[:0]
			p := piece{text: sub.text, first: seg.first && sub.first}
			if t.pre != nil {
				words = t.pre.split(words, p)
			} else {
				words = append(words, p)
			}
			for _, w := range words {
				ids = t.model.encode(ids, w.text, t.lazyBytes)
			}
		}
	}
	if addSpecial && t.post != nil {
		ids = t.post.apply(ids)
	}
	return ids
}

// Decode returns the text of ids; skipSpecial leaves out special tokens. Ids
// outside the vocabulary are skipped.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	toks := make([]string, 0, len(ids))
	for _, id := range ids {
		tok, ok := t.token(id)
		if !ok || skipSpecial && t.special[tok] {
			continue
		}
		toks = append(toks, tok)
	}
	if t.dec == nil {
		return joinSpace(toks)
	}
	return joinEmpty(t.dec.decodeChain(toks))
}

func joinSpace(t []string) string {
	var b bytes.Buffer
	for i, s := range t {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(s)
	}
	return b.String()
}

func joinEmpty(t []string) string {
	if len(t) == 1 {
		return t[0]
	}
	var b bytes.Buffer
	for _, s := range t {
		b.WriteString(s)
	}
	return b.String()
}

func (t *Tokenizer) token(id int32) (string, bool) {
	if i, ok := t.addedByID[id]; ok {
		return t.added[i].Content, true
	}
	if id >= 0 && int(id) < len(t.model.tokens) {
		tok := t.model.tokens[id]
		if got, ok := t.model.vocab[tok]; ok && got == id {
			return tok, true
		}
	}
	return "", false
}

// TokenID returns the id of a token string (an added token or a vocab entry,
// in the model's own spelling, e.g. "Ġthe" or "▁the").
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	if i, ok := t.addedByTok[token]; ok {
		return t.added[i].ID, true
	}
	id, ok := t.model.vocab[token]
	return id, ok
}

// Token returns the token string of id, "" when id is unknown.
func (t *Tokenizer) Token(id int32) string {
	tok, _ := t.token(id)
	return tok
}

// IsSpecial says whether id is a special added token (skipped by Decode
// with skipSpecial).
func (t *Tokenizer) IsSpecial(id int32) bool {
	i, ok := t.addedByID[id]
	return ok && t.added[i].Special
}

// VocabSize is one more than the largest id of the vocab and added tokens.
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// BOS returns the beginning-of-sequence token of tokenizer_config.json.
func (t *Tokenizer) BOS() (int32, bool) { return t.bos, t.hasBOS }

// EOS returns the end-of-sequence ids: tokenizer_config.json's eos_token,
// then generation_config.json's eos_token_id entries, without repeats.
func (t *Tokenizer) EOS() []int32 { return append([]int32(nil), t.eos...) }
