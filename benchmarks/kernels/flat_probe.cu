// Probe, benchmarks only (benchmarks/probe_flat_step.py): a CD+GTM step's expand and first GTM round spread
// flat over the whole GPU, to measure what a step not tied to one cluster per request would cost.
//
// Why: the fused step (gtmkit/matcher/kernels/gtm_fused.cu) gives each request one cluster of 6 SMs, so at depth 3
// the request with the most candidates (2.5x the median) sets the step's span, and 36 SMs idle. Here every
// kernel splits the batch's candidates evenly over all blocks, whatever request they belong to:
//   flat_scan    one block: each row's first candidate number (an exclusive scan of out-degrees) and first child
//   flat_expand  equal candidate ranges a block: composites, child nodes, per-request score histograms
//   flat_plan    a block a request: the first bin whose cumulative count reaches the window
//   flat_list    the window's candidates listed per request (grid-stride over all composites)
//   flat_test    one listed candidate a thread over the concatenated lists: GTM tests, passers appended to their
//                request's list (the window's candidates crowd in the best rows, so the tests need the list)
//   flat_rank    a block a request: its passers sorted, the first k written
// Not here: a second GTM round for a request whose window held fewer than k passers (the probe counts them).
// NVRTC: built-in types only.

#include "gtm_common.cuh"
#include "sparse_req.cuh"

#ifndef NT
#define NT 512          // threads a block (flat_expand, flat_test)
#endif
#ifndef EU
#define EU 8            // candidates a thread has in flight a pass
#endif
#define FB 2048         // score bins, as the fused step's
#ifndef TEU
#define TEU 4           // warp chunks a thread has in flight in flat_test
#endif
#ifndef TMINB
#define TMINB 2         // flat_test blocks an SM must hold (launch bounds: 64 registers at 512 threads)
#endif
#ifndef RNT
#define RNT 1024        // threads of a flat_rank block
#endif
#ifndef RCAP
#define RCAP 4096       // passers flat_rank sorts in shared memory
#endif
#define MAXB 64         // requests a launch
#define CAPR NT         // rows staged in shared memory at a time (flat_expand)
static_assert(NT >= 64 && NT % 32 == 0, "flat_expand searches its rows with warps 0 and 1");
#ifndef SNT
#define SNT 1024        // threads of flat_scan's one block
#endif
#ifndef SCAN_PER
#define SCAN_PER 16     // rows a thread in flat_scan (R <= SNT * SCAN_PER)
#endif
#ifndef PNT
#define PNT 1024        // threads of a flat_plan block
#endif
#define SP_B 16         // requests whose sparse images flat_test keeps in shared memory (more: the full test)

// Last index x in [0, n) with a[x] <= v (a non-decreasing, a[0] <= v).
__device__ __forceinline__ int last_le(const u32* a, int n, u32 v) {
    int lo = 0, hi = n - 1;
    while (lo < hi) { int m = (lo + hi + 1) >> 1; if (a[m] <= v) lo = m; else hi = m - 1; }
    return lo;
}

__device__ __forceinline__ int last_le64(const i64* a, int n, i64 v) {
    int lo = 0, hi = n - 1;
    while (lo < hi) { int m = (lo + hi + 1) >> 1; if (a[m] <= v) lo = m; else hi = m - 1; }
    return lo;
}

// One block of SNT threads, R <= SNT * SCAN_PER: row_start[r] (exclusive scan of out-degrees, row_start[R] the
// total) and row_j0[r] (first CSR child). Each thread's rows are loaded together (one chain, not SCAN_PER).
extern "C" __global__ void __launch_bounds__(SNT) flat_scan(const i64* TP, const i64* node_ids, i64 R,
                                                              u32* row_start, i64* row_j0) {
    __shared__ u32 wt[32];
    Trie t = load_trie(TP);
    const i64 a = (i64)threadIdx.x * SCAN_PER;
    i64 n[SCAN_PER], j0[SCAN_PER];
    u32 d[SCAN_PER];
#pragma unroll
    for (int i = 0; i < SCAN_PER; ++i) n[i] = a + i < R ? node_ids[a + i] : -1;
#pragma unroll
    for (int i = 0; i < SCAN_PER; ++i) {
        const bool ok = n[i] >= 0 && n[i] < t.n_internal;
        j0[i] = ok ? t.node_offsets[n[i]] : 0;
        d[i] = ok ? (u32)(t.node_offsets[n[i] + 1] - j0[i]) : 0u;
    }
    u32 s = 0;
#pragma unroll
    for (int i = 0; i < SCAN_PER; ++i) s += d[i];
    const u32 incl = block_scan(s, wt);
    u32 acc = incl - s;
#pragma unroll
    for (int i = 0; i < SCAN_PER; ++i) {
        if (a + i < R) { row_start[a + i] = acc; row_j0[a + i] = j0[i]; }
        acc += d[i];
    }
    if (threadIdx.x == SNT - 1) row_start[R] = incl;
}

