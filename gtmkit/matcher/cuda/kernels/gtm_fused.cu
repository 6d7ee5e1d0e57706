// The whole CD+GTM step with its top-k in ONE launch (Hopper, sm_90+): a thread block cluster of CL
// blocks per request; the blocks of a cluster merge histograms in each other's shared memory
// (distributed shared memory) and meet at hardware cluster barriers. NVRTC: built-in types only.
//
// Why: the multi-kernel step (gtm_step.cu) spends most of its time between its 13 launches. Here a
// request's candidates are expanded, binned by score, tested for GTM lazily, best bins first, and
// ranked without leaving the kernel, and a cluster is scheduled as a unit, so its barriers are safe
// for any number of requests.
//
// Candidate identity: i = row_local * D + c, where row_local is the row's index within its request,
// c the child's position in the node's CSR child list (children are sorted by token) and D the
// caller's bound on out-degrees. The composite (sortable(score) << 32) | (0xFFFFFFFF - i) orders
// candidates exactly by "score desc, parent row asc, token asc", and no two are equal.
//
// Phases (per cluster = per request b):
//  1 expand: each block takes every CL-th row of the request (so the best beams' candidates, which the
//    first rounds test, are spread over the blocks); its threads write the children's composites and
//    child nodes to the block's scratch region (compacted).
//  2 best score of the request (cluster max) -> score bins; candidate histogram merged (OWNER).
//  3 rounds: test GTM on the candidates of bins (lo, hi]; passers are appended to the block's list and
//    counted per bin (merged). After each barrier every block reads the same merged
//    counts and takes the same decision: stop at the first bin T where the passers of bins <= T reach
//    k, or widen the window by the pass rate seen so far (at least doubling). Every candidate above
//    the k-th passer has then been tested: the answer equals filter-then-top-k.
//  4 rank: passers of bins < T are all kept (fewer than k); bin T supplies the rest. Passers are
//    grouped by bin (counting sort through the merged fill counters); a passer's output position is
//    its bin's offset plus the number of larger composites in its bin. A crowded bin T (ties, or
//    everything below best - SPAN) is cut to exactly the needed count by a radix select first.
//
// The measured choices below (sizes, window, atomics) and their figures: benchmarks/results/kernel_choices.md.

#include "gtm_common.cuh"

// CL, NT, EU and GT_CAP may be overridden at compile time (the CPU emulation, tests/cuda/test_fused_emu.py,
// shrinks them so that small inputs reach every path); cuda/params.py's FUSED_* match the defaults.
#ifndef CL
#define CL 6            // blocks per request (cluster size)
#endif
#ifndef NT
#define NT 1024         // threads per block
#endif
#ifndef MINB
#define MINB 1          // blocks an SM must hold (launch bounds)
#endif
// 6 x 1024, one block an SM: the latency-bound step wants many threads a request, in clusters that fit one wave.
#define BPT (FB / NT)   // score bins per thread in the bin scans
#ifndef EU
#define EU 4            // candidates a thread handles per pass of the expand and list loops
#endif
// Wide rows (deep beams over dense levels) are expanded a warp per row: a batch of rows is wide from this mean
// out-degree on (a warp's lanes mostly busy) ...
#ifndef WEXP_MIN_DEG
#define WEXP_MIN_DEG 16
#endif
#ifndef WEXP_MIN_ROWS
#define WEXP_MIN_ROWS (NT / 32)  // ... and holds a row for every warp (one wide row: all threads on it)
#endif
#ifndef FIRST_WIN
// First GTM window, in multiples of k: 4 covers pass rates down to 1/4 in one round (a second round costs more).
#define FIRST_WIN 4
#endif
// -DPROFILE=1 (profiling tools only): the kernel writes phase timestamps and counts to prof (below)
#ifndef PROFILE
#define PROFILE 0
#endif
#define PROF_W 64       // profile slots a request (FUSED_PROF_W in cuda/params.py)
#define FB 2048         // score bins
#ifndef GT_CAP
#define GT_CAP 2048     // bin T ranked directly up to this many passers; a radix select beyond
#endif
#define RAD_PASSES 8    // 8-bit digits of a 64-bit composite
// The merged per-bin arrays (m_cand, m_pass, m_fill) are spread over the cluster: block OWNER(i) holds
// bin i, so the blocks' remote adds and loads land on CL shared memories, not all on block 0's.
// (i * CL / FB, not i / (FB / CL): any cluster size, not only divisors of FB)
#define OWNER(i) ((u32)(i) * (u32)CL / (u32)FB)

