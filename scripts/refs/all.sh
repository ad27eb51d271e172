#!/usr/bin/env bash
# Regenerates every transformers fixture that a machine with torch, transformers 5.x, Pillow,
# safetensors and numpy can make, all generators at once (each on two threads), and says which
# failed. Run from anywhere; the fixtures land where their tests read them:
#
#   bash scripts/refs/all.sh [SECONDS]     # SECONDS: each generator's time limit (default 600)
#
# Step 1 (Go: the hybrid checkpoints and the vision reference images) runs here first; where Go
# and torch live on different machines, run `bash scripts/refs/all.sh -prepare` on the Go machine,
# copy the tree over, run `bash scripts/refs/all.sh -python` there, and copy the tree back.
set -uo pipefail
cd "$(dirname "$0")/../.."
mode=all
case "${1:-}" in -prepare | -python) mode=${1#-}; shift ;; esac
limit="${1:-600}"
if [[ $mode != python ]]; then
	rm -rf .refs-hybrid .refs-images && mkdir .refs-images
	go run ./scripts/refs/gen -hybrid -out .refs-hybrid >/dev/null || exit 1
	go test ./vision -run TestWriteReferenceImages -count=1 -args -write-reference-images "$PWD/.refs-images" >/dev/null || exit 1
	[[ $mode == prepare ]] && exit 0
fi
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2 MKL_NUM_THREADS=2
logs=$(mktemp -d)
run() { # run NAME COMMAND...: one generator, its output in $logs/NAME
	(timeout "$limit" "${@:2}" >"$logs/$1" 2>&1; echo "exit $?" >>"$logs/$1") &
}
for f in gemma4 glm4moe gptoss mistral phi3; do
	run "$f" bash -c "cd runner/$f/testdata && python3 ref.py --out ."
done
for f in qwen3next gemma3 gemma4 qwen25vl; do
	run "$f-vision" python3 "runner/$f/testdata/vision_ref.py"
done
run hybrid python3 scripts/refs/hybrid.py .refs-hybrid runner/testdata/refs_hybrid.json
run pillow bash -c 'o=$(mktemp -d) && python3 scripts/visionref/reference.py .refs-images "$o" && cp "$o"/reference.json "$o"/*.webp "$o"/*.gif vision/testdata/'
wait
failed=0
for l in "$logs"/*; do
	if [[ $(tail -1 "$l") != "exit 0" ]]; then
		failed=1
		echo "== $(basename "$l") failed:"
		tail -20 "$l"
	else
		echo "== $(basename "$l"): ok"
	fi
done
exit $failed
