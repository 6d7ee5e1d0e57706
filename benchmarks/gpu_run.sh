#!/usr/bin/env bash
# One device call: install carried wheels, run the GPU tests, build a synth index, run the GPU benchmark.
# usage: bash benchmarks/gpu_run.sh ADS [extra step_gpu.py args]   (env TESTS: pytest targets, "" to skip)
set -o pipefail
ADS=${1:-15000000}; shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import cupy, numba, torch; print('cupy', cupy.__version__, 'numba', numba.__version__, 'torch', torch.__version__)"
TESTS=${TESTS-tests/test_kernels_compile.py tests/test_matcher_gpu.py}
if [ -n "$TESTS" ]; then
  python3 -m pytest -q -p no:cacheprovider -rs $TESTS 2>&1 | tee $OUT/gpu_tests.log | tail -40
fi
python3 -m gtmkit synth catalog --ads $ADS --seed 1 -o /tmp/cat.parquet -s && \
python3 -m gtmkit build /tmp/cat.parquet -o /tmp/idx --partition static --k 1,4,4,2 -s --json > $OUT/build.json && \
python3 benchmarks/step_gpu.py --index /tmp/idx --out $OUT "$@" 2>&1 | tee $OUT/bench.log | tail -40
