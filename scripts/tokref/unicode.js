// Prints, as JSON, the code point ranges that HF's tokenizers' regex engine (Oniguruma, through the
// node addon) puts in each character class the tokenizer scanners use. unitables/ turns the
// differences from Go's own Unicode tables into text/tokenizer/unicode_tables.go.
"use strict";
const { Tokenizer } = require("@anush008/tokenizers");

const classes = { L: "\\p{L}", N: "\\p{N}", P: "\\p{P}", S: "\\p{S}", M: "\\p{M}", Space: "\\s" };

// Every code point but the surrogates, in order.
const points = [];
for (let c = 0; c <= 0x10ffff; c++) if (c < 0xd800 || c > 0xdfff) points.push(c);
const text = points.map((c) => String.fromCodePoint(c)).join("");

const out = {};
for (const [name, re] of Object.entries(classes)) {
  const tok = Tokenizer.fromString(JSON.stringify({
    version: "1.0", added_tokens: [], normalizer: null, post_processor: null, decoder: null,
    pre_tokenizer: { type: "Split", pattern: { Regex: re }, behavior: "Removed", invert: false },
    model: { type: "BPE", vocab: { a: 0 }, merges: [] },
  }));
  // What Removed leaves are the runs outside the class, with code point offsets.
  const inClass = new Uint8Array(points.length).fill(1);
  for (const [, [start, end]] of tok.getPreTokenizer().preTokenizeString(text)) inClass.fill(0, start, end);
  const ranges = [];
  for (let i = 0; i < points.length; i++) {
    if (!inClass[i]) continue;
    const c = points[i];
    const last = ranges[ranges.length - 1];
    if (last && last[1] === c - 1) last[1] = c;
    else ranges.push([c, c]);
  }
  out[name] = ranges;
}
process.stdout.write(JSON.stringify(out) + "\n");
