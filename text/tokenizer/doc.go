// Package tokenizer encodes and decodes text exactly as Hugging Face's
// tokenizers library does for the tokenizer.json of a checkpoint.
//
// Supported (anything else is refused by Load with an error naming the type):
//   - model: BPE, with merges in either serialization, byte_fallback, unk_token
//     and fuse_unk, ignore_merges, continuing_subword_prefix, end_of_word_suffix
//     (dropout is refused: it makes encoding random);
//   - added tokens, matched before the model (leftmost-longest), normalized or
//     not, with single_word, lstrip and rstrip;
//   - normalizers: NFC, NFD, NFKC, NFKD, Prepend, Replace (string pattern), Sequence;
//   - pre-tokenizers: ByteLevel (with or without its regex, add_prefix_space),
//     Metaspace (every prepend_scheme, split or not), Split (string or regex
//     pattern, every behavior, invert), Digits, Punctuation, Sequence;
//   - post-processors: TemplateProcessing (single sequences), ByteLevel, Sequence;
//   - decoders: ByteLevel, ByteFallback, Fuse, Metaspace, Replace (string
//     pattern), Strip, Sequence.
//
// This covers the Qwen2/2.5/3, Llama 3.x, DeepSeek V3 (byte-level BPE),
// Llama 2, Gemma 3 (SentencePiece-style BPE with byte fallback) and
// Mistral-style (Metaspace) tokenizers; the conformance tests check the first
// five against HF's own output. Split regexes run on hand-written scanners for
// the patterns of those families and GPT-2's (checked equal to the regex by a
// differential test and a fuzz target), and on dlclark/regexp2 otherwise.
//
// tokenizer_config.json, when present, supplies BOS and EOS and, for the Llama
// and Gemma tokenizer classes, add_bos_token/add_eos_token, which transformers
// turns into the post-processor; generation_config.json adds its eos_token_id.
//
// Input that is not valid UTF-8 is read with each invalid sequence replaced by
// U+FFFD. Decode joins tokens as HF's decode does, without transformers'
// optional clean_up_tokenization_spaces. The truncation and padding settings
// of tokenizer.json are ignored, as transformers ignores them unless asked.
// The scanners' character classes are HF's regex engine's (Unicode 16: Go's
// Unicode 15 tables plus unicode_tables.go); regexes on regexp2 and the
// normalizers use Go's tables.
//
// Not supported, refused by Load rather than approximated: models other than
// BPE (WordPiece, WordLevel, Unigram), BPE dropout, checkpoints with only
// slow-tokenizer files (no tokenizer.json), Replace with a regex pattern,
// and more than one TemplateProcessing. Not offered at all: pairs of
// sequences (the pair template is not read) and offsets into the input.
// Chat templates are not the tokenizer's: text/template renders them to
// text, which Encode then reads.
package tokenizer
