// The front of a large fused step (gtm_fused.cu) spread over the whole GPU, for steps with many rows of
// wide nodes. Included by gtm_fused.cu (CL, NT, EU, FB, FIRST_WIN, warp_bin_add, candidate_key are its).
//
// Why: in the one-launch step a request's candidates are expanded by its own cluster (CL of the SMs),
// so a step waits for the request with the most candidates (H200, depth 3: 187k against a 74k median,
// benchmarks/results/step_gpu_profile.md), and each round of GTM tests first scans all of them. Here
//  F0 front_info_kernel     (a block a request) finds the request's rows and best live beam score and
//                           clears its histogram;
//  F1 front_hist_kernel     (every SM, rows in contiguous slices) bins every candidate's score into the
//                           request's histogram; the block that merges a request's last rows finds the
//                           bin where FRONT_WIN * k candidates (CD only: k) are reached;
//  F2 front_collect_kernel  writes the candidates of bins up to that one, and only those, into the
//                           request's scratch in the stripes the cluster's blocks read (32-slot chunk c
//                           to block c % CL);
// and the cluster kernel then tests and ranks the collected ones. Should its rounds need bins beyond the
// collected ones (a pass rate below 1 / FRONT_WIN), each block expands its rows again for the rest.

#pragma once

#ifndef FRONT_WIN
#define FRONT_WIN 8     // candidates the front collects with GTM, in multiples of k (>= FIRST_WIN)
#endif
#ifndef FNT
#define FNT 512         // threads per block of F1 and F2
#endif
#if FRONT_WIN < FIRST_WIN
#error "FRONT_WIN must cover the cluster kernel's first window"
#endif

// The per-request record front[b * FR + ...] (int64).
#define FR 8
#define FR_R0 0         // the request's rows [r0, r1)
#define FR_R1 1
#define FR_TOP 2        // its best live beam score (float bits): the origin of its score bins
#define FR_WIN 3        // the last bin collected (every candidate of bins <= it is in the scratch)
#define FR_DONE 4       // rows whose histogram F1 has merged
#define FR_N 5          // candidates collected

// Rows of request b: [s_lo[0], s_lo[1]) (row_req is non-decreasing). All NT threads probe at once, NT rows
// a round (two rounds up to NT^2 rows): one thread's binary search was a chain of log2(R) dependent
// loads, ~7 us at R = 16384. Every thread of the block must call it.
__device__ void request_rows(const i64* row_req, i64 R, int b, i64* s_lo, i64* s_hi) {
    const int tid = threadIdx.x;
    if (tid < 2) { s_lo[tid] = 0; s_hi[tid] = R; }
    __syncthreads();
    for (;;) {
        i64 lo[2] = {s_lo[0], s_lo[1]}, hi[2] = {s_hi[0], s_hi[1]}, st[2];
        if (lo[0] == hi[0] && lo[1] == hi[1]) break;  // block-uniform
        int c[2];
#pragma unroll
        for (int w = 0; w < 2; ++w) {
            st[w] = (hi[w] - lo[w] + NT - 1) / NT;
            i64 pr = lo[w] + tid * st[w];
            c[w] = __syncthreads_count(pr < hi[w] && row_req[pr] < b + w);  // probes below the answer
        }
        if (tid == 0) {
#pragma unroll
            for (int w = 0; w < 2; ++w) {
                if (c[w] == 0) { s_hi[w] = lo[w]; continue; }  // row lo already reaches b + w
                i64 nh = lo[w] + c[w] * st[w];
                s_lo[w] = lo[w] + (c[w] - 1) * st[w] + 1;
                s_hi[w] = nh < hi[w] ? nh : hi[w];
            }
        }
        __syncthreads();
    }
}

// The best beam score over rows [r0, r1) that have children (every thread of the block gets it). Log-probs
// are <= 0, so no candidate beats its row's beam score: this bounds the request's scores, and the bins
// below it need no pass over the candidates first.
__device__ float request_top(const Trie& t, const void* node_ids, int nid64, const float* beam_scores, i64 r0,
                             i64 r1, float* warp_max, float* s_top) {
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    float mb = -__int_as_float(0x7f800000);
    for (i64 r = r0 + tid; r < r1; r += NT) {
        float v = beam_scores[r];  // loaded beside the node id, not after it
        i64 n = node_at(node_ids, nid64, r);
        if (n >= 0 && n < t.n_internal) mb = fmaxf(mb, v);
    }
    for (int o = 16; o > 0; o >>= 1) mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, o));
    if (lane == 0) warp_max[warp] = mb;
    __syncthreads();
    if (warp == 0) {
        float v = lane < NT / 32 ? warp_max[lane] : -__int_as_float(0x7f800000);
        for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) *s_top = v;
    }
    __syncthreads();
    return *s_top;
}