#ifndef GTMKIT_EMU  // the emulation defines these for threads on the CPU
// ---- cluster primitives (cluster_rank, cluster_sync and the distributed shared memory in cluster.cuh) --
#include "cluster.cuh"

// The two halves of cluster_sync, so that independent work can run between them.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }

#endif

// First bin > lo whose cumulative count reaches target (FB - 1 if none); cum is non-decreasing.
__device__ __forceinline__ int first_bin_f(const u32* cum, int lo, i64 target) {
    int a = lo + 1, z = FB - 1;
    while (a < z) { int m = (a + z) >> 1; if ((i64)cum[m] >= target) z = m; else a = m + 1; }
    return a;
}

__device__ __forceinline__ i64 node_at(const void* node_ids, int nid64, i64 r) {
    return nid64 ? ((const i64*)node_ids)[r] : (i64)((const int*)node_ids)[r];
}

#include "sparse_req.cuh"  // SparseReq

// counts[bn] += 1 for a lane with bn >= 0: one shared atomic a lane (a warp's bins are mostly distinct, so a
// __match_any_sync of equal bins first costs more than the conflicts it saves).
__device__ __forceinline__ void bin_add(u32* counts, int bn) {
    if (bn >= 0) atomicAdd(&counts[bn], 1u);
}

// A node's depth: from the level offsets in shared memory (S.lvl) when the trie has at most 16 levels.
#define NODE_DEPTH(n) (t.n_levels <= 16 ? depth_in(S.lvl, t.n_levels, (i64)(n)) : depth_of(t, (i64)(n)))

// The graphed beam search's token history (graph.py): output row `o` gets its parent's hist_t tokens
// (-1 for a padding row) and its own token, what beam.cu's reorder_history would do in a launch of its own.
__device__ __forceinline__ void write_history(const int* hist_in, int hist_t, int* hist_out, i64 o, i64 parent,
                                              int token) {
    int* h = hist_out + o * (hist_t + 1);
    for (int c = 0; c < hist_t; ++c) h[c] = parent >= 0 ? hist_in[parent * hist_t + c] : -1;
    h[hist_t] = token;
}

// Shared memory (dynamic; FB-sized arrays): FUSED_SMEM in cuda/params.py covers it.
struct Smem {
    u32 cum[FB];       // candidate histogram -> cumulative counts; after the rounds: pass offsets per bin
    u32 pcnt[FB];      // this block's passers per bin; after a round: the merged counts of its window
    u32 m_cand[FB];    // bins this block owns (OWNER): merged candidate histogram
    u32 m_pass[FB];    // bins this block owns: merged passers per bin
    u32 m_fill[FB];    // bins this block owns: fill counters of the grouping by bin
    u32 m_rad[RAD_PASSES][256];  // block 0: merged digit histograms of the radix select
    u32 l_rad[256];
    u32 warp_tot[32];
    i64 lvl[16];       // level offsets of the trie (depth of a node without global loads)
    u32 row_off[NT];   // expand: first child number of each row of the current batch
    i64 row_j0[NT];    // expand: first CSR child index of each row
    float warp_max[32];
    float s_top;
    u32 m_topn;        // block 0: fill counter of the radix-selected passers
    u32 n_cand, n_pass;  // this block's candidates and passers
    u32 n_work;        // this round's work list length
    int s_T, s_done;
    u32 s_next;        // expand, warp per row: the next row of the batch to take
    u32 s_wtot;
    i64 r_lo[2], r_hi[2];  // the request's rows are searched for in [lo, hi]
    // The request's GTM rows, non-zero words only (sparse_req.cuh): the same answers from ~3 divergent loads a
    // partition instead of ~19.
    SparseReq sp;
};

static_assert(sizeof(Smem) <= 64 * 1024, "FUSED_SMEM in cuda/params.py must cover Smem");
static_assert(FB % NT == 0 && NT % 32 == 0 && NT >= 256, "bin scans and the radix digits assume this");

