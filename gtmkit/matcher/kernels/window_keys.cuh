// A GTM round's window as two bounds on the composites' high words (gtm_fused.cu, KWIN). NVRTC: built-in types only.
#pragma once

// The smallest sortable score key in [a, z) whose bin is <= bin_max (z if none), by a warp: bin_of is non-increasing
// in the key over the keys of non-NaN scores (the caller's [a, z)), so a round's 32 probes narrow the range 32-fold.
// Every lane of the warp calls it and gets the answer.
template <int NBINS>
__device__ __forceinline__ u32 warp_first_key(u32 a, u32 z, int bin_max, float top, int lane) {
    while (a < z) {  // warp-uniform
        const u64 n = (u64)(z - a);
        const u32 p = a + (u32)((n * (u64)lane) >> 5);  // probe 0 is a itself
        const unsigned bal = __ballot_sync(0xffffffffu, bin_of<NBINS>((u64)p << 32, top) <= bin_max);
        if (bal & 1u) return a;
        if (!bal) { a = a + (u32)((n * 31u) >> 5) + 1; continue; }  // after the last probe
        const int j = __ffs(bal) - 1;  // first probe inside; the answer lies in (probe j-1, probe j]
        z = a + (u32)((n * (u64)j) >> 5);
        a = a + (u32)((n * (u64)(j - 1)) >> 5) + 1;
    }
    return z;
}