// Scratch layout of request b (backend_cuda.py sizes it): its slots start at (r0 + 2*CL*b) * D32, then
// CL block regions of (ceil(nrows/CL) + 1) * D32 slots each (D32 = D rounded up to 32).
__device__ __forceinline__ void request_region(i64 r0, i64 r1, int b, int D, i64* req_base, i64* cap_blk) {
    const i64 D32 = (i64)((D + 31) >> 5) * 32;
    *cap_blk = (i64)((r1 - r0 + CL - 1) / CL + 1) * D32;
    *req_base = (r0 + 2 * CL * (i64)b) * D32;
}

// Collected candidate number p -> its slot: chunk p / 32 goes to block (p / 32) % CL, which holds its
// chunks one after the other at the start of its region. A block's share of n collected is then
// stripe_count(n, rank) slots from its region's start, at most n / CL + 32 <= its region.
__device__ __forceinline__ i64 stripe_slot(i64 req_base, i64 cap_blk, u32 p) {
    const u32 c = p >> 5;
    return req_base + (i64)(c % CL) * cap_blk + (i64)(c / CL) * 32 + (p & 31u);
}

__device__ __forceinline__ u32 stripe_count(u32 n, u32 rank) {
    const u32 ch = n >> 5;
    return 32u * (ch / CL + (rank < ch % CL ? 1u : 0u)) + (rank == ch % CL ? (n & 31u) : 0u);
}

// F0: one block (NT threads) a request.
extern "C" __global__ void __launch_bounds__(NT, 1)
front_info_kernel(const i64* TP, const void* node_ids, int nid64, const float* beam_scores, const i64* row_req, i64 R,
                  i64* front, u32* hist) {
    __shared__ i64 s_lo[2], s_hi[2];
    __shared__ float warp_max[32], s_top;
    Trie t = load_trie(TP);
    const int b = blockIdx.x;
    request_rows(row_req, R, b, s_lo, s_hi);
    const i64 r0 = s_lo[0], r1 = s_lo[1];
    const float top = request_top(t, node_ids, nid64, beam_scores, r0, r1, warp_max, &s_top);
    for (int i = threadIdx.x; i < FB; i += NT) hist[(i64)b * FB + i] = 0;
    if (threadIdx.x == 0) {
        i64* f = front + (i64)b * FR;
        f[FR_R0] = r0;
        f[FR_R1] = r1;
        f[FR_TOP] = (i64)__float_as_uint(top);
        f[FR_WIN] = FB - 1;  // a request without rows (F1 never visits it) has nothing to collect
        f[FR_DONE] = 0;
        f[FR_N] = 0;
    }
}

// The contiguous slice of rows of block g of the front's grid, and within it the rows of one request at a
// time (segments; block-uniform): the body runs with b, [s0, s1) and the request's rows [rb0, rb1).
#define FOR_SEGMENTS(row_req, front, R, ...)                                                     \
    do {                                                                                          \
        const i64 g0_ = (R) * (i64)blockIdx.x / gridDim.x, g1_ = (R) * ((i64)blockIdx.x + 1) / gridDim.x; \
        for (i64 s0 = g0_; s0 < g1_;) {                                                           \
            const int b = (int)(row_req)[s0];                                                     \
            const i64 rb0 = (front)[(i64)b * FR + FR_R0], rb1 = (front)[(i64)b * FR + FR_R1];     \
            const i64 s1 = rb1 < g1_ ? rb1 : g1_;                                                 \
            __VA_ARGS__                                                                           \
            s0 = s1;                                                                              \
        }                                                                                         \
    } while (0)

// The children of row r, EU * 32 at a time by one warp (warp-uniform bounds: every lane reaches the
// body's warp intrinsics): the body runs per lane and child with c, valid and score.
#define FOR_ROW_CHILDREN(t, node_ids, nid64, logprobs, lp_dtype, V, beam_scores, r, j0, ...)     \
    do {                                                                                          \
        const i64 n_ = node_at(node_ids, nid64, r);                                               \
        u32 deg_ = 0;                                                                             \
        i64 j0 = 0;                                                                               \
        if (n_ >= 0 && n_ < (t).n_internal) { j0 = (t).node_offsets[n_]; deg_ = (u32)((t).node_offsets[n_ + 1] - j0); } \
        const float bs_ = deg_ ? (beam_scores)[r] : 0.0f;                                         \
        const i64 lp0_ = (r) * (i64)(V);                                                          \
        const int* ct_ = (t).child_tokens + j0;                                                   \
        for (u32 c0_ = 0; c0_ < deg_; c0_ += EU * 32) {                                           \
            int tk_[EU];                                                                          \
            float sv_[EU];                                                                        \
            _Pragma("unroll") for (int u = 0; u < EU; ++u) { u32 c = c0_ + u * 32 + lane; tk_[u] = c < deg_ ? ct_[c] : 0; } \
            _Pragma("unroll") for (int u = 0; u < EU; ++u) {                                      \
                u32 c = c0_ + u * 32 + lane;                                                      \
                sv_[u] = c < deg_ ? bs_ + load_lp(logprobs, lp_dtype, lp0_ + tk_[u]) : 0.0f;      \
            }                                                                                     \
            _Pragma("unroll") for (int u = 0; u < EU; ++u) {                                      \
                const u32 c = c0_ + u * 32 + lane;                                                \
                const bool valid = c < deg_;                                                      \
                const float score = sv_[u];                                                       \
                __VA_ARGS__                                                                       \
            }                                                                                     \
        }                                                                                         \
    } while (0)

