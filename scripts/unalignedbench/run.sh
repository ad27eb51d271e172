#!/usr/bin/env bash
# Times runner/cpu's BenchmarkMisaligned on this checkout and on a base revision (default main), the two test
# binaries run in turn ROUNDS times (default 5) so that both see the same machine, and prints each case's median
# over the rounds: the aligned product before and after (after/before), and the misaligned one after against the
# aligned one (offN/aligned: offsets 1 and 2 misaligned; 4 and 64 aligned controls, see BenchmarkMisaligned). A
# base that copies misaligned weights times its copy there.
# Usage: bash scripts/unalignedbench/run.sh [base-rev] [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
base="${1:-main}" rounds="${2:-5}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
git archive "$base" | tar -x -C "$tmp"
mkdir -p "$tmp/bin"
cp runner/cpu/unaligned_test.go "$tmp/runner/cpu/unaligned_test.go"
(cd "$tmp" && go test -c -o "$tmp/bin/before.test" ./runner/cpu)
go test -c -o "$tmp/bin/after.test" ./runner/cpu
for i in $(seq "$rounds"); do
  for v in before after; do
    "$tmp/bin/$v.test" -test.run '^$' -test.bench BenchmarkMisaligned -test.benchtime 1x | grep '^Benchmark' | sed "s/^/$v /" >>"$tmp/out"
  done
done
python3 - "$tmp/out" <<'PY'
import re, statistics, sys
m = {}
for line in open(sys.argv[1]):
    v, name, *rest = line.split()
    f = rest[3:]  # after the iteration count and ns/op
    for val, unit in zip(f[0::2], f[1::2]):
        m.setdefault((name, v, unit), []).append(float(val))
med = lambda k: statistics.median(m[k])
names = list(dict.fromkeys(k[0] for k in m))
offs = sorted({k[2] for k in m if k[1] == "after" and k[2].endswith("/aligned")}, key=lambda u: int(u[3:].split("/")[0]))
print(f"{'case':36} {'aligned µs before':>18} {'after':>10} {'after/before':>13}" + "".join(f" {u:>13}" for u in offs))
for n in names:
    b, a = med((n, "before", "aligned-µs")), med((n, "after", "aligned-µs"))
    print(f"{n:36} {b:18.1f} {a:10.1f} {a/b:13.3f}" + "".join(f" {med((n, 'after', u)):13.3f}" for u in offs))
PY
