#!/usr/bin/env bash
# Bounded fuzz run under ASan+UBSan (issue 16): builds tests/fuzz/ckpt_fuzz in
# its own build dir with sanitizers and runs it for FUZZ_SECONDS (default 180)
# over the checked-in corpus (tests/fuzz/corpus). Fails on any crash, hang,
# sanitizer report or peak RSS above FUZZ_MAX_RSS_MB. New interesting inputs go
# to $BUILD/fuzz/found (not into the source tree); crash inputs to
# $BUILD/fuzz/crashes - check those into tests/fuzz/corpus once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${FUZZ_BUILD:-build-asan}
SECONDS_TO_RUN=${FUZZ_SECONDS:-180}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCKPT_WERROR=ON \
  -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_C_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
cmake --build "$BUILD" -j "${JOBS:-2}" --target ckpt_fuzz
rm -rf "$BUILD/fuzz" && mkdir -p "$BUILD/fuzz/found"
# ASan: leaks of the deliberately leaked MPI-free process are not the point here.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$BUILD/tests/fuzz/ckpt_fuzz" --work "$BUILD/fuzz/work" --seconds "$SECONDS_TO_RUN" --seed "${FUZZ_SEED:-$RANDOM}" \
  --seeds tests/fuzz/corpus --corpus "$BUILD/fuzz/found" --crashes "$BUILD/fuzz/crashes" --max-rss-mb "${FUZZ_MAX_RSS_MB:-2048}"
