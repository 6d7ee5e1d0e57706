#!/usr/bin/env bash
# The GPU evidence in one script (a CUDA GPU, e.g. an H200; CuPy, torch, numba, nvcc and compute-sanitizer there,
# PYTHONPATH already holding any wheels): results under $OUT, each part within ten minutes.
#   tests     every gpu-marked test, and the nvcc compile tests                   -> gpu_tests_<host>.log
#   sanitize  the GPU tests under compute-sanitizer memcheck, then racecheck      -> memcheck.log, racecheck.log,
#             (~4 minutes a tool: the hostile-input and thread tests first, then the rest until the time is up;
#             CuPy's memory pool off, so that an access past an array is past its allocation)  sanitizer.log
#   bench     benchmarks/trie.py (10M keys) while the 15M-ad index builds, then benchmarks/step_gpu.py on it
#             (without torch.compile)          -> step_gpu_<host>.{json,md}, bench.log, trie.tgz (trie_<host>.*)
# <host> is the GPU's short name (h200; HOST_KIND overrides it); copy the files to benchmarks/results/ to publish them.
# usage: bash benchmarks/gpu_check.sh [tests|sanitize|bench|all] (default all: ~20 minutes)
set -o pipefail
# the test files: GPU_TESTS are gpu-marked (and sanitized), NVCC_TESTS need nvcc only
GPU_TESTS=(tests/cuda/test_matcher_gpu.py tests/cuda/test_trie_gpu.py)
NVCC_TESTS=(tests/cuda/test_kernels_compile.py)
FIRST_K="hostile or threads"  # sanitized first: the tests most likely to reach past an array
PART=${1:-all}
OUT=${OUT:-/tmp/gpu_check}; mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
HOST_KIND=${HOST_KIND:-$(python3 -c 'import sys; sys.path.insert(0, "benchmarks"); from _common import host_kind; print(host_kind(sys.argv[1]))' "$GPU")}
PYTEST=(python3 -m pytest -p no:cacheprovider)

tests() {
  local log="$OUT/gpu_tests_$HOST_KIND.log"
  echo "# $(date -u +%F), $GPU: ${PYTEST[*]} -q -rs ${GPU_TESTS[*]} ${NVCC_TESTS[*]}" > "$log"
  "${PYTEST[@]}" -q -rs "${GPU_TESTS[@]}" "${NVCC_TESTS[@]}" 2>&1 | tee -a "$log" | tail -5
}

# one tool over the GPU tests: those FIRST_K selects within half the budget, the others within the rest;
# -v lists what ran
sanitize_one() {
  local tool=$1 budget=$2 log="$OUT/$1.log"
  : > "$log"
  for sel in first rest; do
    if [ $sel = first ]; then args=("${GPU_TESTS[@]}" -k "$FIRST_K"); else args=("${GPU_TESTS[@]}" -k "not ($FIRST_K)"); fi
    echo "## $tool: ${args[*]}" >> "$log"
    timeout --signal=INT --kill-after=20 $((budget / 2)) compute-sanitizer --tool "$tool" --target-processes all \
      --print-limit 50 python3 -c 'import sys, cupy, pytest
cupy.cuda.set_allocator(None); cupy.cuda.set_pinned_memory_allocator(None)
sys.exit(pytest.main(sys.argv[1:]))' -p no:cacheprovider -m gpu -v "${args[@]}" >> "$log" 2>&1
    echo "## exit status $? (124 or 130: stopped at the time budget)" >> "$log"
  done
  { echo "# $tool"; grep -E "PASSED|FAILED|ERROR|SUMMARY|Interrupted|passed|failed|exit status" "$log"; } \
    >> "$OUT/sanitizer.log"
}

sanitize() {
  : > "$OUT/sanitizer.log"
  sanitize_one memcheck 240
  sanitize_one racecheck 240
  grep -E "^# |SUMMARY|passed|failed" "$OUT/sanitizer.log"
}

bench() {
  local tmp=/tmp/gpu_check_bench
  mkdir -p $tmp/trie
  (python3 -m gtmkit synth catalog --ads 15000000 --seed 1 -o /tmp/cat.parquet -s && \
   python3 -m gtmkit build /tmp/cat.parquet -o /tmp/idx --partition static --k 1,4,4,2 -s --json > $tmp/build.json) \
    > $tmp/build.log 2>&1 &
  local build=$!
  python3 benchmarks/trie.py --keys 10000000 --search-keys 10000000 --devices cpu,cuda,cuda-server --threads 8 \
    --build-reps 1 --queries 100 --queries-large 100 --tput-seconds 1 --tput-rounds 20 --workdir /tmp/t \
    --out $tmp/trie --host "$HOST_KIND" 2>&1 | tee "$OUT/bench.log" | tail -8
  wait $build || { tail -5 $tmp/build.log; return 1; }
  python3 benchmarks/step_gpu.py --index /tmp/idx --out "$OUT" --host "$HOST_KIND" --compile-steps none --cpu-reps 1 2>&1 \
    | tee -a "$OUT/bench.log" | tail -25
  tar czf "$OUT/trie.tgz" -C $tmp trie build.json build.log
}

case $PART in
  tests) tests ;;
  sanitize) sanitize ;;
  bench) bench ;;
  all) tests; sanitize; bench ;;
  *) echo "usage: bash benchmarks/gpu_check.sh [tests|sanitize|bench|all]"; exit 2 ;;
esac
