#!/usr/bin/env bash
# One device call for the GPU trie search's evidence: its GPU tests (clusters and one block a query), kernel
# variants side by side, the in-kernel profile and the trie benchmark; logs bundled into $OUT/trie_session.tgz
# (the device returns at most 8 files). Pass the wheels (mmh3, marisa-trie) with carry [".whl"], and an older
# kernel to compare with as scratch/old_trie_search.cu (carry ["scratch"]) if VARIANTS names it.
# usage: bash benchmarks/trie_gpu_session.sh [KEYS]    (VARIANTS="--variant a --variant b:DEF=1" to override,
#        PROFILE=0 to skip the in-kernel profile, PROFILE_DEFINES="--define CL=4" to profile a variant too)
set -o pipefail
KEYS=${1:-10000000}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
python3 -m pytest -q -p no:cacheprovider -rs tests/test_kernels_compile.py tests/test_trie_gpu.py 2>&1 \
  | tee $OUT/trie_gpu_tests.log | tail -3
GTMKIT_TRIE_CLUSTER=1 python3 -m pytest -q -p no:cacheprovider tests/test_trie_gpu.py 2>&1 \
  | tee $OUT/trie_gpu_tests_cl1.log | tail -2
V=${VARIANTS:-"--variant new"}
python3 benchmarks/trie_gpu_variants.py --keys $KEYS $V 2>&1 | tee $OUT/variants.txt | tail -9
if [ "${PROFILE:-1}" != 0 ]; then
  python3 benchmarks/trie_gpu_profile.py --keys $KEYS --bw 100,1000 2>&1 > $OUT/trie_profile.txt
  grep -A3 "BW=K=1000" $OUT/trie_profile.txt | head -4
  if [ -n "${PROFILE_DEFINES:-}" ]; then
    python3 benchmarks/trie_gpu_profile.py --keys $KEYS --bw 100,1000 $PROFILE_DEFINES 2>&1 > $OUT/trie_profile_variant.txt
    grep -A3 "BW=K=1000" $OUT/trie_profile_variant.txt | head -4
  fi
fi
mkdir -p $OUT/trie
python3 benchmarks/trie.py --keys $KEYS --search-keys $KEYS --devices cpu,cuda,cuda-server --threads 8 --build-reps 1 \
  --queries 100 --queries-large 100 --tput-seconds 1 --tput-rounds 20 --workdir /tmp/t --out $OUT/trie 2>&1 | tail -9
(cd $OUT && tar czf /tmp/trie_session.tgz . && find . -mindepth 1 -delete && mv /tmp/trie_session.tgz $OUT/)