// First index in [0, n] with a[i] > v (a non-decreasing, a[n] > v), by one warp: its 32 lanes probe evenly spaced
// entries and the count of those <= v narrows the range 32-fold a round (3 rounds for 16k rows).
__device__ i64 warp_upper(const u32* a, i64 n, u32 v, int lane) {
    i64 lo = 0, hi = n;  // the answer lies in [lo, hi]
    while (lo < hi) {    // warp-uniform
        const i64 st = (hi - lo + 31) / 32, p = lo + lane * st;
        const int c = __popc(__ballot_sync(0xffffffffu, p < hi && a[p] <= v));  // the first c probes are <= v
        const i64 cut = lo + c * st;
        if (c == 0) hi = lo;
        else { lo += (c - 1) * st + 1; if (cut < hi) hi = cut; }
    }
    return lo;
}

// Block g takes candidates [g * per, (g + 1) * per) of the batch's T (flat order: rows in order, children in
// CSR order). Writes cand[f] (composite: score, number row_local * D + c within the request) and cand_child[f]
// (child node), and adds every candidate to ghist[b * FB + bin] (bins below the request's first row's score, which
// is its best when rows come best first, as in the graphed search).
extern "C" __global__ void __launch_bounds__(NT) flat_expand(const i64* TP, const float* lp, int V,
                                                             const float* beam_scores, const i64* req_rows, int B,
                                                             i64 R, int D, const u32* row_start, const i64* row_j0,
                                                             u64* cand, int* cand_child, u32* ghist) {
    __shared__ u32 hA[FB], hB[FB];
    __shared__ u32 s_start[CAPR + 1];
    __shared__ i64 s_j0[CAPR];
    __shared__ float s_bs[CAPR];
    __shared__ int s_b[CAPR];
    __shared__ i64 s_rr[MAXB + 1];
    __shared__ float s_top[MAXB];
    __shared__ i64 s_row[2];
    const int tid = threadIdx.x;
    Trie t = load_trie(TP);
    const u32 T = row_start[R];
    const u32 per = (T + gridDim.x - 1) / gridDim.x;
    const u32 g0 = min((u32)blockIdx.x * per, T), g1 = min(g0 + per, T);
    if (g0 >= g1) return;  // block-uniform
    for (int i = tid; i <= B; i += NT) s_rr[i] = req_rows[i];
    for (int i = tid; i < FB; i += NT) { hA[i] = 0; hB[i] = 0; }
    __syncthreads();
    for (int i = tid; i < B; i += NT) s_top[i] = s_rr[i + 1] > s_rr[i] ? beam_scores[s_rr[i]] : 0.0f;
    if (tid < 64) {  // warps 0 and 1: the rows holding candidates g0 and g1 - 1
        const i64 r = warp_upper(row_start, R, tid < 32 ? g0 : g1 - 1, tid & 31) - 1;
        if ((tid & 31) == 0) s_row[tid >> 5] = r;
    }
    __syncthreads();
    const i64 ra = s_row[0], rb = s_row[1];
    const int bA = last_le64(s_rr, B + 1, ra);
    for (i64 c0 = ra; c0 <= rb; c0 += CAPR) {
        const int n = rb - c0 + 1 < CAPR ? (int)(rb - c0 + 1) : CAPR;
        __syncthreads();  // the last chunk's rows are no longer read
        if (tid < n) {
            const i64 r = c0 + tid;
            s_start[tid] = row_start[r];
            s_j0[tid] = row_j0[r];
            s_bs[tid] = beam_scores[r];
            s_b[tid] = last_le64(s_rr, B + 1, r);
        }
        if (tid == 0) s_start[n] = row_start[c0 + n];
        __syncthreads();
        const u32 fa = max(g0, s_start[0]), fb = min(g1, s_start[n]);
        for (u32 f0 = fa; f0 < fb; f0 += EU * NT) {  // each phase's loads issued for all EU candidates first
            int xr[EU], tk[EU];  // row in the chunk, child token
            i64 jj[EU];          // CSR child index
            float sv[EU];        // score
#pragma unroll
            for (int u = 0; u < EU; ++u) {
                const u32 f = f0 + u * NT + tid;
                xr[u] = f < fb ? last_le(s_start, n, f) : 0;
                jj[u] = s_j0[xr[u]] + (f - s_start[xr[u]]);
            }
#pragma unroll
            for (int u = 0; u < EU; ++u) tk[u] = f0 + u * NT + tid < fb ? t.child_tokens[jj[u]] : 0;
#pragma unroll
            for (int u = 0; u < EU; ++u)
                sv[u] = f0 + u * NT + tid < fb ? s_bs[xr[u]] + lp[(c0 + xr[u]) * (i64)V + tk[u]] : 0.0f;
#pragma unroll
            for (int u = 0; u < EU; ++u) {
                const u32 f = f0 + u * NT + tid;
                if (f >= fb) continue;
                const int x = xr[u], b = s_b[x];
                const u32 c = f - s_start[x];
                const u64 key = candidate_key(sv[u], (u32)(c0 + x - s_rr[b]) * (u32)D + c);
                cand[f] = key;
                cand_child[f] = (int)(jj[u] + 1);
                const int bn = bin_of<FB>(key, s_top[b]);
                if (b == bA) atomicAdd(&hA[bn], 1u);
                else if (b == bA + 1) atomicAdd(&hB[bn], 1u);
                else atomicAdd(&ghist[(i64)b * FB + bn], 1u);
            }
        }
    }
    __syncthreads();
    for (int i = tid; i < FB; i += NT) {
        if (hA[i]) atomicAdd(&ghist[(i64)bA * FB + i], hA[i]);
        if (hB[i] && bA + 1 < B) atomicAdd(&ghist[(i64)(bA + 1) * FB + i], hB[i]);
    }
}

