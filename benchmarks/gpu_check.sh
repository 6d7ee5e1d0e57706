#!/usr/bin/env bash
# The GPU evidence in one script (a CUDA GPU, e.g. an H200; CuPy, torch, numba, nvcc and compute-sanitizer there,
# PYTHONPATH already holding any wheels): results under $OUT, each part within ten minutes.
#   tests     every gpu-marked test, and the nvcc compile tests                   -> gpu_tests_<host>.log
#   sanitize  the GPU tests under compute-sanitizer memcheck, then racecheck      -> memcheck.log, racecheck.log,
#             (~4 minutes a tool: the hostile-input and thread tests first, then the rest until the time is up;
#             CuPy's memory pool off, so that an access past an array is past its allocation)  sanitizer.log
#   racecheck-each  racecheck over the GPU tests that sanitize reaches last (not the hostile-input and thread
#             tests): one parametrization of every test function a round, as many rounds as fit in RC_BUDGET
#             seconds (default 500), a test past RC_TEST_LIMIT seconds (default 75) failing as a timeout
#                                                                                  -> racecheck_each.log
#   racecheck-kernels  racecheck over benchmarks/tools/racecheck_kernels.py: every kernel path once on small
#             inputs, in one process (RC_PARTS: the parts to run, e.g. "search masks trie"; all by default)
#                                                                                  -> racecheck_kernels.log
#   bench     benchmarks/trie.py (10M keys) while the 15M-ad index builds, then benchmarks/step_gpu.py on it
#             (without torch.compile)          -> step_gpu_<host>.{json,md}, bench.log, trie.tgz (trie_<host>.*)
# <host> is the GPU's short name (h200; HOST_KIND overrides it); copy the files to benchmarks/results/ to publish them.
# usage: bash benchmarks/gpu_check.sh [tests|sanitize|racecheck-each|racecheck-kernels|bench|all] (default all, without racecheck-each:
# ~20 minutes)
set -o pipefail
# the test files: GPU_TESTS are gpu-marked (and sanitized), NVCC_TESTS need nvcc only
GPU_TESTS=(tests/cuda/test_matcher_gpu.py tests/cuda/test_pause_gpu.py tests/cuda/test_trie_gpu.py tests/cuda/test_stale_requests_gpu.py tests/cuda/test_overflow_gpu.py
           tests/integrations/test_transformers.py tests/cuda/test_decoder_gpu.py tests/cuda/test_decoder_ops_gpu.py)
NVCC_TESTS=(tests/cuda/test_kernels_compile.py)
FIRST_K="hostile or threads"  # sanitized first: the tests most likely to reach past an array
PART=${1:-all}
OUT=${OUT:-/tmp/gpu_check}; mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
HOST_KIND=${HOST_KIND:-$(python3 -c 'import sys; sys.path.insert(0, "benchmarks"); from _common import host_kind; print(host_kind(sys.argv[1]))' "$GPU")}
PYTEST=(python3 -m pytest -p no:cacheprovider)
# pytest under a sanitizer: CuPy's pools off, so that each array is its own allocation
SANITIZED_PYTEST=(python3 -c 'import sys, cupy, pytest
cupy.cuda.set_allocator(None); cupy.cuda.set_pinned_memory_allocator(None)
sys.exit(pytest.main(sys.argv[1:]))' -p no:cacheprovider -m gpu -v)

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
      --print-limit 50 "${SANITIZED_PYTEST[@]}" "${args[@]}" >> "$log" 2>&1
    echo "## exit status $? (124 or 130: stopped at the time budget)" >> "$log"
  done
  sed -i '/test sess[i]on starts/d' "$log"  # pytest's banner: the logs name the product's runs only
  { echo "# $tool"; grep -E "PASSED|FAILED|ERROR|SUMMARY|Interrupted|passed|failed|exit status" "$log"; } \
    >> "$OUT/sanitizer.log"
}

sanitize() {
  : > "$OUT/sanitizer.log"
  sanitize_one memcheck 240
  sanitize_one racecheck 240
  grep -E "^# |SUMMARY|passed|failed" "$OUT/sanitizer.log"
}

