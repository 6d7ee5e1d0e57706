// Block-wide building blocks of the GPU trie search (part of trie_search.cu, which includes it after its
// options and Smem): scans, warp appends, bitonic sorts, the radix select and the top-m. Every thread of the
// block calls them (they hold barriers). NVRTC: built-in types.
#pragma once

__device__ __forceinline__ u32 pow2_at_least(u32 n) {
    u32 p = 1;
    while (p < n) p <<= 1;
    return p;
}

// Exclusive prefix sum of x over the block; *total = the sum.
__device__ __forceinline__ u32 block_scan(u32 x, u32* warp, u32* total) {
    u32 lane = threadIdx.x & 31u, w = threadIdx.x >> 5;
    u32 inc = x;
    for (u32 d = 1; d < 32; d <<= 1) {
        u32 y = __shfl_up_sync(FULL, inc, d);
        if (lane >= d) inc += y;
    }
    if (lane == 31) warp[w] = inc;
    __syncthreads();
    if (w == 0) {
        u32 v = lane < NW ? warp[lane] : 0u;
        u32 vi = v;
        for (u32 d = 1; d < 32; d <<= 1) {
            u32 y = __shfl_up_sync(FULL, vi, d);
            if (lane >= d) vi += y;
        }
        if (lane < NW) warp[lane] = vi - v;
        if (lane == 31) warp[32] = vi;
    }
    __syncthreads();
    u32 r = warp[w] + inc - x;
    *total = warp[32];
    __syncthreads();  // warp[] is reused by the next call
    return r;
}

// This lane's position among the warp's lanes with pred set, from one atomicAdd on *counter per warp.
// Every lane of the warp calls it.
__device__ __forceinline__ u32 warp_append(bool pred, u32* counter) {
    u32 bal = __ballot_sync(FULL, pred);
    u32 lane = threadIdx.x & 31u;
    u32 base = 0;
    if (bal) {  // warp-uniform
        int leader = __ffs((int)bal) - 1;
        if ((int)lane == leader) base = atomicAdd(counter, (u32)__popc(bal));
        base = __shfl_sync(FULL, base, leader);
    }
    return base + (u32)__popc(bal & ((1u << lane) - 1u));
}

// warp_append for two lists at once, whose counters are the two halves of *counters (a's the low word, b's
// the high): one 64-bit atomicAdd a warp instead of two L2 round trips one after the other.
__device__ __forceinline__ void warp_append2(bool a, bool b, u64* counters, u32* pa, u32* pb) {
    const u32 ba = __ballot_sync(FULL, a), bb = __ballot_sync(FULL, b);
    const u32 lane = threadIdx.x & 31u;
    u64 base = 0;
    if (ba | bb) {  // warp-uniform
        const int leader = __ffs((int)(ba | bb)) - 1;
        if ((int)lane == leader) base = atomicAdd(counters, ((u64)__popc(bb) << 32) | (u64)__popc(ba));
        base = __shfl_sync(FULL, base, leader);
    }
    const u32 below = (1u << lane) - 1u;
    *pa = (u32)base + (u32)__popc(ba & below);
    *pb = (u32)(base >> 32) + (u32)__popc(bb & below);
}


// Bitonic sort of a[0, n2) descending, n2 a power of two; a in shared or global memory. A stage of
// stride j <= 32 keeps each warp inside its own 64-key blocks (pair i touches keys of block i >> 5), so
// between two such stages a warp barrier suffices.
__device__ __forceinline__ void block_sort_desc(u64* a, u32 n2) {
    __syncthreads();
    for (u32 k = 2; k <= n2; k <<= 1) {
        for (u32 j = k >> 1; j > 0; j >>= 1) {
            for (u32 i = threadIdx.x; i < (n2 >> 1); i += NT) {
                u32 lo = ((i & ~(j - 1u)) << 1) | (i & (j - 1u));
                u32 hi = lo + j;
                u64 x = a[lo], y = a[hi];
                bool desc = (lo & k) == 0;
                if (desc ? x < y : x > y) { a[lo] = y; a[hi] = x; }
            }
            u32 next = j > 1 ? j >> 1 : k;  // stride of the next stage (the next k starts at stride k)
            if (j >= 64 || next >= 64) __syncthreads(); else __syncwarp();
        }
    }
    __syncthreads();
}

