#!/usr/bin/env bash
# Builds another git ref's library (a branch under test), or this tree's HEAD with prepared patches applied, for a
# same-call A/B on the GPU machine:
#   scripts/candidate_lib.sh <git ref | patch[,patch...]> <name> [CMake options...]
# Patches (bench/candidates/*.patch: kernel changes prepared without a GPU, kept in main so they outlive the
# session that wrote them) apply in the order given, onto HEAD.
# Extra CMake options narrow the candidate's build for a quicker A/B, e.g. -DFLASHTILE_CUDA_HEAD_DIMS="64;128"
# -DFLASHTILE_CUDA_DTYPES=bf16 (then time only those shapes: AB_ARGS with --shapes and --dtype).
# The ref is checked out in a worktree at .candidates/<name> (ignored by git) and its library built there with
# this tree's GPU-machine options (scripts/device_options.sh), then xz-compressed to
# .device/cand-<name>/libflashtile.so.0.1.0.xz, which travels with .device. On the GPU machine,
# `scripts/gpu_round.sh ab` runs this tree's flashtile tool (and, with AB_TESTS=1, its GPU tests) against this
# tree's library and then against each candidate's, through LD_LIBRARY_PATH. That needs the candidate to export
# every library symbol those binaries use, which is checked here. The candidate's own GPU tests are built too and
# travel beside its library (TEST_CAND=<name> runs them: a patch may add tests or change what one expects).
# CANDIDATE_TREE=<tree> builds in .candidates/<tree> instead, shared by candidates that differ from each other in
# a few files: checking out the next ref there rebuilds only the translation units those files reach.
# Run scripts/device_prepare.sh first: this tree's build is the baseline. Remove a candidate with
#   git worktree remove .candidates/<name>; rm -r .device/cand-<name>
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/candidate_lib.sh <git ref | patch[,patch...]> <name> [CMake options...]"
ref=${1:?$usage}
name=${2:?$usage}
shift 2
if [[ ! $name =~ ^[A-Za-z0-9_-]+$ ]]; then
  echo "candidate_lib: name '$name': use letters, digits, - and _" >&2
  exit 2
fi
base_lib=build-device/libflashtile.so.0.1.0
if [ ! -f "$base_lib" ]; then
  echo "candidate_lib: $base_lib is missing: run scripts/device_prepare.sh first (the baseline)" >&2
  exit 1
fi
patches=()
if [[ $ref == *.patch* ]]; then
  IFS=, read -r -a patches <<< "$ref"
  for i in "${!patches[@]}"; do  # paths relative to the repository root, or absolute
    [ -f "${patches[i]}" ] || { echo "candidate_lib: patch '${patches[i]}' not found" >&2; exit 2; }
    patches[i]=$(realpath "${patches[i]}")
  done
  ref=HEAD
fi
git rev-parse --verify -q "$ref^{commit}" >/dev/null || { echo "candidate_lib: '$ref' is not a commit" >&2; exit 2; }
commit=$(git rev-parse "$ref")

wt=.candidates/${CANDIDATE_TREE:-$name}
if [ -d "$wt" ]; then
  # -f and clean: drop what a previous candidate's patches changed or added here (builds are ignored, so kept)
  git -C "$wt" checkout -q -f --detach "$commit" && git -C "$wt" clean -fdq
else
  mkdir -p .candidates
  git worktree add -q --detach "$wt" "$commit"
fi
for patch in "${patches[@]}"; do
  git -C "$wt" apply "$patch" || { echo "candidate_lib: $patch does not apply onto $(git log --oneline -1 "$commit")" >&2; exit 1; }
done
what="$(git -C "$wt" log --oneline -1)"
for patch in "${patches[@]}"; do what+=" + $(basename "$patch")"; done
echo "candidate_lib: $name = $what"
source scripts/device_options.sh
# -U first: a narrowing given to an earlier build of this candidate must not stay in its CMake cache.
cmake -S "$wt" -B "$wt/build-device" -DCMAKE_BUILD_TYPE=Release "${device_cmake_args[@]}" \
  -UFLASHTILE_CUDA_HEAD_DIMS -UFLASHTILE_CUDA_DTYPES "$@" >/dev/null
if ! cmake --build "$wt/build-device" -j "$(nproc)" --target flashtile > "$wt/build-device/build.log" 2>&1; then
  grep -E -B2 -A6 "error" "$wt/build-device/build.log" | head -40 >&2 || true
  echo "candidate_lib: the build of $name failed (whole log: $wt/build-device/build.log)" >&2
  exit 1
fi
lib=$wt/build-device/libflashtile.so.0.1.0
scripts/check_wgmma_serialized.sh "$wt/build-device/build.log" "candidate_lib $name"  # not worth timing

# Every library symbol the baseline's tool and GPU tests import must be exported by the candidate too.
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
base_exported=$(nm -D --defined-only "$base_lib" | awk '{print $3}' | sort -u)
missing=0
for binary in build-device/tools/flashtile build-device/cuda_forward_test build-device/cuda_backward_test; do
  [ -f "$binary" ] || continue
  needed=$(comm -12 <(nm -D --undefined-only "$binary" | awk '{print $2}' | sort -u) <(echo "$base_exported"))
  absent=$(comm -23 <(echo "$needed") <(echo "$exported"))
  if [ -n "$absent" ]; then
    echo "candidate_lib: $name lacks symbols $binary uses: $(echo "$absent" | head -3 | tr '\n' ' ')" >&2
    missing=1
  fi
done
[ "$missing" = 0 ] || exit 1
mkdir -p ".device/cand-$name"
# -9e: 13 MB against -6's 16 MB (a minute more), so that the baseline and two full candidates travel together
# within the device call's 64 MiB beside the working tree (~17 MB)
xz -T"$(nproc)" -9e -c "$lib" > ".device/cand-$name/libflashtile.so.0.1.0.xz"
# The candidate's own GPU tests too (a patch may add tests, or change what one expects), built as
# device_prepare.sh builds this tree's: gpu_round.sh's tests and sanitize stages run these with TEST_CAND=<name>,
# against the candidate's library.
rm -f ".device/cand-$name"/cuda_*_test.xz
if ! cmake --build "$wt/build-device" -j "$(nproc)" --target flashtile_verify >> "$wt/build-device/build.log" 2>&1; then
  echo "candidate_lib: $name's verify library does not build (log: $wt/build-device/build.log)" >&2
  exit 1
fi
build_gpu_tests "$wt" "$wt/build-device"
for t in forward backward; do
  xz -T"$(nproc)" -6 -c "$wt/build-device/cuda_${t}_test" > ".device/cand-$name/cuda_${t}_test.xz"
done
echo "$what" > ".device/cand-$name/commit.txt"
du -sh ".device/cand-$name"
