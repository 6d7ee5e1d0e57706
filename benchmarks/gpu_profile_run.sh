#!/usr/bin/env bash
# One device call that profiles the GPU kernels: the trie search (in-kernel phase stamps at 1M and 10M keys,
# and ncu), the fused CD+GTM step (phase stamps and ncu at one depth). Files under $OUT.
# usage: bash benchmarks/gpu_profile_run.sh [ADS] [NCU_STEP]
set -o pipefail
ADS=${1:-15000000}; NCU_STEP=${2:-3}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 NUMBA_CACHE_DIR=/tmp/numba
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
SECTIONS="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section SourceCounters"
ncu_run() {  # name, kernel regex, command...
  local name=$1 k=$2; shift 2
  timeout 240 ncu --profile-from-start off --clock-control none -k "regex:$k" -c 1 $SECTIONS -f -o $OUT/$name "$@" > $OUT/$name.ncu.log 2>&1
  ncu -i $OUT/$name.ncu-rep --page details > $OUT/$name.details.txt 2>&1
  ncu -i $OUT/$name.ncu-rep --page source --csv --print-source sass 2> $OUT/$name.src.err | python3 benchmarks/ncu_top.py 45 > $OUT/$name.top.txt
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots Busy|Memory Throughput|L1/TEX Hit|L2 Hit|Achieved Occupancy|Registers" $OUT/$name.details.txt | head -20
  head -50 $OUT/$name.top.txt
}
if [ -z "$SKIP_TRIE" ]; then
  python3 benchmarks/trie_gpu_profile.py --keys 1000000 --bw 100,1000 2>&1 | tee $OUT/trie_profile_1m.txt
  python3 benchmarks/trie_gpu_profile.py --keys 10000000 --bw 100,400,1000 2>&1 | tee $OUT/trie_profile_10m.txt
  ncu_run trie search_kernel python3 benchmarks/trie_gpu_profile.py --keys 10000000 --bw 1000 --ncu
fi
if [ -z "$SKIP_GTM" ]; then
  python3 -m gtmkit synth catalog --ads $ADS --seed 1 -o /tmp/cat.parquet -s && \
  python3 -m gtmkit build /tmp/cat.parquet -o /tmp/idx --partition static --k 1,4,4,2 -s --json > $OUT/build.json || exit 1
  python3 benchmarks/gpu_fused_profile.py --index /tmp/idx 2>&1 | tee $OUT/fused_profile.txt
  ncu_run fused fused python3 benchmarks/gpu_fused_profile.py --index /tmp/idx --ncu-step $NCU_STEP
fi
