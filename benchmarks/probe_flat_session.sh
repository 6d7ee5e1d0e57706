#!/usr/bin/env bash
# One device call for the flat-step probe: the 10M-SID index, then benchmarks/probe_flat_step.py (fused step and
# flat kernels side by side; results under $OUT). ~4-6 minutes on an H200 from a cold start; carry [".whl"].
set -o pipefail
source benchmarks/_device.sh
build_index ${1:-15000000}
wait $BUILD || { tail -5 $OUT/build.log; exit 1; }
python3 benchmarks/probe_flat_step.py --index /tmp/idx --out $OUT 2>&1 | tee $OUT/probe.txt