// Block b (PNT threads, FB / PNT bins each): thr[b] = the first bin whose cumulative count reaches win (FB - 1
// if none); request b's list counters zeroed for flat_list and flat_test (no memset launches).
extern "C" __global__ void __launch_bounds__(PNT) flat_plan(const u32* ghist, int win, int* thr, u32* nwork,
                                                            u32* npass) {
    __shared__ u32 wt[32];
    __shared__ int s_t;
    const int b = blockIdx.x, tid = threadIdx.x;
    const u32* h = ghist + (i64)b * FB + tid * (FB / PNT);
    u32 v[FB / PNT], sum = 0;
#pragma unroll
    for (int i = 0; i < FB / PNT; ++i) { v[i] = h[i]; sum += v[i]; }
    if (tid == 0) { s_t = FB - 1; nwork[b] = 0; npass[b] = 0; }
    u32 acc = block_scan(sum, wt) - sum;  // (its barriers publish s_t)
#pragma unroll
    for (int i = 0; i < FB / PNT; ++i) {
        if (acc < (u32)win && acc + v[i] >= (u32)win) s_t = tid * (FB / PNT) + i;
        acc += v[i];
    }
    __syncthreads();
    if (tid == 0) thr[b] = s_t;
}

// One warp's appends: lane adds item `v` to list b (b < 0: nothing) of lists[b * cap + ...], counted in n[b];
// one atomic a distinct list of the warp. Every lane of the warp must call it.
template <class T>
__device__ __forceinline__ void warp_append(int b, T v, T* lists, i64 cap, u32* n, int lane) {
    const unsigned same = __match_any_sync(0xffffffffu, b);
    const int leader = __ffs(same) - 1;
    u32 base = 0;
    if (b >= 0 && lane == leader) base = atomicAdd(&n[b], (u32)__popc(same));
    base = __shfl_sync(0xffffffffu, base, leader);
    const u32 pos = base + __popc(same & ((1u << lane) - 1));
    if (b >= 0 && pos < cap) lists[(i64)b * cap + pos] = v;  // (n[b] > cap tells the host)
}

// The window's candidates (bins <= thr[b]) listed per request: work[b * wcap + ...] = candidate number f.
// Grid-stride over all candidates in warp-contiguous runs (coalesced composites).
extern "C" __global__ void __launch_bounds__(NT) flat_list(const i64* req_rows, int B, const u32* row_start,
                                                           const u64* cand, const int* thr, const float* beam_scores,
                                                           u32* work, i64 wcap, u32* nwork) {
    __shared__ u32 s_rs[MAXB + 1];
    __shared__ float s_top[MAXB];
    __shared__ int s_thr[MAXB];
    const int tid = threadIdx.x, lane = tid & 31;
    for (int i = tid; i <= B; i += NT) {
        const i64 r = req_rows[i];
        s_rs[i] = row_start[r];
        if (i < B) { s_top[i] = req_rows[i + 1] > r ? beam_scores[r] : 0.0f; s_thr[i] = thr[i]; }
    }
    __syncthreads();
    const u32 T = s_rs[B], step = gridDim.x * NT * TEU;
    for (u32 f0 = blockIdx.x * NT * TEU + (tid >> 5) * 32 * TEU; f0 < T; f0 += step) {  // warp-uniform
        u64 key[TEU];
#pragma unroll
        for (int u = 0; u < TEU; ++u) { const u32 f = f0 + u * 32 + lane; key[u] = f < T ? cand[f] : 0ull; }
#pragma unroll
        for (int u = 0; u < TEU; ++u) {
            const u32 f = f0 + u * 32 + lane;
            int b = f < T ? last_le(s_rs, B + 1, f) : -1;
            if (b >= 0 && bin_of<FB>(key[u], s_top[b]) > s_thr[b]) b = -1;
            warp_append(b, (u32)f, work, wcap, nwork, lane);
        }
    }
}

