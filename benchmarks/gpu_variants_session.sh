#!/usr/bin/env bash
# One device call comparing fused-step variants built with defines: each one's in-kernel phase profile
# (gpu_fused_profile.py), then all of them side by side (gpu_fused_variants.py: every variant's outputs must
# equal the first's), on a 10M-SID index. ~3-4 minutes on an H200 from a cold start; carry [".whl"].
# PROFILES (optional): the names of the variants to profile (default: all). A profile takes the calibrated windows
# (--windows auto, as the graphed search does), or a variant's @win= token; TESTS (optional): pytest arguments run
# first, while the index builds.
# usage: VARIANTS="base: old:HPLAIN=0 none:@win=none" [PROFILES="base none"] bash benchmarks/gpu_variants_session.sh [ADS]
set -o pipefail
ADS=${1:-15000000}
source benchmarks/_device.sh
build_index $ADS
[ -n "${TESTS:-}" ] && python3 -m pytest -q -p no:cacheprovider -rs $TESTS 2>&1 | tee $OUT/gpu_tests.log | tail -3
wait $BUILD || { tail -5 $OUT/build.log; exit 1; }
VS=()
for v in ${VARIANTS:-base:}; do
  name=${v%%:*}; defs=${v#*:}; VS+=(--variant "$v")
  [ -n "${PROFILES+x}" ] && [[ " $PROFILES " != *" $name "* ]] && continue
  D=(--windows auto); IFS=, read -ra DL <<< "$defs"
  for d in "${DL[@]}"; do
    case "$d" in "") ;; @win=*) D+=(--windows "${d#@win=}") ;; @*) ;; *) D+=(--define "$d") ;; esac
  done
  python3 benchmarks/gpu_fused_profile.py --index /tmp/idx "${D[@]}" > $OUT/profile_$name.txt 2>&1
  echo "== $name"; grep -A5 "^step | top" $OUT/profile_$name.txt; grep "candidates:" $OUT/profile_$name.txt
done
python3 benchmarks/gpu_fused_variants.py --index /tmp/idx --rounds ${ROUNDS:-5} "${VS[@]}" > $OUT/variants.txt 2>&1
tail -14 $OUT/variants.txt