// PDL (GraphedBeamSearch): the next kernel's blocks may be scheduled as soon as this one starts, and this one
// waits for the kernel before only once the request's rows are read and the shared arrays zeroed.
extern "C" __global__ void __cluster_dims__(CL, 1, 1) __launch_bounds__(NT, MINB)
fused_step_kernel(const i64* __restrict__ TP, const i64* __restrict__ QP, const void* node_ids, int nid64, const void* logprobs, int lp_dtype,
                  int V, const float* beam_scores, const i64* row_req, i64 R, int D, int k, int gtm, int count_all,
                  u64* __restrict__ cand, int* __restrict__ cand_child, u64* __restrict__ passed,
                  u64* __restrict__ grouped, u64* __restrict__ topsel,
                  int* out_parent, int* out_token, int* out_node, float* out_score, i64* out_count,
                  i64* prof, const i64* req_rows, const int* hist_in, int hist_t, int* hist_out,
                  int rows_best_first, int first_win) {
#ifdef GTMKIT_EMU
    unsigned char* smem_raw = emu_dyn_smem();
#else
    extern __shared__ __align__(16) unsigned char smem_raw[];
#endif
    Smem& S = *reinterpret_cast<Smem*>(smem_raw);
    GRID_DEP_LAUNCH();
    Trie t = load_trie(TP);
    if (!gtm && t.live) count_all = 1;
    Req q = load_req(QP);
    const u32 rank = cluster_rank();
    const int b = blockIdx.x / CL;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    // PROFILE: phase timestamps when prof is given, prof[b * PROF_W + i], ns; slots 32 + 4 * rank on (rank < 8):
    // that block's expand end, first-round test start and end, and first-round work list length
#if PROFILE && !defined(GTMKIT_EMU)
    #define STAMP(i) do { if (prof && rank == 0 && tid == 0) { u64 t_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); prof[b * PROF_W + (i)] = (i64)t_; } } while (0)
    #define BSTAMP(j) do { if (prof && rank < 8 && tid == 0) { u64 t_; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t_)); prof[b * PROF_W + 32 + 4 * rank + (j)] = (i64)t_; } } while (0)
#else
    #define STAMP(i) do { } while (0)
    #define BSTAMP(j) do { } while (0)
#endif
    STAMP(0);
#if PROFILE && !defined(GTMKIT_EMU)
    if (prof && tid == 0 && rank < 8) {  // which SM each block runs on: do clusters share SMs?
        u32 sm_;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(sm_));
        prof[b * PROF_W + 20 + rank] = (i64)sm_;
    }
