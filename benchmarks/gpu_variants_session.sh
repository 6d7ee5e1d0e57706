#!/usr/bin/env bash
# One device call comparing fused-step variants built with defines: each one's in-kernel phase profile
# (gpu_fused_profile.py), then all of them side by side (gpu_fused_variants.py: every variant's outputs must
# equal the first's), on a 10M-SID index. ~3-4 minutes on an H200 from a cold start; carry [".whl"].
# PROFILES (optional): the names of the variants to profile (default: all).
# usage: VARIANTS="base: old:HPLAIN=0 lhi:LHI=1" [PROFILES="base lhi"] bash benchmarks/gpu_variants_session.sh [ADS]
set -o pipefail
ADS=${1:-15000000}
source benchmarks/_device.sh
build_index $ADS
wait $BUILD || { tail -5 $OUT/build.log; exit 1; }
VS=()
for v in ${VARIANTS:-base:}; do
  name=${v%%:*}; defs=${v#*:}; VS+=(--variant "$v")
  [ -n "${PROFILES+x}" ] && [[ " $PROFILES " != *" $name "* ]] && continue
  D=(); IFS=, read -ra DL <<< "$defs"; for d in "${DL[@]}"; do [ -n "$d" ] && D+=(--define "$d"); done
  python3 benchmarks/gpu_fused_profile.py --index /tmp/idx "${D[@]}" > $OUT/profile_$name.txt 2>&1
  echo "== $name"; head -6 $OUT/profile_$name.txt
done
python3 benchmarks/gpu_fused_variants.py --index /tmp/idx --rounds ${ROUNDS:-5} "${VS[@]}" > $OUT/variants.txt 2>&1
tail -14 $OUT/variants.txt
