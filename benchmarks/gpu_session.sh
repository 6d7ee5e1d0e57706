#!/usr/bin/env bash
# One device call for a whole session's GPU evidence: every GPU test (both step paths, trie), the step benchmark
# with the in-kernel profile, and the trie benchmark, results under $OUT (copy them to benchmarks/results/).
# ~9 minutes on an H200 from a cold start; pass the wheels with carry [".whl"]. At most 8 files come back from
# $OUT, so the logs and the trie benchmark's files travel as one tarball (session.tgz) beside step_gpu.{json,md}.
# usage: bash benchmarks/gpu_session.sh [ADS] [extra step_gpu.py args]
set -o pipefail
ADS=${1:-15000000}; shift
EXTRA=("$@"); [ ${#EXTRA[@]} -eq 0 ] && EXTRA=(--compile-steps none --cpu-reps 1)
source benchmarks/_device.sh
build_index $ADS
python3 -m pytest -q -p no:cacheprovider -rs tests/test_kernels_compile.py tests/test_matcher_gpu.py tests/test_trie_gpu.py \
  2>&1 | tee $OUT/gpu_tests.log | tail -5
wait $BUILD || { tail -5 $OUT/build.log; exit 1; }
python3 benchmarks/step_gpu.py --index /tmp/idx --out $OUT "${EXTRA[@]}" 2>&1 | tee $OUT/bench.log | tail -25
python3 benchmarks/gpu_fused_profile.py --index /tmp/idx 2>&1 | tee $OUT/fused_profile.txt
python3 benchmarks/trie_gpu_profile.py --keys 10000000 --bw 100,1000 2>&1 | tee $OUT/trie_profile.txt
mkdir -p $OUT/trie
python3 benchmarks/trie.py --keys 10000000 --search-keys 10000000 --devices cpu,cuda --threads 8 --build-reps 1 \
  --queries 100 --queries-large 100 --tput-seconds 1 --tput-rounds 20 --workdir /tmp/t --out $OUT/trie 2>&1 | tail -8
# the device returns at most 8 files: bundle everything but the step tables
# (the archive is written outside $OUT: tar refuses a folder that changes while it reads it)
(cd $OUT && tar czf /tmp/session.tgz --exclude=step_gpu.json --exclude=step_gpu.md . && \
  find . -mindepth 1 -not -name 'step_gpu.*' -delete && mv /tmp/session.tgz $OUT/)