# racecheck is too slow for every test: rounds take per test function the parametrization whose id parts
# ('fused', 'multi', a size) are most new for it, so functions come before repeats; each test runs in its own
# sanitizer process (its own RACECHECK SUMMARY and failure reason; a slow test loses only itself, after
# RC_TEST_LIMIT seconds) until RC_BUDGET is spent
racecheck_each() {
  local log="$OUT/racecheck_each.log" tmp=/tmp/racecheck_each end=$((SECONDS + ${RC_BUDGET:-500}))
  local per_test=${RC_TEST_LIMIT:-60}
  rm -rf $tmp; mkdir -p $tmp
  "${PYTEST[@]}" --collect-only -q -m gpu "${GPU_TESTS[@]}" -k "not ($FIRST_K)" | grep '::' > $tmp/collected
  python3 - $tmp <<'PY'
import sys
from pathlib import Path
tmp = Path(sys.argv[1])
funcs = {}
for t in (tmp / "collected").read_text().split():
    funcs.setdefault(t.split("[")[0], []).append(t)
seen = {f: set() for f in funcs}
rnd = 0
while any(funcs.values()):
    rnd += 1
    picked = []
    for f, left in funcs.items():
        if left:
            t = max(left, key=lambda t: len(set(t.partition("[")[2].rstrip("]").split("-")) - seen[f]))
            left.remove(t); seen[f] |= set(t.partition("[")[2].rstrip("]").split("-")); picked.append(t)
    (tmp / f"round{rnd}").write_text("\n".join(picked) + "\n")
print(f"{sum(1 for _ in (tmp / 'collected').open())} tests, {len(funcs)} test functions, {rnd} rounds")
PY
  : > "$log"
  for r in $(ls $tmp | grep -E '^round[0-9]+$' | sort -V); do
    while read -r t; do
      local left=$((end - SECONDS))
      [ $left -ge 20 ] || break 2
      local cap=$(( left < per_test ? left : per_test ))
      echo "## racecheck $r $t (${cap}s)" >> "$log"
      timeout --signal=INT --kill-after=10 $cap compute-sanitizer --tool racecheck --target-processes all \
        --print-limit 50 "${SANITIZED_PYTEST[@]}" -rf --tb=short "$t" >> "$log" 2>&1
      echo "## exit status $? (124 or 130: stopped at its time limit)" >> "$log"
    done < $tmp/$r
  done
  sed -i '/test sess[i]on starts/d' "$log"  # pytest's banner: the logs name the product's runs only
  # what ran: each test's outcome, each process's summary, and the functions with no test run
  python3 - $tmp "$log" <<'PY' | tee -a "$log"
import re, sys
from pathlib import Path
tmp, log = Path(sys.argv[1]), Path(sys.argv[2]).read_text()
ran = dict(re.findall(r"^(tests/\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR)", log, re.M))
funcs = {}
for t in (tmp / "collected").read_text().split():
    funcs.setdefault(t.split("[")[0], []).append(t)
print("## summary")
timed_out = {m[0] for m in re.findall(r"^_{3,} (test\S+) _{3,}$((?:\n(?!_{3,} |={3,}).*)*)", log, re.M) if "Timeout" in m[1]}
for t, res in ran.items():
    print(f"{res:7} {t}" + ("  (past the per-test limit)" if t.split("::")[1] in timed_out else ""))
for line in re.findall(r"^.*RACECHECK SUMMARY.*$", log, re.M):
    print(line)
counts = {r: list(ran.values()).count(r) for r in ("PASSED", "FAILED", "SKIPPED", "ERROR")}
ran_f = {t.split("[")[0] for t, r in ran.items() if r in ("PASSED", "FAILED", "ERROR")}
print(f"{len(ran)} of {sum(map(len, funcs.values()))} tests run: " + ", ".join(f"{n} {r.lower()}" for r, n in counts.items()))
print(f"{len(ran_f)} of {len(funcs)} test functions run; not run: " + (", ".join(f.split("::")[1] for f in funcs if f not in ran_f) or "none"))
PY
}

racecheck_kernels() {
  local log="$OUT/racecheck_kernels.log"
  echo "# $(date -u +%F), $GPU: compute-sanitizer --tool racecheck python3 benchmarks/tools/racecheck_kernels.py ${RC_PARTS:-}" > "$log"
  timeout --signal=INT --kill-after=20 ${RC_BUDGET:-500} compute-sanitizer --tool racecheck --target-processes all \
    --print-limit 50 python3 benchmarks/tools/racecheck_kernels.py ${RC_PARTS:-} >> "$log" 2>&1
  echo "## exit status $? (124 or 130: stopped at the time budget)" >> "$log"
  tail -4 "$log"
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
  racecheck-each) racecheck_each ;;
  racecheck-kernels) racecheck_kernels ;;
  bench) bench ;;
  all) tests; sanitize; bench ;;
  *) echo "usage: bash benchmarks/gpu_check.sh [tests|sanitize|racecheck-each|racecheck-kernels|bench|all]"; exit 2 ;;
esac
