#!/usr/bin/env bash
# One device call for a fused-step change: the matcher's GPU tests, fused-step variants side by side
# (benchmarks/gpu_fused_variants.py: every variant's outputs must equal the first's) and step_gpu.py, on a
# 10M-SID index built while the tests run. ~7-9 minutes on an H200 from a cold start; carry [".whl"].
# usage: VARIANTS="--variant base: --variant old:TOP_R0=0" [COMPILE_STEPS=3] bash benchmarks/gpu_step_session.sh [ADS]
# (COMPILE_STEPS: step_gpu.py also times (a) under torch.compile and a CUDA graph at those steps; slow to compile)
set -o pipefail
ADS=${1:-15000000}
source benchmarks/_device.sh
build_index $ADS
python3 -m pytest -q -p no:cacheprovider -rs tests/test_kernels_compile.py tests/test_matcher_gpu.py tests/test_pdl.py \
  2>&1 | tee $OUT/gpu_tests.log | tail -3
wait $BUILD || { tail -5 $OUT/build.log; exit 1; }
python3 benchmarks/gpu_fused_variants.py --index /tmp/idx --rounds ${ROUNDS:-5} ${VARIANTS:---variant base:} 2>&1 \
  | tee $OUT/variants.txt | tail -14
python3 benchmarks/step_gpu.py --index /tmp/idx --out $OUT --compile-steps ${COMPILE_STEPS:-none} --cpu-reps 1 2>&1 | tee $OUT/bench.log | tail -16
(cd $OUT && tar czf /tmp/step_session.tgz --exclude=step_gpu.json --exclude=step_gpu.md . && \
  find . -mindepth 1 -not -name 'step_gpu.*' -delete && mv /tmp/step_session.tgz $OUT/)
