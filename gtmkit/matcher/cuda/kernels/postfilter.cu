// Exact post-filter on the GPU: the SIDs a beam search returned, expanded to ads through the SID->ad
// map, keeping the ads whose targeting admits the request (docs/design.md §2, same test as
// gtmkit/targeting/exact.py). NVRTC: built-in types only.
//
// Not one block per request: eligibility is a chain of dependent loads (bitmask row, then binary searches
// in the Bloom attributes' code lists), so post_kernel spreads the SIDs' ads over the whole GPU, about one
// ad a thread, in one launch (below).

#include "gtm_common.cuh"

struct AdIndex {
    const i64* sid_ad_offsets; const i64* sid_ad_ids; const int* ad_bitmask;
    const i64* allow_off; const int* allow_codes; i64 allow_stride;
    const i64* excl_off; const int* excl_codes; i64 excl_stride; i64 n_ads; i64 n_sids;
};

__device__ __forceinline__ AdIndex load_ads(const i64* P) {
    AdIndex a;
    a.sid_ad_offsets = (const i64*)P[0]; a.sid_ad_ids = (const i64*)P[1]; a.ad_bitmask = (const int*)P[2];
    a.allow_off = (const i64*)P[3]; a.allow_codes = (const int*)P[4]; a.allow_stride = P[5];
    a.excl_off = (const i64*)P[6]; a.excl_codes = (const int*)P[7]; a.excl_stride = P[8]; a.n_ads = P[9];
    a.n_sids = P[10];
    return a;
}

// A paused ad never leaves the post-filter (docs/design.md §9): the live flag (TP[18]) and ad_active (AP[11]) read
// from the pointer tables at each use, uniform loads that L1 keeps (held in registers they spilled 40 bytes).
__device__ __forceinline__ bool ad_active(const i64* TP, const i64* AP, i64 r) {
    return !*(const int*)TP[18] || ((const unsigned char*)AP[11])[r];
}

// Whether any of the request's codes qc[c0, c1) (negative: none) is in the sorted list codes[lo, hi). Up to QL
// codes are searched side by side: the list is the same, so the halvings run in lockstep and their loads
// overlap (one search after another was the longest chain of the post-filter's dependent loads).
#define QL 4
__device__ bool any_in(const int* codes, i64 lo, i64 hi, const i64* qc, i64 c0, i64 c1) {
    if (hi <= lo) return false;
    for (i64 x0 = c0; x0 < c1; x0 += QL) {
        i64 c[QL], base[QL];
#pragma unroll
        for (int i = 0; i < QL; ++i) { c[i] = x0 + i < c1 ? qc[x0 + i] : -1; base[i] = lo; }
        for (i64 n = hi - lo; n > 1;) {  // invariant: a code's lower bound lies in [base, base + n]
            const i64 half = n >> 1;
#pragma unroll
            for (int i = 0; i < QL; ++i) base[i] = codes[base[i] + half] < c[i] ? base[i] + half : base[i];
            n -= half;
        }
#pragma unroll
        for (int i = 0; i < QL; ++i) {
            if (c[i] < 0) continue;
            if (codes[base[i]] == c[i] || (base[i] + 1 < hi && codes[base[i] + 1] == c[i])) return true;
        }
    }
    return false;
}

__device__ bool ad_eligible(const Trie& t, const Req& q, const AdIndex& ai, int b, i64 r) {
    const u64* row = t.bitmask_table + (i64)ai.ad_bitmask[r] * t.W;
    const u64* rq = q.bitmask + (i64)b * q.A * t.W;
    for (int a = 0; a < q.A; ++a) {
        u64 hit = 0;
        for (int w = 0; w < t.W; ++w) hit |= row[w] & rq[a * t.W + w];
        if (!hit) return false;
    }
    for (int k = 0; k < t.nb; ++k) {
        const i64* ao = ai.allow_off + k * (ai.n_ads + 1);
        const int* ac = ai.allow_codes + k * ai.allow_stride;
        const i64* eo = ai.excl_off + k * (ai.n_ads + 1);
        const int* ec = ai.excl_codes + k * ai.excl_stride;
        const i64 c0 = q.code_off[b * (t.nb + 1) + k], c1 = q.code_off[b * (t.nb + 1) + k + 1];
        const i64 a0 = ao[r], a1 = ao[r + 1], e0 = eo[r], e1 = eo[r + 1];  // (loaded side by side)
        if (a0 != a1 && !any_in(ac, a0, a1, q.codes, c0, c1)) return false;  // an allow list the request misses
        if (any_in(ec, e0, e1, q.codes, c0, c1)) return false;
    }
    return true;
}

