#!/usr/bin/env bash
# One device call for the flat-step probe: the 10M-SID index, then benchmarks/probe_flat_step.py (fused step and
# flat kernels side by side; results under $OUT). ~2 minutes on an H200 from a cold start; carry [".whl"].
# TESTS (optional): pytest arguments run first, while the index builds.
set -o pipefail
source benchmarks/_device.sh
build_index ${1:-15000000}
[ -n "${TESTS:-}" ] && python3 -m pytest -q -p no:cacheprovider -rs $TESTS 2>&1 | tee $OUT/gpu_tests.log | tail -3
wait $BUILD || { tail -5 $OUT/build.log; exit 1; }
python3 benchmarks/probe_flat_step.py --index /tmp/idx --out $OUT 2>&1 | tee $OUT/probe.txt