// Every request's listed candidates, one a thread over the concatenated lists: GTM-tested (over the request's
// sparse image when it fits, as the fused step's SPT), passers' composites appended to passed[b * cap + ...].
extern "C" __global__ void __launch_bounds__(NT, TMINB) flat_test(const i64* TP, const i64* QP, int B,
                                                                  const u32* work, i64 wcap, const u32* nwork,
                                                                  const u64* cand, const int* cand_child,
                                                                  u64* passed, i64 cap, u32* npass) {
    __shared__ u32 s_wb[MAXB + 1];
    __shared__ i64 lvl[16];
    __shared__ SparseReq s_sp[SP_B];
    const int tid = threadIdx.x, lane = tid & 31;
    Trie t = load_trie(TP);
    Req q = load_req(QP);
    const bool spt = B <= SP_B;
    if (spt)
        for (int b = 0; b < B; ++b) load_sparse_req(q, b, s_sp[b], tid, NT);
    if (tid == 0) {
        u32 acc = 0;
        for (int b = 0; b < B; ++b) { s_wb[b] = acc; const u32 n = nwork[b]; acc += n < wcap ? n : (u32)wcap; }
        s_wb[B] = acc;
    }
    if (tid < t.n_levels && tid < 16) lvl[tid] = t.level_offsets[tid];
    __syncthreads();
    const u32 total = s_wb[B];
    for (u32 i0 = blockIdx.x * NT + (tid >> 5) * 32; i0 < total; i0 += gridDim.x * NT) {  // warp-uniform
        const u32 i = i0 + lane;
        int b = -1;
        u64 key = 0;
        bool pass = false;
        if (i < total) {
            b = last_le(s_wb, B + 1, i);
            const u32 f = work[(i64)b * wcap + (i - s_wb[b])];
            key = cand[f];
            const i64 node = cand_child[f];
            const int depth = t.n_levels <= 16 ? depth_in(lvl, t.n_levels, node) : depth_of(t, node);
            pass = spt && s_sp[b].ok ? node_passes_by(t, node, depth, SparseTest{t, s_sp[b]})
                                     : node_passes_fast(t, q, b, node, depth);
        }
        warp_append(pass ? b : -1, key, passed, cap, npass, lane);
    }
}

// Block b (RNT threads): request b's passers sorted (bitonic, descending, in shared memory) and its first k
// composites written to topk[b * k + ...]; out_n[b] = how many (-1: more than RCAP passers, not ranked here).
// Then request b's histogram is zeroed for the next step's flat_expand (no memset launch).
extern "C" __global__ void __launch_bounds__(RNT) flat_rank(const u64* passed, i64 cap, const u32* npass, int k,
                                                            u64* topk, int* out_n, u32* ghist) {
    __shared__ u64 v[RCAP];
    const int b = blockIdx.x, tid = threadIdx.x;
    for (int i = tid; i < FB; i += RNT) ghist[(i64)b * FB + i] = 0;
    const u32 n = npass[b];
    if (n > RCAP || n > cap) { if (tid == 0) out_n[b] = -1; return; }  // block-uniform
    u32 P = 1;
    while (P < n) P <<= 1;
    for (u32 i = tid; i < P; i += RNT) v[i] = i < n ? passed[(i64)b * cap + i] : 0ull;  // 0 ranks last
    __syncthreads();
    for (u32 size = 2; size <= P; size <<= 1) {
        for (u32 stride = size >> 1; stride > 0; stride >>= 1) {
            for (u32 x = tid; x < P / 2; x += RNT) {
                const u32 lo = 2 * x - (x & (stride - 1)), hi = lo + stride;  // pair (lo, hi), lo's bit `stride` clear
                const bool desc = (lo & size) == 0;
                const u64 a = v[lo], c = v[hi];
                if ((a < c) == desc) { v[lo] = c; v[hi] = a; }
            }
            __syncthreads();
        }
    }
    const u32 m = n < (u32)k ? n : (u32)k;
    for (u32 i = tid; i < m; i += RNT) topk[(i64)b * k + i] = v[i];
    if (tid == 0) out_n[b] = (int)m;
}
