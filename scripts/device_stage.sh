#!/usr/bin/env bash
# Keeps a GPU call's carry under the device tool's 64 MiB (which counts the tracked files too: ~54 MB is left for
# builds). Everything built for the GPU machine (device_prepare.sh, candidate_lib.sh) lives in .device; before a
# call, this moves it to .device-all and makes .device hard links to the parts the call uses, so that
# `carry: [".device", ...]` takes only those. --restore puts the whole store back as .device.
#   scripts/device_stage.sh lib libflashtile.so.0.1.0.xz peers.py cand-b22n cand-b23   # paths inside .device
#   scripts/device_stage.sh --restore
set -euo pipefail
cd "$(dirname "$0")/.."
store=.device-all
# What was built or written into a staged .device (candidate_lib.sh, a call's script) moves to the store, so that
# neither --restore nor staging again (which replaces .device) loses it.
keep_new_entries() {
  for entry in .device/* .device/.[!.]*; do
    [ -e "$entry" ] && [ ! -e "$store/${entry#.device/}" ] && mv "$entry" "$store/"
  done
  return 0
}
if [ "${1:-}" = --restore ]; then
  if [ -d "$store" ]; then
    keep_new_entries
    rm -rf .device && mv "$store" .device
  fi
  du -sh .device
  exit 0
fi
[ $# -gt 0 ] || { sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
if [ -d "$store" ]; then keep_new_entries; else mv .device "$store"; fi
rm -rf .device
mkdir .device
for part in "$@"; do
  [ -e "$store/$part" ] || { echo "device_stage: $store/$part: not built" >&2; exit 1; }
  mkdir -p ".device/$(dirname "$part")"
  cp -al "$store/$part" ".device/$part"
done
du -sh .device
