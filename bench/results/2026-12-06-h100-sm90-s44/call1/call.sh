#!/usr/bin/env bash
# Session 44, call 1: the GPU test suites with the two-pass oracle and baseline (71d60e3), each timed; the
# backward suite as it was (main 741c203's test binary and library: the oracle by (batch, K/V head)), timed in the
# same call; then Nsight Compute on the sm90 backward's main kernel at D = 128 S = 512 (full and causal) beside
# cuDNN's backward kernels: where a short tile's time goes.
cd "$(dirname "$0")/.."
out=${OUT:-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
for run in forward-sm80 forward-sm90 backward; do
  start=$SECONDS
  TEST_RUNS=$run TEST_TIMEOUT=300 bash scripts/gpu_round.sh tests 2>&1 | grep -E "PASSED|FAILED|SKIPPED|Failure" | head -8
  echo "suite $run (two-pass oracle): $((SECONDS - start)) s"
done
mkdir -p /tmp/old
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
  .device/old/libflashtile.so.0.1.0.xz /tmp/old/libflashtile.so.0.1.0 && ln -sf libflashtile.so.0.1.0 /tmp/old/libflashtile.so.0
python3 -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], 'wb'))" \
  .device/old/cuda_backward_test.xz /tmp/old/cuda_backward_test && chmod +x /tmp/old/cuda_backward_test
start=$SECONDS
LD_LIBRARY_PATH=/tmp/old:$PWD/.device/lib timeout 300 /tmp/old/cuda_backward_test --gtest_brief=1 > "$out/gpu-tests-backward-old.txt" 2>&1
tail -3 "$out/gpu-tests-backward-old.txt"
echo "suite backward (oracle by (batch, K/V head), main 741c203): $((SECONDS - start)) s"
PROFILE90_S=512 bash scripts/gpu_round.sh profilebwd90 2>&1 | tail -24
PROFILE90_S=512 PROFILE90_CAUSAL=1 bash scripts/gpu_round.sh profilebwd90 2>&1 | tail -24
echo "done at $SECONDS s"
cd "$out" && tar czf /tmp/call1.tgz . && rm -rf ./* && mv /tmp/call1.tgz . && ls -la
