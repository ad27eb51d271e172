#!/usr/bin/env bash
# Regenerates runner/testdata/refs.json, the transformers reference for runner's logits
# tests (see scripts/refs/README.md).
#
#   bash scripts/refs/regen.sh [WORKDIR]
#
# Step 1 needs Go and ../shared/models/qwen3-tiny; step 2 needs python3 with torch,
# transformers (5.x), safetensors and numpy. Where they live on different machines,
# run step 1, copy WORKDIR (about 55 MB) over, run step 2 there and copy the fixture back.
set -euo pipefail
cd "$(dirname "$0")/../.."
work="${1:-.refs-work}"
rm -rf "$work"
go run ./scripts/refs/gen -out "$work" -shared ../shared
PYTHONUNBUFFERED=1 python3 scripts/refs/reference.py "$work" runner/testdata/refs.json
