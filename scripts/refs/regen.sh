#!/usr/bin/env bash
# Regenerates runner/testdata/refs.json, the transformers reference for runner's logits
# tests (see scripts/refs/README.md); with -hybrid, runner/testdata/refs_hybrid.json,
# the reference for the mixture-of-experts and hybrid architectures.
#
#   bash scripts/refs/regen.sh [-hybrid] [WORKDIR]
#
# Step 1 needs Go and ../shared/models/qwen3-tiny; step 2 needs python3 with torch,
# transformers (5.x), safetensors and numpy. Where they live on different machines,
# run step 1, copy WORKDIR (about 55 MB; 19 MB with -hybrid) over, run step 2 there
# and copy the fixture back.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" == "-hybrid" ]]; then
	work="${2:-.refs-hybrid}"
	rm -rf "$work"
	go run ./scripts/refs/gen -hybrid -out "$work"
	PYTHONUNBUFFERED=1 python3 scripts/refs/hybrid.py "$work" runner/testdata/refs_hybrid.json
	exit
fi
work="${1:-.refs-work}"
rm -rf "$work"
go run ./scripts/refs/gen -out "$work" -shared ../shared
PYTHONUNBUFFERED=1 python3 scripts/refs/reference.py "$work" runner/testdata/refs.json
