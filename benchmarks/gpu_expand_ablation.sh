#!/usr/bin/env bash
# One device call that takes the fused step's wide-row expand apart in time (issue 4's plan, session 15): the
# in-kernel phase profile (gpu_fused_profile.py) of the committed kernel, then of variants with one part of
# the expand's chain removed. The variants' answers are wrong on purpose: only their "expand+hist" column
# means anything. ~5 minutes on an H200 from a cold start; carry [".whl"].
#   nolp:   the log-prob gather replaced by a value from the token (the token load stays)
#   notok:  the child-token load replaced by the child's position (the gather stays, at that position)
#   nobin:  the wide path's histogram adds removed
# (variants side by side, with exact answers: gpu_variants_session.sh)
# usage: bash benchmarks/gpu_expand_ablation.sh [ADS]
set -o pipefail
ADS=${1:-15000000}
source benchmarks/_device.sh
if [ ! -d /tmp/idx ]; then  # (an earlier script of the same call may have built it)
  build_index $ADS
  wait $BUILD || { tail -5 $OUT/build.log; exit 1; }
fi
P="python3 benchmarks/gpu_fused_profile.py --index /tmp/idx"
LP='sv[u] = c < deg ? bs + (lp_dtype == 0 ? lp32[lp0 + tk[u]] : load_lp(logprobs, lp_dtype, lp0 + tk[u])) : 0.0f;'
$P > $OUT/base.txt 2>&1; head -6 $OUT/base.txt
$P --sub "$LP=>sv[u] = c < deg ? bs - 0.001f * (float)(tk[u] & 1023) : 0.0f;" > $OUT/nolp.txt 2>&1; head -7 $OUT/nolp.txt
$P --sub "                        bin_add(S.cum, bn, lane, HPLAIN >= 1);
                    }=>                        (void)bn;
                    }" > $OUT/nobin.txt 2>&1; head -7 $OUT/nobin.txt
$P --sub "tk[u] = c < deg ? ct[c] : 0;=>tk[u] = c < deg ? (int)c : 0;" > $OUT/notok.txt 2>&1; head -7 $OUT/notok.txt