// A block of AL threads a SID takes consecutive SIDs. Their ads are laid end to end and dealt to the block's
// threads in turn, so a thread tests about one ad whatever the SIDs' sizes: with AL lanes per SID, the SID with
// the most ads (~25 of them beside a median of 1 on the synth index) made its lanes test ~7 ads one after
// another, each a chain of dependent loads.
#define AL 4
// Leaves come as int64, or as int32 (leaves64 = 0) straight from the fused step's output nodes.
__device__ __forceinline__ i64 leaf_at(const void* leaves, int leaves64, i64 x) {
    return leaves64 ? ((const i64*)leaves)[x] : (i64)((const int*)leaves)[x];
}

// A block's SIDs x0 .. x0 + spb - 1 laid end to end (thread i < spb takes SID x0 + i; those from n_valid on,
// and -1 / non-leaf entries, have no ads): a0[i] = its first ad, start[i] = where its ads begin in the block's
// run, start[spb] = the run's length. An entry that is not a leaf id ([first_leaf, first_leaf + n_sids)) is
// padding, like -1. Every thread of the block calls it; it ends with a barrier.
__device__ __forceinline__ u32 lay_out_ads(const AdIndex& ai, const void* leaves, int leaves64, i64 first_leaf,
                                           i64 x0, int n_valid, int spb, i64* a0, u32* start, u32* warp_tot) {
    u32 n_ads = 0;
    if ((int)threadIdx.x < spb) {
        const i64 n = (int)threadIdx.x < n_valid ? leaf_at(leaves, leaves64, x0 + threadIdx.x) : -1;
        i64 first = 0;
        if ((u64)n - (u64)first_leaf < (u64)ai.n_sids) {  // (one compare: below first_leaf wraps around)
            first = ai.sid_ad_offsets[n - first_leaf];
            n_ads = (u32)(ai.sid_ad_offsets[n - first_leaf + 1] - first);
        }
        a0[threadIdx.x] = first;
    }
    const u32 incl = block_scan(n_ads, warp_tot);  // thread order: SID i's count sits at thread i < spb
    if ((int)threadIdx.x < spb) start[threadIdx.x] = incl - n_ads;
    if ((int)threadIdx.x == spb - 1) start[spb] = incl;
    __syncthreads();
    return start[spb];
}

// The SID whose ads hold position j of the run: start[s] <= j < start[s + 1] (SIDs without ads skipped).
__device__ __forceinline__ int sid_at(const u32* start, int spb, u32 j) {
    int lo = 0, hi = spb;
    while (hi - lo > 1) { const int mid = (lo + hi) >> 1; if (start[mid] <= j) lo = mid; else hi = mid; }
    return lo;
}

// ---- the post-filter in one launch --------------------------------------------------------------------
// A block takes SPB1 consecutive SIDs of one request (chunk c of its M / SPB1), tests their ads, publishes how
// many passed, adds up the counts the request's earlier chunks published (a decoupled look-back: every chunk
// publishes before it looks, so the looks overlap) and writes its ads at that offset: no second launch to
// scan the counts, none reloading them. Chunks are
// numbered in the order blocks start (a ticket), so a chunk waits only on chunks already running; the block
// that finishes last clears the tickets and the published counts for the next launch. state: u32 [2]
// (tickets, blocks done) and u64 [B * chunks] (published counts, bit 63 set), all zero between launches.
#define SPB1 32
#define NT1 (SPB1 * AL)
#define KEEP1 512     // the first KEEP1 ads of a block keep their verdict and id in shared memory
#define PUBLISHED (1ull << 63)

