#!/usr/bin/env bash
# SASS of a built object, library or binary on this machine, without a GPU: this machine's CUDA toolkit has nvcc
# but not cuobjdump or nvdisasm, so both come from PyPI (pinned) into .deps/cuda-tools (ignored by git).
#   scripts/sass.sh <.o | .so | binary> [--summary]
# --summary: per kernel, the HGMMA count and the local-memory loads and stores (STL / LDL: spills, and where they
# fall relative to the register reallocation, USETMAXREG), instead of the listing.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/sass.sh <.o | .so | binary> [--summary]"
file=${1:?$usage}
tools=$PWD/.deps/cuda-tools
bin=$tools/nvidia/cu13/bin
if [ ! -x "$bin/nvdisasm" ] || [ ! -x "$bin/cuobjdump" ]; then
  mkdir -p "$tools"
  python3 -m pip download -q --no-deps -d "$tools/wheels" nvidia-cuda-cuobjdump==13.5.37 nvidia-cuda-nvdisasm==13.5.37
  for wheel in "$tools"/wheels/*.whl; do python3 -m zipfile -e "$wheel" "$tools"; done
  chmod +x "$bin"/*
fi
export PATH=$bin:$PATH
if [ "${2:-}" != --summary ]; then
  cuobjdump -sass "$file"
  exit
fi
# One line per kernel: HGMMA, STL and LDL, and the STL and LDL by the region of code they fall in: entry (before any
# USETMAXREG), dealloc (after the producer's USETMAXREG.DEALLOC) or alloc (after a consumer's TRY_ALLOC), in the
# listing's order; which side a spill falls on says who pays it.
cuobjdump -sass "$file" | awk '
  /Function :/ { if (name != "") report(); name = $3; hgmma = 0; stl = 0; ldl = 0; region = "" ; split("", by) }
  /USETMAXREG/ { region = ($0 ~ /DEALLOC/) ? "dealloc" : "alloc" }
  /HGMMA/ { hgmma++ }
  /[^A-Z]STL/ { stl++; by["STL " (region == "" ? "entry" : region)]++ }
  /[^A-Z]LDL/ { ldl++; by["LDL " (region == "" ? "entry" : region)]++ }
  function report(   k, s) {
    s = ""
    for (k in by) s = s " " k "=" by[k]
    printf "%s: HGMMA %d, STL %d, LDL %d;%s\n", name, hgmma, stl, ldl, s
  }
  END { if (name != "") report() }'