// The same sort for n2 <= NT when a has room for 2 * n2 keys: thread i keeps key i in a register;
// stages of stride < 32 swap through warp shuffles (no memory, no barrier), wider ones through a,
// alternating between a[0, n2) and a[n2, 2 n2) so that one barrier a stage suffices (a stage's writes
// go to the half that no thread can still be reading). Half the barriers and no shared-memory traffic
// for the narrow stages, which are most of them.
__device__ __forceinline__ void block_sort_desc_reg(u64* a, u32 n2) {
    __syncthreads();  // a[0, n2) is written
    const u32 i = threadIdx.x;
    u64 x = i < n2 ? a[i] : 0ull;
    u32 half = 0;
    for (u32 k = 2; k <= n2; k <<= 1) {
        for (u32 j = k >> 1; j > 0; j >>= 1) {
            u64 y;
            if (j >= 32) {  // block-uniform
                u64* buf = a + half * n2;
                if (i < n2) buf[i] = x;
                __syncthreads();
                y = i < n2 ? buf[i ^ j] : 0ull;
                half ^= 1u;
            } else {  // lanes >= n2 (n2 < 32) only meet each other: i ^ j < n2 iff i < n2
                y = __shfl_xor_sync(FULL, x, j);
            }
            bool keep_max = ((i & j) == 0) == ((i & k) == 0);  // lower of a descending pair, or upper
            x = keep_max ? (x > y ? x : y) : (x < y ? x : y);  // of an ascending one
        }
    }
    __syncthreads();  // the last wide stage's reads are done
    if (i < n2) a[i] = x;
    __syncthreads();
}

// The m-th largest of the n distinct keys a[0, n), 1 <= m <= n: 8-bit digits from the top, stopping at
// the first digit whose bucket holds exactly the keys still needed. -> the smallest value of that
// bucket's range, so exactly m keys are >= the result. The first SEL_CAP keys are copied to shared
// memory first, four loads in flight a thread, and every pass reads them there (each pass from global
// memory was an L2 round trip per NT keys). A thread reads back only the entries it copied.
__device__ __forceinline__ u64 block_select(const u64* a, u32 n, u32 m, Smem& s) {
    const u32 lim = n < SEL_CAP ? n : SEL_CAP;
    for (u32 b0 = threadIdx.x; b0 < lim; b0 += 4 * NT) {
        u64 x[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) x[u] = b0 + u * NT < lim ? LDCG(a + b0 + u * NT) : 0ull;
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (b0 + u * NT < lim) s.sel[b0 + u * NT] = x[u];
    }
    u64 prefix = 0, fixed = 0;
    u32 need = m;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (u32 i = threadIdx.x; i < 256; i += NT) s.hist[i] = 0;
        __syncthreads();
        for (u32 i = threadIdx.x; i < n; i += NT) {
            const u64 x = i < SEL_CAP ? s.sel[i] : LDCG(a + i);
            if ((x & fixed) == prefix) atomicAdd(&s.hist[(x >> shift) & 255ull], 1u);
        }
        __syncthreads();
        u32 carry = 0;  // keys in buckets above the ones scanned so far (buckets from 255 down)
        for (u32 base = 0; base < 256; base += NT) {
            u32 idx = base + threadIdx.x;
            u32 c = idx < 256 ? s.hist[255 - idx] : 0u;
            u32 tot;
            u32 above = carry + block_scan(c, s.warp, &tot);
            if (idx < 256 && c > 0 && above < need && above + c >= need) {
                s.misc[0] = 255 - idx;
                s.misc[1] = above;
                s.misc[2] = c;
            }
            carry += tot;
        }
        __syncthreads();
        u32 bin = s.misc[0], above = s.misc[1], cnt = s.misc[2];
        __syncthreads();  // misc is written again next round
        prefix |= (u64)bin << shift;
        fixed |= 255ull << shift;
        need -= above;
        if (cnt == need) break;  // always true at shift 0: keys are distinct
    }
    return prefix;
}

// The best min(n, cap) of the n distinct nonzero keys src[0, n), best first, in s.sort or in gbuf
// (room for pow2_at_least(cap) keys); -> where they are, *m_out = how many.
__device__ __forceinline__ const u64* block_top(const u64* src, u32 n, u32 cap, u64* gbuf, Smem& s, u32* m_out) {
    u32 m = n < cap ? n : cap;
    *m_out = m;
    u64* buf;
    u32 n2;
    if (n <= SORT_CAP) {
        n2 = pow2_at_least(n);
        buf = s.sort;
        for (u32 i = threadIdx.x; i < n2; i += NT) buf[i] = i < n ? LDCG(src + i) : 0ull;
    } else {
        u64 tau = m < n ? block_select(src, n, m, s) : 0ull;
        PROF_MARK(5);  // radix select
        n2 = pow2_at_least(m);
        buf = n2 <= SORT_CAP ? s.sort : gbuf;
        for (u32 i = threadIdx.x; i < n2; i += NT) buf[i] = 0ull;
        if (threadIdx.x == 0) s.misc[3] = 0;
        __syncthreads();
        for (u32 base = threadIdx.x & ~31u; base < n; base += NT) {
            u32 i = base + (threadIdx.x & 31u);
            u64 x = i < n ? LDCG(src + i) : 0ull;
            bool keep = i < n && x >= tau;
            u32 pos = warp_append(keep, &s.misc[3]);
            if (keep) buf[pos] = x;
        }
    }
    PROF_MARK(6);  // copy / compaction
    if (n2 <= NT && buf == s.sort && 2 * n2 <= SORT_CAP) block_sort_desc_reg(buf, n2);
    else block_sort_desc(buf, n2);
    PROF_MARK(7);  // bitonic sort
    return buf;
}
