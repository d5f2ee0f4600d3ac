#!/usr/bin/env bash
# Fails (exit 1, naming the kernels) where a build log holds ptxas's "wgmma.mma_async instructions are
# serialized" info lines: C7512 (too few registers for the wgmma in flight), C7513, C7515 and the other causes,
# ten in all. They are info lines, not warnings, so the build itself passes; a kernel whose wgmma were serialized
# (the sm90 forward's v11 and backward v2 and v11 in their first builds: docs/perf-log.md) is not worth timing
# and does not land. Other C751x lines are not this (C7519: a warpgroup.arrive the compiler injected).
#   scripts/check_wgmma_serialized.sh <build log> <who, for the message>
set -euo pipefail
log=${1:?usage: scripts/check_wgmma_serialized.sh <build log> <who>}
if grep -q "instructions are serialized" "$log"; then
  echo "${2:-check}: ptxas serialized wgmma in:" >&2
  grep "instructions are serialized" "$log" | sed -E 's/.*function .([A-Za-z0-9_]+).*/  \1/' | sort -u >&2
  exit 1
fi
