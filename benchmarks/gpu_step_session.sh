#!/usr/bin/env bash
# One device call for the GPU matcher: the GPU step tests (fused with and without its front, multi-kernel),
# fused-step variants side by side (VARIANTS, gpu_fused_variants.py arguments), step_gpu.py and the in-kernel
# profile; logs come back as one tarball (session.tgz) beside step_gpu.{json,md}. Pass the wheels with
# carry [".whl"]. usage: VARIANTS="--variant base: --variant front:@front=auto" bash benchmarks/gpu_step_session.sh [ADS]
set -o pipefail
ADS=${1:-15000000}
VARIANTS=${VARIANTS:---variant base: --variant front:@front=auto}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
# the index builds on the CPU cores while the GPU tests run
(python3 -m gtmkit synth catalog --ads $ADS --seed 1 -o /tmp/cat.parquet -s && \
 python3 -m gtmkit build /tmp/cat.parquet -o /tmp/idx --partition static --k 1,4,4,2 -s --json > $OUT/build.json) \
  > $OUT/build.log 2>&1 &
BUILD=$!
python3 -m pytest -q -p no:cacheprovider -rs tests/test_kernels_compile.py tests/test_matcher_gpu.py \
  2>&1 | tee $OUT/gpu_tests.log | tail -4
wait $BUILD || { tail -5 $OUT/build.log; exit 1; }
python3 benchmarks/gpu_fused_variants.py --index /tmp/idx --rounds 5 $VARIANTS 2>&1 | tee $OUT/variants.txt | tail -12
python3 benchmarks/step_gpu.py --index /tmp/idx --out $OUT --compile-steps none --cpu-reps 1 2>&1 | tee $OUT/bench.log | tail -30
python3 benchmarks/gpu_fused_profile.py --index /tmp/idx 2>&1 > $OUT/fused_profile.txt
(cd $OUT && tar czf /tmp/session.tgz --exclude=step_gpu.json --exclude=step_gpu.md . && \
  find . -mindepth 1 -not -name 'step_gpu.*' -delete && mv /tmp/session.tgz $OUT/)