// First bin whose count, summed from bin 0, reaches target (FB - 1 if none), over a request's histogram
// in global memory (other blocks' atomics: read through L2). Every thread of the FNT block gets it.
__device__ int hist_first_bin(const u32* h, i64 target, u32* warp_tot, int* s_bin) {
    const int tid = threadIdx.x, h0 = (FB / FNT) * tid;
    u32 v[FB / FNT], sum = 0;
#pragma unroll
    for (int x = 0; x < FB / FNT; ++x) { v[x] = __ldcg(h + h0 + x); sum += v[x]; }
    if (tid == 0) *s_bin = FB - 1;
    u32 acc = block_scan(sum, warp_tot) - sum;  // (its barriers order the store above)
#pragma unroll
    for (int x = 0; x < FB / FNT; ++x) {
        acc += v[x];
        if ((i64)acc >= target) { atomicMin(s_bin, h0 + x); break; }
    }
    __syncthreads();
    return *s_bin;
}

// F1: the score histogram of every request, and each request's collection window.
extern "C" __global__ void __launch_bounds__(FNT)
front_hist_kernel(const i64* TP, const void* node_ids, int nid64, const void* logprobs, int lp_dtype, int V,
                  const float* beam_scores, const i64* row_req, i64 R, int k, int gtm, int count_all, i64* front,
                  u32* hist) {
    __shared__ u32 sh[FB];
    __shared__ u32 warp_tot[32];
    __shared__ int s_bin, s_last;
    Trie t = load_trie(TP);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    for (int i = tid; i < FB; i += FNT) sh[i] = 0;
    __syncthreads();
    FOR_SEGMENTS(row_req, front, R, {
        const float top = __uint_as_float((u32)front[(i64)b * FR + FR_TOP]);
        for (i64 r = s0 + warp; r < s1; r += FNT / 32) {
            FOR_ROW_CHILDREN(t, node_ids, nid64, logprobs, lp_dtype, V, beam_scores, r, j0, {
                warp_bin_add(sh, valid ? bin_of<FB>(candidate_key(score, 0u), top) : -1, lane);
            });
        }
        __syncthreads();
        u32* hb = hist + (i64)b * FB;
        for (int i = tid; i < FB; i += FNT) { const u32 x = sh[i]; if (x) { atomicAdd(hb + i, x); sh[i] = 0; } }
        __threadfence();  // this block's counts are in before its rows are
        __syncthreads();
        if (tid == 0) {
            const u64 add = (u64)(s1 - s0);
            const u64 old = atomicAdd((unsigned long long*)(front + (i64)b * FR + FR_DONE), add);
            s_last = old + add == (u64)(rb1 - rb0);
        }
        __syncthreads();
        if (s_last) {  // every row of request b is counted: its window
            __threadfence();
            const i64 target = count_all ? ((i64)1 << 62) : gtm ? (i64)FRONT_WIN * k : (i64)k;
            const int win = hist_first_bin(hb, target, warp_tot, &s_bin);
            if (tid == 0) front[(i64)b * FR + FR_WIN] = win;
        }
    });
}

// F2: the candidates of every request's window into its scratch stripes.
extern "C" __global__ void __launch_bounds__(FNT)
front_collect_kernel(const i64* TP, const void* node_ids, int nid64, const void* logprobs, int lp_dtype, int V,
                     const float* beam_scores, const i64* row_req, i64 R, int D, i64* front,
                     u64* __restrict__ cand, int* __restrict__ cand_child) {
    Trie t = load_trie(TP);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    FOR_SEGMENTS(row_req, front, R, {
        const float top = __uint_as_float((u32)front[(i64)b * FR + FR_TOP]);
        const int win = (int)front[(i64)b * FR + FR_WIN];
        i64 req_base, cap_blk;
        request_region(rb0, rb1, b, D, &req_base, &cap_blk);
        unsigned long long* n_col = (unsigned long long*)(front + (i64)b * FR + FR_N);
        for (i64 r = s0 + warp; r < s1; r += FNT / 32) {
            const u32 id0 = (u32)(r - rb0) * (u32)D;
            FOR_ROW_CHILDREN(t, node_ids, nid64, logprobs, lp_dtype, V, beam_scores, r, j0, {
                const u64 key = candidate_key(score, id0 + c);
                const bool in = valid && bin_of<FB>(key, top) <= win;
                const unsigned ballot = __ballot_sync(0xffffffffu, in);
                if (ballot) {
                    u32 at = 0;
                    if (lane == 0) at = (u32)atomicAdd(n_col, (unsigned long long)__popc(ballot));
                    at = __shfl_sync(0xffffffffu, at, 0);
                    if (in) {
                        const i64 slot = stripe_slot(req_base, cap_blk, at + __popc(ballot & ((1u << lane) - 1u)));
                        cand[slot] = key;
                        cand_child[slot] = (int)(j0 + c + 1);
                    }
                }
            });
        }
    });
}
