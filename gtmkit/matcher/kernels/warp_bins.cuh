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

// The smallest v of the warp (every lane must call it).
__device__ __forceinline__ unsigned int warp_min_u32(unsigned int v) {
#ifdef GTMKIT_EMU
    return __reduce_min_sync(0xffffffffu, v);
#else
    unsigned int r;
    asm volatile("redux.sync.min.u32 %0, %1, 0xffffffff;" : "=r"(r) : "r"(v));
    return r;
#endif
}

// CSKIP (gtm_fused.cu): a warp's candidates sit in the consecutive slots base + lane (bn < 0: no candidate);
// cmin[s] keeps the best (smallest) bin of the 32-slot chunk s, so that a GTM round's listing can pass over the
// chunks that hold nothing in its window. The warp's slots span two chunks at most: two reductions and two
// shared atomics a warp, not one a lane (every lane of the warp must call it; base is warp-uniform).
__device__ __forceinline__ void chunk_note(unsigned int* cmin, unsigned int n_chunks, unsigned int base, int bn,
                                           int lane) {
    const unsigned int v = bn >= 0 ? (unsigned int)bn : 0xFFFFFFFFu, c0 = base >> 5;
    const bool first = ((base + (unsigned int)lane) >> 5) == c0;
    const unsigned int m0 = warp_min_u32(first ? v : 0xFFFFFFFFu), m1 = warp_min_u32(first ? 0xFFFFFFFFu : v);
    if (lane == 0 && m0 != 0xFFFFFFFFu && c0 < n_chunks) atomicMin(&cmin[c0], m0);
    if (lane == 1 && m1 != 0xFFFFFFFFu && c0 + 1 < n_chunks) atomicMin(&cmin[c0 + 1], m1);
}