#endif

    // rows of request b: [r0, r1), from req_rows [B + 1] when the caller has them (a fixed beam schedule:
    // one load), else r0 = the first row with row_req >= b, r1 the first >= b + 1 (row_req is
    // non-decreasing). All threads probe at once, NT rows a round (two rounds up to NT^2 rows), where one
    // thread's binary search would be a chain of log2(R) dependent loads.
    i64* s_lo = S.r_lo;
    i64* s_hi = S.r_hi;
    if (req_rows) {
        if (tid < 2) s_lo[tid] = req_rows[b + tid];
    } else {
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
    for (int i = tid; i < FB; i += NT) { S.cum[i] = 0; S.pcnt[i] = 0; S.m_cand[i] = 0; S.m_pass[i] = 0; S.m_fill[i] = 0; }
    for (int i = tid; i < RAD_PASSES * 256; i += NT) (&S.m_rad[0][0])[i] = 0;
    if (tid == 0) { S.m_topn = 0; S.n_cand = 0; S.n_pass = 0; }
    if (tid < t.n_levels && tid < 16) S.lvl[tid] = t.level_offsets[tid];
    __syncthreads();
    cluster_arrive();  // "my shared arrays are zeroed"; waited for just before the first remote add
    const i64 r0 = s_lo[0], r1 = s_lo[1];
    const int nrows = (int)(r1 - r0);
    // Scratch layout (cuda/backend.py sizes it): request b owns slots from (r0 + 2*CL*b) * D32 on,
    // CL block regions of (ceil(nrows/CL) + 1) * D32 slots each (D32 = D rounded up to 32).
    const i64 D32 = (i64)((D + 31) >> 5) * 32;
    const i64 cap_blk = (i64)((nrows + CL - 1) / CL + 1) * D32;
    const i64 req_base = (r0 + 2 * CL * (i64)b) * D32;
    const i64 blk_base = req_base + rank * cap_blk;
    u64* my_cand = cand + blk_base;            // this block's compacted candidates
    int* my_child = cand_child + blk_base;
    u64* my_pass = passed + blk_base;
    u64* grp = grouped + req_base;             // the request's passers grouped by bin (phase 4)
    u32* work = (u32*)(grouped + blk_base);    // this block's GTM work list (phase 3; same slots)

    // (PDL) every read and write below may touch an earlier kernel's data; the request's rows above are
    // GraphedBeamSearch's fixed schedule (written before its capture), the only launches made with PDL
    GRID_DEP_WAIT();

    // ---- 1 score bins: below the best live beam score ------------------------------------------
    // Log-probs are <= 0, so no candidate beats its row's beam score: the best live beam score bounds
    // the request's scores and the bins need no pass over the candidates first. (Scores above it,
    // from inputs that are not log-probs, share bin 0: still exact, only less lazy.)
    // Rows that come best first (rows_best_first: the graphed search hands each step the last one's ranked
    // output) have it in their first row when that row is live: one load instead of a pass over all rows. Any
    // top is exact (above it: bin 0), so a wrong flag costs laziness, never an answer.
    if (gtm) load_sparse_req(q, b, S.sp, tid, NT);  // (published by the barrier below)
    bool scan = true;
    if (rows_best_first) {
        if (tid == 0) {
            const i64 n = r1 > r0 ? node_at(node_ids, nid64, r0) : -1;
            const float v = r1 > r0 ? beam_scores[r0] : 0.0f;
            const bool ok = n >= 0 && n < t.n_internal && v == v;
            S.s_top = v;
            S.s_done = ok;
        }
        __syncthreads();
        scan = !S.s_done;  // (block-uniform) no live first row: the max over every row below
    }
    if (scan) {
        float mb = -__int_as_float(0x7f800000);
        for (i64 r = r0 + tid; r < r1; r += NT) {
            float v = beam_scores[r];  // loaded beside the node id, not after it
            i64 n = node_at(node_ids, nid64, r);
            if (n >= 0 && n < t.n_internal) mb = fmaxf(mb, v);
        }
        for (int o = 16; o > 0; o >>= 1) mb = fmaxf(mb, __shfl_xor_sync(0xffffffffu, mb, o));
        if (lane == 0) S.warp_max[warp] = mb;
        __syncthreads();
        if (warp == 0) {
            float v = lane < NT / 32 ? S.warp_max[lane] : -__int_as_float(0x7f800000);
            for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
            if (lane == 0) S.s_top = v;
        }
    }
    __syncthreads();
    const float top = S.s_top;
    STAMP(1);

    // ---- 2 expand: this block's rows, flattened over its threads ----------------------------------
    // Block `rank` takes every CL-th row (r0 + rank + CL * x, x < nmine): rows come best beam first, so
    // contiguous slices would hand block 0 most of the best bins' candidates, and every block would wait
    // at the cluster barriers for block 0's GTM tests. A block scan of the rows' out-degrees numbers
    // their children; thread f takes child f, finds its row by binary search in shared memory, and
    // writes the composite, the child and its bin count.
    const int nmine = nrows > (int)rank ? (nrows - (int)rank + CL - 1) / CL : 0;
    const float* lp32 = (const float*)logprobs;
    u32 nc = 0;
    for (int x0 = 0; x0 < nmine; x0 += NT) {
        const i64 q0 = r0 + rank + (i64)CL * x0;  // row of batch entry x: q0 + CL * x
        i64 r = q0 + (i64)CL * tid;
        u32 deg = 0;
        i64 j0 = 0;
        if (x0 + tid < nmine) {
            i64 n = node_at(node_ids, nid64, r);
            // (a caller's max_children below the node's out-degree: its first D children, within the scratch)
            if (n >= 0 && n < t.n_internal) {
                j0 = t.node_offsets[n];
                deg = min((u32)(t.node_offsets[n + 1] - j0), (u32)D);
            }
        }
        u32 incl = block_scan(deg, S.warp_tot);
        S.row_off[tid] = incl - deg;
        S.row_j0[tid] = j0;
        if (tid == NT - 1) S.s_wtot = incl;
        if (tid == 0) S.s_next = 0;
        __syncthreads();
        const u32 total = S.s_wtot;
        const int nr = nmine - x0 < NT ? nmine - x0 : NT;
        if (nr >= WEXP_MIN_ROWS && total >= (u32)WEXP_MIN_DEG * (u32)nr) {
            // Wide rows (deep beams over dense levels): a warp per row, taken from a shared counter, its
            // lanes on consecutive children, so no candidate searches for its row (the binary search below)
            // and the row's values are loaded once per warp.
            for (;;) {
                int x = 0;
                if (lane == 0) x = (int)atomicAdd(&S.s_next, 1u);
                x = __shfl_sync(0xffffffffu, x, 0);
                if (x >= nr) break;  // warp-uniform
                const u32 off = S.row_off[x];
                const u32 deg = (x + 1 < nr ? S.row_off[x + 1] : total) - off;
                const i64 j0 = S.row_j0[x];
                const i64 row = q0 + (i64)CL * x;
                const float bs = beam_scores[row];
                const u32 id0 = (u32)(row - r0) * (u32)D;
                const i64 lp0 = row * (i64)V;
                u64* oc = my_cand + nc + off;
                int* och = my_child + nc + off;
                const int* ct = t.child_tokens + j0;
                for (u32 c0 = 0; c0 < deg; c0 += EU * 32) {
                    int tk[EU];
                    float sv[EU];
#pragma unroll
                    for (int u = 0; u < EU; ++u) { u32 c = c0 + u * 32 + lane; tk[u] = c < deg ? ct[c] : 0; }
#pragma unroll
                    for (int u = 0; u < EU; ++u) {
                        u32 c = c0 + u * 32 + lane;
                        sv[u] = c < deg ? bs + (lp_dtype == 0 ? lp32[lp0 + tk[u]] : load_lp(logprobs, lp_dtype, lp0 + tk[u])) : 0.0f;
                    }
#pragma unroll
                    for (int u = 0; u < EU; ++u) {
                        u32 c = c0 + u * 32 + lane;
                        int bn = -1;
                        if (c < deg) {
                            u64 cc = candidate_key(sv[u], id0 + c);
                            oc[c] = cc;
                            och[c] = (int)(j0 + c + 1);
                            bn = bin_of<FB>(cc, top);
                        }
                        bin_add(S.cum, bn);
                    }
                }
            }
            nc += total;
            __syncthreads();  // row_off / row_j0 are rewritten by the next batch of rows
            continue;
        }
        // EU candidates a thread per pass, each phase's loads issued for all of them before any is
        // used: one candidate at a time would put a token load and a log-prob gather back to back on
        // the critical path of every candidate.
        for (u32 f0 = 0; f0 < total; f0 += EU * NT) {
            int xr[EU];
            i64 jj[EU];
            int tk[EU];
            float sv[EU];
#pragma unroll
            for (int u = 0; u < EU; ++u) {
                u32 f = f0 + u * NT + tid;
                int x0 = 0;
                if (f < total) {
                    int x1 = nr - 1;  // last row x with row_off[x] <= f: it holds child f
                    while (x0 < x1) { int m = (x0 + x1 + 1) >> 1; if (S.row_off[m] <= f) x0 = m; else x1 = m - 1; }
                }
                xr[u] = x0;
                jj[u] = S.row_j0[x0] + (f - S.row_off[x0]);
            }
#pragma unroll
            for (int u = 0; u < EU; ++u) tk[u] = f0 + u * NT + tid < total ? t.child_tokens[jj[u]] : 0;
#pragma unroll
            for (int u = 0; u < EU; ++u) {
                sv[u] = 0.0f;
                if (f0 + u * NT + tid < total) {
                    i64 row = q0 + (i64)CL * xr[u], at = row * (i64)V + tk[u];
                    sv[u] = beam_scores[row] + (lp_dtype == 0 ? lp32[at] : load_lp(logprobs, lp_dtype, at));
                }
            }
#pragma unroll
            for (int u = 0; u < EU; ++u) {
                u32 f = f0 + u * NT + tid;
                int bn = -1;
                if (f < total) {
                    u32 idx = (u32)(q0 + (i64)CL * xr[u] - r0) * (u32)D + (u32)(jj[u] - S.row_j0[xr[u]]);
                    u64 c = candidate_key(sv[u], idx);
                    my_cand[nc + f] = c;
                    my_child[nc + f] = (int)(jj[u] + 1);
                    bn = bin_of<FB>(c, top);
                }
                bin_add(S.cum, bn);
            }
        }
        nc += total;
        __syncthreads();  // row_off / row_j0 are rewritten by the next batch of rows
    }
    if (tid == 0) S.n_cand = nc;
    BSTAMP(0);
    cluster_wait();  // every block's arrays are zeroed before anyone adds to them
    for (int i = tid; i < FB; i += NT) if (S.cum[i]) dsm_add(remote(&S.m_cand[i], OWNER(i)), S.cum[i]);
    cluster_sync();
    {
        const int h0 = BPT * tid;  // this thread's bins
        u32 v[BPT], sum = 0;
#pragma unroll
        for (int x = 0; x < BPT; ++x) { v[x] = dsm_load(remote(&S.m_cand[h0 + x], OWNER(h0 + x))); sum += v[x]; }
        u32 acc = block_scan(sum, S.warp_tot) - sum;
#pragma unroll
        for (int x = 0; x < BPT; ++x) { acc += v[x]; S.cum[h0 + x] = acc; }
    }
    __syncthreads();
    const i64 C = S.cum[FB - 1];
    STAMP(2);
    int n_rounds = 0;

    // ---- 3 lazy GTM rounds -----------------------------------------------------------------------
    int lo = -1;
    // First window: k candidates suffice without GTM; with it, FIRST_WIN * k (a pass rate down to
    // 1 / FIRST_WIN in one round: the tests run side by side, so a wider first window costs little, a
    // second round a lot), or the caller's first_win candidates (> 0: a window sized from the pass rates
    // earlier searches saw; any size is exact, later rounds widen it).
    const i64 win = gtm ? (first_win > 0 ? (i64)first_win : FIRST_WIN * (i64)k) : (i64)k;
    int hi = (count_all || C == 0) ? FB - 1 : first_bin_f(S.cum, -1, win);
    i64 passed_lo = 0;  // passers in bins <= lo
    int T = FB - 1;
    for (;;) {
        // First list the window's candidates, then test them with every thread at once: testing in
        // the scan would leave one test's memory latency per scanned slice on the critical path.
        if (tid == 0) S.n_work = 0;
        __syncthreads();
        for (u32 base = 0; base < nc; base += EU * NT) {  // whole warps iterate together (ballots)
            u64 cv[EU];
#pragma unroll
            for (int u = 0; u < EU; ++u) cv[u] = base + u * NT + tid < nc ? my_cand[base + u * NT + tid] : 0ull;
#pragma unroll
            for (int u = 0; u < EU; ++u) {
                u32 i = base + u * NT + tid;
                bool in = false;
                if (i < nc) { int bn = bin_of<FB>(cv[u], top); in = bn > lo && bn <= hi; }
                unsigned ballot = __ballot_sync(0xffffffffu, in);
                if (ballot) {
                    u32 at = 0;
                    if (lane == 0) at = atomicAdd(&S.n_work, (u32)__popc(ballot));
                    at = __shfl_sync(0xffffffffu, at, 0);
                    if (in) work[at + __popc(ballot & ((1u << lane) - 1u))] = i;
                }
            }
        }
        __syncthreads();
        const u32 nw = S.n_work;
        if (n_rounds == 0) {
            STAMP(16);
            BSTAMP(1);
#if PROFILE
            if (prof && rank < 8 && tid == 0) prof[b * PROF_W + 35 + 4 * rank] = nw;
#endif
        }
        for (u32 base = 0; base < nw; base += NT) {
            u32 w = base + tid;
            bool pass = false;
            u64 c = 0;
            int bn = -1;
            if (w < nw) {
                u32 i = work[w];
                c = my_cand[i];
                bn = bin_of<FB>(c, top);
                i64 child = my_child[i];
                pass = cd_live(t, child) &&
                       (!gtm || (S.sp.ok ? node_passes_by(t, child, NODE_DEPTH(child), SparseTest{t, S.sp})
                                         : node_passes_fast(t, q, b, child, NODE_DEPTH(child))));
            }
            unsigned ballot = __ballot_sync(0xffffffffu, pass);
            if (ballot) {
                u32 at = 0;
                if (lane == 0) at = atomicAdd(&S.n_pass, (u32)__popc(ballot));
                at = __shfl_sync(0xffffffffu, at, 0);
                if (pass) my_pass[at + __popc(ballot & ((1u << lane) - 1u))] = c;
                bin_add(S.pcnt, pass ? bn : -1);
            }
        }
        __syncthreads();
        if (n_rounds == 0) { STAMP(17); BSTAMP(2); }
        for (int i = lo + 1 + tid; i <= hi; i += NT) if (S.pcnt[i]) dsm_add(remote(&S.m_pass[i], OWNER(i)), S.pcnt[i]);
        cluster_sync();
        if (n_rounds == 0) STAMP(18);
        // merged passers of the window, scanned: the first bin where the running total reaches k
        {
            const int h0 = BPT * tid;
            u32 v[BPT], sum = 0;
#pragma unroll
            for (int x = 0; x < BPT; ++x) {
                v[x] = 0;
                if (h0 + x > lo && h0 + x <= hi) v[x] = S.pcnt[h0 + x] = dsm_load(remote(&S.m_pass[h0 + x], OWNER(h0 + x)));
                sum += v[x];
            }
            u32 incl = block_scan(sum, S.warp_tot);
            i64 before = passed_lo + (incl - sum);
            if (tid == 0) S.s_T = -1;
            if (tid == NT - 1) S.s_wtot = incl;
            __syncthreads();
#pragma unroll
            for (int x = 0; x < BPT; ++x) {  // the one bin where the running total crosses k
                if (v[x] && before < k && before + v[x] >= k) S.s_T = h0 + x;
                before += v[x];
            }
            __syncthreads();
        }
        passed_lo += S.s_wtot;
        ++n_rounds;
        if (n_rounds <= 8) STAMP(2 + n_rounds);
        if (S.s_T >= 0) { T = S.s_T; break; }
        if (hi >= FB - 1) { T = FB - 1; break; }
        i64 seen = S.cum[hi];
        double rate = passed_lo > 0 ? (double)passed_lo / (double)seen : 1.0 / 64.0;
        i64 need = (i64)((double)(k - passed_lo) / rate * 1.25) + 1;
        i64 target = seen + (need > seen ? need : seen);
        lo = hi;
        hi = first_bin_f(S.cum, hi, target);
        __syncthreads();  // everyone has read s_T / s_wtot before the next round rewrites them
    }

    // ---- 4 rank the passers of bins <= T ---------------------------------------------------------
    // pass offsets per bin (exclusive scan over bins <= T) into cum
    {
        const int h0 = BPT * tid;
        u32 v[BPT], sum = 0;
#pragma unroll
        for (int x = 0; x < BPT; ++x) { v[x] = h0 + x <= T ? S.pcnt[h0 + x] : 0u; sum += v[x]; }
        u32 acc = block_scan(sum, S.warp_tot) - sum;
#pragma unroll
        for (int x = 0; x < BPT; ++x) { S.cum[h0 + x] = acc; acc += v[x]; }
    }
    __syncthreads();
    const u32 c_lt = S.cum[T];                 // passers in bins < T (< k unless T is the last bin)
    const u32 gT = S.pcnt[T];                  // passers in bin T
    const u32 total = c_lt + gT;
    const u32 n_out = total < (u32)k ? total : (u32)k;
    const u32 need_T = n_out > c_lt ? n_out - c_lt : 0u;  // passers bin T contributes
    const bool crowded = gT > need_T && gT > GT_CAP;
    const u32 np = S.n_pass;
    for (u32 base = 0; base < np; base += NT) {
        u32 i = base + tid;
        u64 c = i < np ? my_pass[i] : 0;
        int bn = i < np ? bin_of<FB>(c, top) : -1;
        if (bn > T) bn = -1;
        // one remote atomic a lane, as in bin_add; the order within a bin does not matter (ranked below)
        if (bn >= 0) grp[S.cum[bn] + dsm_fetch_add(remote(&S.m_fill[bn], OWNER(bn)), 1u)] = c;
    }
    cluster_sync();
    STAMP(11);
    const u32 gtid = rank * NT + tid, gstride = CL * NT;
    const i64 ob = (i64)b * k;
    // a passer -> the output slot at `pos`
    #define EMIT(c, pos)                                                                              \
        do {                                                                                          \
            u32 idx_ = 0xFFFFFFFFu - (u32)((c) & 0xFFFFFFFFull);                                      \
            i64 row_ = r0 + idx_ / (u32)D;                                                            \
            i64 j_ = t.node_offsets[node_at(node_ids, nid64, row_)] + idx_ % (u32)D;                  \
            const int tok_ = t.child_tokens[j_];                                                      \
            out_parent[ob + (pos)] = (int)row_;                                                       \
            out_token[ob + (pos)] = tok_;                                                             \
            out_node[ob + (pos)] = (int)(j_ + 1);                                                     \
            out_score[ob + (pos)] = unsortable((u32)((c) >> 32));                                     \
            if (hist_out) write_history(hist_in, hist_t, hist_out, ob + (pos), row_, tok_);           \
        } while (0)
    const u32 ranked = crowded ? c_lt : total;  // grouped entries ranked directly
    for (u32 s = gtid; s < ranked; s += gstride) {
        u64 c = grp[s];
        int bn = bin_of<FB>(c, top);
        u32 g0 = S.cum[bn], g1 = g0 + S.pcnt[bn], r = 0;
        for (u32 x = g0; x < g1; ++x) r += grp[x] > c;
        u32 pos = g0 + r;
        if (pos < n_out) EMIT(c, pos);
    }
    if (crowded) {
        // radix select: the need_T-th largest composite of bin T, 8 bits at a time from the top
        u64 prefix = 0, mask = 0;
        u32 want = need_T;
        const u64* gt = grp + c_lt;
        for (int p = 0; p < RAD_PASSES; ++p) {
            int sh = 56 - 8 * p;
            for (int i = tid; i < 256; i += NT) S.l_rad[i] = 0;
            __syncthreads();
            for (u32 x = gtid; x < gT; x += gstride) {
                u64 v = gt[x];
                if ((v & mask) == prefix) atomicAdd(&S.l_rad[(v >> sh) & 255ull], 1u);
            }
            __syncthreads();
            if (tid < 256 && S.l_rad[tid]) dsm_add(remote(&S.m_rad[p][tid], 0), S.l_rad[tid]);
            cluster_sync();
            // digits from high to low: suffix counts; the digit where they reach `want`
            if (tid < 256) S.l_rad[tid] = dsm_load(remote(&S.m_rad[p][255 - tid], 0));
            __syncthreads();
            if (tid < 32) {
                u32 acc = 0;
                int found = -1;
                u32 before = 0;
                for (int c0 = 0; c0 < 256 && found < 0; c0 += 32) {
                    u32 v = S.l_rad[c0 + lane], incl = v;
                    for (int o = 1; o < 32; o <<= 1) { u32 y = __shfl_up_sync(0xffffffffu, incl, o); if (lane >= o) incl += y; }
                    unsigned hit = __ballot_sync(0xffffffffu, acc + incl >= want);
                    if (hit) {
                        int l = __ffs(hit) - 1;
                        found = c0 + l;
                        before = acc + __shfl_sync(0xffffffffu, incl - v, l);
                    }
                    acc += __shfl_sync(0xffffffffu, incl, 31);
                }
                if (lane == 0) { S.s_T = 255 - found; S.s_wtot = want - before; }
            }
            __syncthreads();
            prefix |= (u64)S.s_T << sh;
            mask |= 255ull << sh;
            want = S.s_wtot;
            __syncthreads();
        }
        // prefix is now the need_T-th largest: exactly need_T composites of bin T are >= it
        for (u32 x = gtid; x < gT; x += gstride) {
            u64 v = gt[x];
            if (v >= prefix) topsel[ob + dsm_fetch_add(remote(&S.m_topn, 0), 1u)] = v;
        }
        cluster_sync();
        for (u32 s = gtid; s < need_T; s += gstride) {
            u64 c = topsel[ob + s];
            u32 r = 0;
            for (u32 x = 0; x < need_T; ++x) r += topsel[ob + x] > c;
            EMIT(c, c_lt + r);
        }
    }
    #undef EMIT
    for (u32 s = n_out + gtid; s < (u32)k; s += gstride) {
        out_parent[ob + s] = -1; out_token[ob + s] = -1; out_node[ob + s] = -1;
        out_score[ob + s] = -__int_as_float(0x7f800000);
        if (hist_out) write_history(hist_in, hist_t, hist_out, ob + s, -1, -1);
    }
    // count_all tests every bin (forced on without GTM once ads are paused: C would count dead children)
    if (rank == 0 && tid == 0) out_count[b] = !gtm && !t.live ? C : (count_all ? passed_lo : -1);
    STAMP(12);
#if PROFILE
    if (prof && rank == 0 && tid == 0) { prof[b * PROF_W + 13] = n_rounds; prof[b * PROF_W + 14] = crowded; prof[b * PROF_W + 15] = C; }
#endif
    cluster_sync();  // a block's shared memory must outlive every remote access to it
}
