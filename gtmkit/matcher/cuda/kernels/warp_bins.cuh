// A warp's histogram adds (gtm_fused.cu). NVRTC: built-in types only.
#pragma once

// counts[bn] += 1 for every lane with bn >= 0, one shared atomic per distinct bin of the warp (peaked
// scores pile into few bins). Every lane of the warp must call it.
__device__ __forceinline__ void warp_bin_add(unsigned int* counts, int bn, int lane) {
    unsigned same = __match_any_sync(0xffffffffu, bn);
    if (bn >= 0 && lane == __ffs(same) - 1) atomicAdd(&counts[bn], (unsigned int)__popc(same));
}

// counts[bn] += 1 for a lane with bn >= 0: one atomic a lane when `plain` (compile-time), else warp_bin_add (every
// lane of the warp must call it then). Plain wins when a warp's bins are mostly distinct (gtm_fused.cu, HPLAIN).
__device__ __forceinline__ void bin_add(unsigned int* counts, int bn, int lane, bool plain) {
    if (plain) { if (bn >= 0) atomicAdd(&counts[bn], 1u); }
    else warp_bin_add(counts, bn, lane);
}
