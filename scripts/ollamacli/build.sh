#!/usr/bin/env bash
# Builds the real ollama CLI, github.com/ollama/ollama at the release pinned below, from the Go module
# proxy, into $MLXG_TESTDATA/ollama-cli/v<version>/ollama (reused when there), and prints its path on the
# last line. e2e/'s TestOllamaCLI drives it against `mlxg serve`.
#
# The binary is Ollama's whole program: its server side links llama.cpp through cgo, so the build needs a C++
# compiler and the recipe of scripts/bench's peer build (../shared/peer/README.md): the module zip lacks
# llama.cpp's miniaudio, which ../shared/peer/stubinc stands in for, and the nlohmann-json and stb headers
# come from Debian (installed here with apt-get when missing and run as root). Only the CLI's client
# commands ever run, so llama.cpp is compiled without optimisation, the quickest build.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=0.17.4
testdata="${MLXG_TESTDATA:-$PWD/.testdata}"
dir="$testdata/ollama-cli/v$version"
bin="$dir/ollama"
if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
stubinc="${MLXG_SHARED:-$PWD/../shared}/peer/stubinc"
if [ ! -f "$stubinc/miniaudio/miniaudio.h" ]; then
  echo "scripts/ollamacli: $stubinc/miniaudio/miniaudio.h is missing (set MLXG_SHARED to the shared folder)" >&2
  exit 1
fi
if [ ! -f /usr/include/nlohmann/json.hpp ] || [ ! -f /usr/include/stb/stb_image.h ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "scripts/ollamacli: installing nlohmann-json3-dev and libstb-dev" >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nlohmann-json3-dev libstb-dev >/dev/null
  else
    echo "scripts/ollamacli: building Ollama needs nlohmann-json and stb headers (Debian: apt-get install nlohmann-json3-dev libstb-dev)" >&2
    exit 1
  fi
fi
echo "scripts/ollamacli: building the ollama CLI v$version into $dir (minutes; cached afterwards)" >&2
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# Into a temporary GOBIN, then moved: an interrupted build leaves no binary to be taken for a whole one.
(cd "$tmp" && CGO_ENABLED=1 CGO_CPPFLAGS="-I$stubinc" CGO_CFLAGS="-O0 -g0" CGO_CXXFLAGS="-O0 -g0" GOBIN="$tmp/bin" GOFLAGS=-mod=mod \
  go install -ldflags "-s -w -X github.com/ollama/ollama/version.Version=$version" "github.com/ollama/ollama@v$version") >&2
mv "$tmp/bin/ollama" "$bin"
echo "$bin"
