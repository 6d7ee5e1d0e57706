# Sourced by the device-session scripts (bash): the carried wheels installed, the environment, the GPU named;
# build_index ADS starts the 10M-SID index build (/tmp/idx) in the background and sets BUILD to its pid.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv

build_index() {  # the index builds on the CPU cores while the GPU tests run
  (python3 -m gtmkit synth catalog --ads "$1" --seed 1 -o /tmp/cat.parquet -s && \
   python3 -m gtmkit build /tmp/cat.parquet -o /tmp/idx --partition static --k 1,4,4,2 -s --json > $OUT/build.json) \
    > $OUT/build.log 2>&1 &
  BUILD=$!
}
