// Paused ads on the GPU (docs/design.md §9; the host form is gtmkit/matcher/live.py, both must agree): a pause or
// resume of n ads is two grid-stride launches over the ids, so 100k ads change without a host pass over them.
// NVRTC: built-in types only.

typedef long long i64;
typedef unsigned long long u64;

// rows[i] = the ad-level row of ids[i]: a binary search in the ascending ids sorted_ids[0, N), then rows_by_id
// at that place. An unknown id sets rows[i] = -1 and first_bad to the smallest such i (the host refuses the
// whole call before any change).
extern "C" __global__ void live_rows_kernel(const i64* __restrict__ ids, i64 n, const i64* __restrict__ sorted_ids,
                                            const int* __restrict__ rows_by_id, i64 N, i64* __restrict__ rows,
                                            u64* __restrict__ first_bad) {
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const i64 id = ids[i];
        i64 lo = 0, hi = N;
        while (lo < hi) {
            const i64 mid = (lo + hi) >> 1;
            if (sorted_ids[mid] < id) lo = mid + 1; else hi = mid;
        }
        if (lo < N && sorted_ids[lo] == id) {
            rows[i] = rows_by_id[lo];
        } else {
            rows[i] = -1;
            atomicMin(first_bad, (u64)i);
        }
    }
}

// The last index in [0, n) whose value is <= x, for ascending values with v[0] <= x.
__device__ __forceinline__ i64 last_at_most(const i64* __restrict__ v, i64 n, i64 x) {
    i64 lo = 0, hi = n;
    while (hi - lo > 1) {
        const i64 mid = (lo + hi) >> 1;
        if (v[mid] <= x) lo = mid; else hi = mid;
    }
    return lo;
}

// Each row set active (to_active) or paused; a row already so is left, once however often it is listed. A row
// whose flag flips adds +-1 to the live count of every node on its path: its SID's leaf (the SID whose ad range
// sid_ad_offsets holds it), then each parent (the internal node whose child slots node_offsets hold the node's
// slot, node - 1) up to the root. The flag is a byte: it flips by a compare-and-swap of its aligned word (the
// device array is allocated to a multiple of 4 bytes). changed counts the flips.
extern "C" __global__ void live_set_kernel(const i64* __restrict__ rows, i64 n, const i64* __restrict__ node_offsets,
                                           i64 n_internal, const i64* __restrict__ sid_ad_offsets, i64 num_sids,
                                           i64 first_leaf, unsigned char* active, int* counts, int to_active,
                                           u64* changed) {
    const unsigned want = to_active ? 1u : 0u;
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (i64)gridDim.x * blockDim.x) {
        const i64 r = rows[i];
        unsigned* word = (unsigned*)((u64)(active + r) & ~(u64)3);
        const unsigned shift = (unsigned)((u64)(active + r) & 3) * 8;
        unsigned old = *(volatile unsigned*)word;
        bool flipped = false;
        while (((old >> shift) & 0xffu ? 1u : 0u) != want) {
            const unsigned seen = atomicCAS(word, old, (old & ~(0xffu << shift)) | (want << shift));
            if (seen == old) { flipped = true; break; }
            old = seen;
        }
        if (!flipped) continue;
        atomicAdd(changed, 1ull);
        const int delta = to_active ? 1 : -1;
        i64 node = first_leaf + last_at_most(sid_ad_offsets, num_sids + 1, r);
        for (;;) {
            atomicAdd(counts + node, delta);
            if (node == 0) break;
            node = last_at_most(node_offsets, n_internal + 1, node - 1);
        }
    }
}
