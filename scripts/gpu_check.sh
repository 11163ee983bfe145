#!/usr/bin/env bash
# The device check of the GPU path, for a session lent a GPU machine (one
# prepared run; CI and dev boxes have no GPU). Builds (the CUDA runtime and
# NCCL are found under /usr/local/cuda), then runs what needs a device:
#   - `ckpt gpu` (versions, devices),
#   - gpu_test (pinned snapshots of device-memory tensors through an async
#     save, bit for bit),
#   - gpu_paths (pinned train == host-snapshot train; NCCL data plane: two
#     ranks on one device must fail cleanly at init, on >= 2 devices load DP2
#     with 0 mismatches),
#   - async_save_test and share_reads as regressions.
# Writes the log to ${OUT:-build}/gpu_check.log.
#   bash scripts/gpu_check.sh [build-dir]
set -uo pipefail
BUILD=${1:-build}
LOG=${OUT:-$BUILD}/gpu_check.log
mkdir -p "$(dirname "$LOG")"
{
  bash scripts/install_deps.sh
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build "$BUILD" -j "$(nproc)" || exit 2
  "$BUILD/cli/ckpt" gpu
  (cd "$BUILD" && ctest --output-on-failure --timeout 300 -R 'GpuTest|gpu_paths|AsyncSaveTest|share_reads')
} 2>&1 | tee "$LOG"
