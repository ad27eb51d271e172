#!/usr/bin/env bash
# Builds MLX (libmlx) and mlx-c (libmlxc) as CPU-only shared libraries, for the MLX backend on Linux
# (MLXG_BACKEND=mlx) and for the tests that run it against real MLX. Idempotent: the result goes into a
# cache directory named after the versions and the sources' hashes, and a finished build is reused.
#
# Sources, first found wins:
#   MLXG_MLX_SRC_DIR   a directory holding the tarballs below (default: ../shared/mlx-src beside the repo)
#   git clone          of the pinned commits, for machines with internet and no tarballs
# Output: MLXG_MLX_CACHE (default ~/.cache/mlxg), in mlx-0.31.2-<hash>/{lib,include}.
# The last line printed is the directory holding libmlxc.so (scripts and CI read it).
#
# Debian packages it needs (installed with apt-get when missing and we are root):
#   cmake ninja-build g++ libblas-dev liblapack-dev liblapacke-dev, and libopenblas0-pthread: MLX's CPU backend
#   runs float32 matmuls through BLAS, and Debian's reference BLAS made the MLX tests three times slower than
#   OpenBLAS, which Debian's alternatives put behind the same libblas.so.3 (no rebuild needed to switch).
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
src_dir="${MLXG_MLX_SRC_DIR:-$here/../shared/mlx-src}"
cache="${MLXG_MLX_CACHE:-$HOME/.cache/mlxg}"

mlx_version=0.31.2
mlx_commit=68cf2fddd8de5edd8ab3d926391772b2e2cedad8
mlxc_commit=fba4470b89073180056c9ea46c443051375f7399
json_commit=9cca280a4d0ccf0c08f47a99aa71d1b0e52f8d03
fmt_commit=407c905e45ad75fc29bf0f9bb7c5c2fd3475976f
tarballs=(mlx-0.31.2.tar.xz mlx-c-fba4470.tar.xz json-3.11.3.tar.xz fmt-12.1.0.tar.xz)

log() { echo "scripts/mlx/build.sh: $*" >&2; }

# What the build depends on: the pinned commits and the CMake flags. The cache key covers them, so a changed
# flag rebuilds (and a changed comment or package list does not).
mlx_flags=(-DCMAKE_BUILD_TYPE=Release -DFETCHCONTENT_FULLY_DISCONNECTED=ON
  -DMLX_BUILD_GGUF=OFF -DMLX_BUILD_TESTS=OFF -DMLX_BUILD_EXAMPLES=OFF -DMLX_BUILD_BENCHMARKS=OFF
  -DMLX_BUILD_PYTHON_BINDINGS=OFF -DMLX_BUILD_METAL=OFF -DMLX_BUILD_CUDA=OFF -DBUILD_SHARED_LIBS=ON)
mlxc_flags=(-DCMAKE_BUILD_TYPE=Release -DMLX_C_USE_SYSTEM_MLX=ON -DMLX_C_BUILD_EXAMPLES=OFF -DBUILD_SHARED_LIBS=ON)
key=$(printf '%s\n' "$mlx_commit" "$mlxc_commit" "$json_commit" "$fmt_commit" "${mlx_flags[*]}" "${mlxc_flags[*]}" | sha256sum | cut -c1-12)
prefix="$cache/mlx-$mlx_version-$key"

need_pkgs=()  # checked before the cache: the runtime BLAS is needed either way
command -v cmake >/dev/null || need_pkgs+=(cmake)
command -v ninja >/dev/null || need_pkgs+=(ninja-build)
command -v g++ >/dev/null || need_pkgs+=(g++)
for p in libblas-dev liblapack-dev liblapacke-dev libopenblas0-pthread; do
  dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    log "missing Debian packages: ${need_pkgs[*]} (install them, or run as root)"; exit 1
  fi
  log "installing ${need_pkgs[*]}"
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}") >&2
fi

if [ -f "$prefix/.complete" ] && [ -f "$prefix/lib/libmlxc.so" ]; then
  log "already built"
  echo "$prefix/lib"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/mlxg-mlx-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
have_tarballs=1
for t in "${tarballs[@]}"; do [ -f "$src_dir/$t" ] || have_tarballs=0; done
if [ $have_tarballs = 1 ]; then
  log "sources from $src_dir"
  if [ -f "$src_dir/SHA256SUMS" ]; then (cd "$src_dir" && sha256sum --quiet -c SHA256SUMS) >&2; fi
  # Each tarball is a `git archive` export with one top-level directory.
  untar() { mkdir -p "$work/$1" && tar -xJf "$src_dir/$2" -C "$work/$1" --strip-components=1; }
  untar mlx mlx-0.31.2.tar.xz
  untar mlx-c mlx-c-fba4470.tar.xz
  untar json json-3.11.3.tar.xz
  untar fmt fmt-12.1.0.tar.xz
else
  log "no tarballs in $src_dir; cloning the pinned commits"
  clone() { git init -q "$work/$1" && git -C "$work/$1" fetch -q --depth 1 "$2" "$3" && git -C "$work/$1" checkout -q FETCH_HEAD; }
  clone mlx https://github.com/ml-explore/mlx "$mlx_commit"
  clone mlx-c https://github.com/ml-explore/mlx-c "$mlxc_commit"
  clone json https://github.com/nlohmann/json "$json_commit"
  clone fmt https://github.com/fmtlib/fmt "$fmt_commit"
fi

stage="$prefix.partial"
rm -rf "$stage"
jobs=$(nproc)
log "building MLX $mlx_version (CPU only, $jobs jobs; about 5 minutes on 2 cores)"
cmake -S "$work/mlx" -B "$work/build-mlx" -G Ninja "${mlx_flags[@]}" \
  -DCMAKE_INSTALL_PREFIX="$stage" -DCMAKE_INSTALL_LIBDIR=lib \
  -DFETCHCONTENT_SOURCE_DIR_JSON="$work/json" -DFETCHCONTENT_SOURCE_DIR_FMT="$work/fmt" >&2
cmake --build "$work/build-mlx" -j "$jobs" >&2
cmake --install "$work/build-mlx" >&2
log "building mlx-c $mlxc_commit"
cmake -S "$work/mlx-c" -B "$work/build-mlxc" -G Ninja "${mlxc_flags[@]}" \
  -DCMAKE_INSTALL_PREFIX="$stage" -DCMAKE_INSTALL_LIBDIR=lib -DMLX_DIR="$stage/share/cmake/MLX" \
  -DCMAKE_INSTALL_RPATH='$ORIGIN' -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON >&2
cmake --build "$work/build-mlxc" -j "$jobs" >&2
cmake --install "$work/build-mlxc" >&2
touch "$stage/.complete"
rm -rf "$prefix"
mv "$stage" "$prefix"
log "done"
echo "$prefix/lib"