extern "C" __global__ void __launch_bounds__(NT1) post_kernel(
    const i64* __restrict__ TP, const i64* __restrict__ QP, const i64* __restrict__ AP, const void* leaves, int leaves64,
    int B, int M, i64 first_leaf, int exact, i64 cap_ads, i64* out_ads, int* out_rank, i64* out_n, u32* state,
    u64* published) {
    __shared__ u32 s_start[SPB1 + 1];
    __shared__ i64 s_a0[SPB1];
    __shared__ i64 s_id[KEEP1];
    __shared__ u32 s_ok[KEEP1 / 32];
    __shared__ u32 warp_tot[32];
    __shared__ u32 s_ticket, s_last;
    __shared__ i64 s_off;
    GRID_DEP_LAUNCH();
    Trie t = load_trie(TP);
    Req q = load_req(QP);
    AdIndex ai = load_ads(AP);
    GRID_DEP_WAIT();  // (PDL) the leaves are the last step's output
    const int tid = threadIdx.x;
    const u32 chunks = (u32)((M + SPB1 - 1) / SPB1), G = (u32)B * chunks;
    if (tid == 0) s_ticket = atomicAdd(state, 1u);
    if (tid < KEEP1 / 32) s_ok[tid] = 0;
    __syncthreads();
    const u32 vb = s_ticket;
    const int b = (int)(vb / chunks);
    const int m0 = (int)(vb % chunks) * SPB1;
    const i64 x0 = (i64)b * M + m0;
    const u32 total = lay_out_ads(ai, leaves, leaves64, first_leaf, x0, M - m0 < SPB1 ? M - m0 : SPB1, SPB1, s_a0,
                                  s_start, warp_tot);
    u32 passed = 0;
    for (u32 j = tid; j < total; j += NT1) {
        const int s = sid_at(s_start, SPB1, j);
        const i64 r = s_a0[s] + (j - s_start[s]);
        const i64 id = ai.sid_ad_ids[r];  // (loaded beside the test, used after it)
        const bool ok = ad_active(TP, AP, r) && (!exact || ad_eligible(t, q, ai, b, r));
        passed += ok;
        if (j < KEEP1) {
            s_id[j] = id;
            if (ok) atomicOr(&s_ok[j >> 5], 1u << (j & 31));
        }
    }
    block_scan(passed, warp_tot);  // (the total only: it leaves the warps' inclusive totals in warp_tot)
    const u32 mine = warp_tot[NT1 / 32 - 1];
    // publish, then look back: chunks c' < c of request b (already running: smaller tickets)
    const u32 c = vb % chunks;
    if (tid == 0) atomicExch(&published[vb], PUBLISHED | (u64)mine);
    u64 before = 0;
    for (u32 i = tid; i < c; i += NT1) {
        u64 v;
        while (!((v = atomicAdd(&published[vb - c + i], 0ull)) & PUBLISHED)) {
        }
        before += v & ~PUBLISHED;
    }
    for (int o = 16; o > 0; o >>= 1) before += __shfl_xor_sync(0xffffffffu, before, o);
    __shared__ u64 s_before[NT1 / 32];
    if ((tid & 31) == 0) s_before[tid >> 5] = before;
    __syncthreads();
    if (tid == 0) {
        i64 off = 0;
        for (int w = 0; w < NT1 / 32; ++w) off += (i64)s_before[w];
        s_off = off;
    }
    __syncthreads();
    // write, in ad order: the ads of round base.. at offset + their rank among this block's passers
    i64 pos0 = s_off;
    for (u32 base = 0; base < total; base += NT1) {
        const u32 j = base + tid;
        bool ok = false;
        i64 id = 0;
        int m = 0;
        if (j < total) {
            const int s = sid_at(s_start, SPB1, j);
            m = m0 + s;
            if (j < KEEP1) {
                ok = (s_ok[j >> 5] >> (j & 31)) & 1u;
                id = s_id[j];
            } else {  // past what shared memory keeps: tested again
                const i64 r = s_a0[s] + (j - s_start[s]);
                ok = ad_active(TP, AP, r) && (!exact || ad_eligible(t, q, ai, b, r));
                id = ai.sid_ad_ids[r];
            }
        }
        const u32 rank = block_scan(ok ? 1u : 0u, warp_tot);
        const u32 round_n = warp_tot[NT1 / 32 - 1];
        __syncthreads();  // all have read round_n before the next round's scan writes warp_tot
        if (ok) {
            const i64 pos = pos0 + rank - 1;
            if (pos < cap_ads) { out_ads[(i64)b * cap_ads + pos] = id; out_rank[(i64)b * cap_ads + pos] = m; }
        }
        pos0 += round_n;
    }
    if (c == chunks - 1 && tid == 0) out_n[b] = pos0;
    // the last block to finish leaves the state zeroed for the next launch
    __syncthreads();
    if (tid == 0) {
        __threadfence();
        s_last = atomicAdd(state + 1, 1u) == G - 1;
    }
    __syncthreads();
    if (s_last) {
        for (u32 i = tid; i < G; i += NT1) published[i] = 0;
        if (tid == 0) { state[0] = 0; state[1] = 0; }
    }
}
