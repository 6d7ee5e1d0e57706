// CD+GTM step, token mask and exact post-filter for CuPy (NVRTC: built-in types only, no std headers).
//
// Candidates of request b live in cand[base[b] .. base[b] + count[b]) as 64-bit composites
//   (sortable(score) << 32) | (0xFFFFFFFF - i)
// where i is the candidate's index within the request in (row asc, token asc) order: ordering the
// composites descending is exactly "score desc, then parent row asc, then token asc", and no two
// are equal, so an exact k-th largest exists and selection needs no tie handling.

#define NB 4096            // linear score bins of the select kernel (best first)
#define SEL_CAP 2048       // most outputs a request can ask for (k <= SEL_CAP)
#define RADIX 2048
#include "gtm_common.cuh"
#include "sparse_req.cuh"

// GTM over the requests' SparseReq images. Why: the full test loads A x W request and table words a partition,
// and a Bloom row a signature; the image holds only the request's non-zero words (the same answer,
// sparse_req.cuh). Where the image did not fit (ok == 0), or there is none (a QP without one), the full test.
__device__ __forceinline__ bool gtm_passes(const Trie& t, const Req& q, int b, const SparseReq* sp, i64 node, int depth) {
    return sp && sp->ok ? node_passes_by(t, node, depth, SparseTest{t, *sp}) : node_passes_fast(t, q, b, node, depth);
}

// Request b's image in global memory: every thread of the request reads the same words, which L1 keeps.
__device__ __forceinline__ const SparseReq* sparse_of(const Req& q, int b) {
    return q.sparse ? reinterpret_cast<const SparseReq*>(q.sparse + (i64)b * (sizeof(SparseReq) / 8)) : nullptr;
}

// Request b's image in shared memory, for a block that serves request b alone (every thread calls it): the
// table rows' divergent loads cannot evict it there, which outweighs a round trip and a barrier a block.
__device__ __forceinline__ const SparseReq* block_sparse(const Req& q, int b, bool want) {
    __shared__ SparseReq sp;
    const bool use = want && q.sparse;
    if (use) load_sparse_req(q, b, sp, threadIdx.x, blockDim.x);
    __syncthreads();
    return use ? &sp : nullptr;
}

// Row r is live for request b when its node is internal and row_req[r] == b (so a row whose row_req is out of
// [0, B), or out of order on the device, where nothing checks it, is dead), and it contributes its first D
// children (D: the caller's bound on out-degrees, which sizes the candidate buffers).
__device__ __forceinline__ i64 live_degree(const Trie& t, const i64* node_ids, const i64* row_req, i64 r, i64 b, int D) {
    const i64 n = node_ids[r];
    if (n < 0 || n >= t.n_internal || row_req[r] != b) return 0;
    const i64 deg = t.node_offsets[n + 1] - t.node_offsets[n];
    return deg < D ? deg : D;
}

// One block per request: exclusive prefix sums of the live rows' child counts.
extern "C" __global__ void __launch_bounds__(1024) count_kernel(const i64* TP, const i64* node_ids, const i64* row_req,
                                        const i64* req_rows, int B, int D, i64* row_off, i64* cand_count) {
    __shared__ i64 part[1024];
    Trie t = load_trie(TP);
    int b = blockIdx.x;
    if (b >= B) return;
    i64 r0 = req_rows[b], r1 = req_rows[b + 1];
    i64 carry = 0;
    for (i64 base = r0; base < r1; base += blockDim.x) {
        i64 r = base + threadIdx.x;
        i64 deg = r < r1 ? live_degree(t, node_ids, row_req, r, b, D) : 0;
        part[threadIdx.x] = deg;
        __syncthreads();
        for (int s = 1; s < blockDim.x; s <<= 1) {  // Hillis-Steele inclusive scan
            i64 v = threadIdx.x >= s ? part[threadIdx.x - s] : 0;
            __syncthreads();
            part[threadIdx.x] += v;
            __syncthreads();
        }
        if (r < r1) row_off[r] = carry + part[threadIdx.x] - deg;
        i64 tot = part[blockDim.x - 1];
        __syncthreads();
        carry += tot;
    }
    if (threadIdx.x == 0) cand_count[b] = carry;
}

// Exclusive prefix of the per-request candidate counts: request b's candidates start at cand_base[b].
extern "C" __global__ void base_kernel(const i64* cand_count, int B, i64* cand_base) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        i64 acc = 0;
        for (int b = 0; b < B; ++b) { cand_base[b] = acc; acc += cand_count[b]; }
        cand_base[B] = acc;
    }
}

// One warp per row: composites of its children, their child nodes, and the request's best score.
extern "C" __global__ void expand_kernel(const i64* TP, const i64* node_ids, const void* logprobs, int lp_dtype, int V,
                                         const float* beam_scores, const i64* row_req, const i64* req_rows,
                                         const i64* row_off, i64 R, int B, int D, const i64* cand_base, u64* cand,
                                         int* cand_child, u32* best_key) {
    Trie t = load_trie(TP);
    i64 r = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (r >= R) return;
    i64 b = row_req[r];
    // (count_kernel numbered only the rows of request b's range that live_degree calls live)
    if ((u64)b >= (u64)B || r < req_rows[b] || r >= req_rows[b + 1]) return;
    i64 deg = live_degree(t, node_ids, row_req, r, b, D);
    if (deg == 0) return;
    i64 n = node_ids[r];
    i64 j0 = t.node_offsets[n], j1 = j0 + deg;
    float bs = beam_scores[r];
    u64* out = cand + cand_base[b] + row_off[r];
    int* oc = cand_child + cand_base[b] + row_off[r];
    u32 idx0 = (u32)row_off[r];
    u32 best = 0;
    for (i64 j = j0 + lane; j < j1; j += 32) {
        float s = bs + load_lp(logprobs, lp_dtype, r * (i64)V + t.child_tokens[j]);
        u64 c = candidate_key(s, idx0 + (u32)(j - j0));  // NaN as -inf, -0 as +0, +inf above every finite score
        best = max(best, (u32)(c >> 32));
        out[j - j0] = c;
        oc[j - j0] = (int)(j + 1);
    }
    for (int o = 16; o > 0; o >>= 1) best = max(best, __shfl_xor_sync(0xffffffffu, best, o));
    if (lane == 0) atomicMax(best_key + b, best);
}

// Largest composite v such that at least `want` of vals[0..n) are >= v (n >= want > 0): radix select,
// 11-bit digits from the top (the last pass takes the remaining 9 bits); digit counts scanned in parallel.
__device__ u64 kth_largest(const u64* vals, i64 n, int want, u32* hist, u32* warp_tot, u64* s_prefix, int* s_want) {
    u64 prefix = 0, mask = 0;
    int remaining = want;
    for (int pass = 0; pass < 6; ++pass) {  // bits 53..63, 42..52, 31..41, 20..30, 9..19, then 0..8
        int shv = pass < 5 ? 53 - 11 * pass : 0;
        int nbins = pass < 5 ? RADIX : 512;
        for (int i = threadIdx.x; i < RADIX; i += blockDim.x) hist[i] = 0;
        __syncthreads();
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            u64 v = vals[i];
            if ((v & mask) == prefix) atomicAdd(hist + ((v >> shv) & (nbins - 1)), 1u);
        }
        __syncthreads();
        // thread t owns digits d0 = nbins-1-2t and d1 = d0-1 (descending), so the scan gives suffix counts
        int d0 = nbins - 1 - 2 * (int)threadIdx.x, d1 = d0 - 1;
        u32 a0 = d0 >= 0 ? hist[d0] : 0u, a1 = d1 >= 0 ? hist[d1] : 0u;
        u32 incl = block_scan(a0 + a1, warp_tot);
        u32 excl = incl - a0 - a1;
        u32 rem = (u32)remaining;
        if (d0 >= 0 && excl < rem && excl + a0 >= rem) { *s_prefix = prefix | ((u64)d0 << shv); *s_want = (int)(rem - excl); }
        if (d1 >= 0 && excl + a0 < rem && excl + a0 + a1 >= rem) { *s_prefix = prefix | ((u64)d1 << shv); *s_want = (int)(rem - excl - a0); }
        __syncthreads();
        prefix = *s_prefix;
        remaining = *s_want;
        mask |= (u64)(nbins - 1) << shv;
        __syncthreads();
    }
    return prefix;
}

// ---- lazy CD+GTM top-k, spread over the whole GPU ------------------------------------------------
// Per request b the state lives in st[b * ST + ...]: lo and hi bins of the current round, the target
// count, passers so far, done flag. Rounds are fixed launches (graph-capturable): a round kernel on
// B x G blocks tests GTM only on candidates whose score bin lies in (lo, hi]; a plan kernel moves the
// window by the observed pass rate; the last plan opens every remaining bin, so the result is always
// exactly filter-then-top-k. Bins are linear in score below the request's best (bin 0 = best).
#define ST 8
#define S_LO 0
#define S_HI 1
#define S_TARGET 2
#define S_NPASS 3
#define S_DONE 4
#define S_C 5

// Block (b, g): histogram of request b's candidate bins over a 1/G slice, added to ghist[b].
extern "C" __global__ void __launch_bounds__(1024) hist_kernel(const u64* cand, const i64* cand_count,
                                                              const i64* cand_base, const u32* best_key, u32* ghist) {
    __shared__ u32 h[NB];
    int b = blockIdx.x, g = blockIdx.y, G = gridDim.y;
    for (int i = threadIdx.x; i < NB; i += blockDim.x) h[i] = 0;
    __syncthreads();
    i64 C = cand_count[b];
    const u64* cb = cand + cand_base[b];
    float top = unsortable(best_key[b]);
    for (i64 i = (i64)g * blockDim.x + threadIdx.x; i < C; i += (i64)G * blockDim.x) atomicAdd(h + bin_of<NB>(cb[i], top), 1u);
    __syncthreads();
    for (int i = threadIdx.x; i < NB; i += blockDim.x)
        if (h[i]) atomicAdd(ghist + (i64)b * NB + i, h[i]);
}

// First bin > lo whose cumulative count reaches target (NB - 1 if none): cum is non-decreasing.
__device__ __forceinline__ i64 first_bin(const u32* cum, i64 lo, i64 target) {
    i64 a = lo + 1, z = NB - 1;
    while (a < z) { i64 m = (a + z) >> 1; if ((i64)cum[m] >= target) z = m; else a = m + 1; }
    return a;
}

// Block b: cumulative bin counts (in place) and the first round's window (the best k by score).
extern "C" __global__ void __launch_bounds__(1024) plan_kernel(u32* ghist, const i64* cand_count, int k, i64* st) {
    __shared__ u32 warp_tot[32];
    int b = blockIdx.x;
    u32* cum = ghist + (i64)b * NB;
    int h0 = 4 * threadIdx.x;  // NB == 4 * blockDim.x
    u32 a0 = cum[h0], a1 = cum[h0 + 1], a2 = cum[h0 + 2], a3 = cum[h0 + 3];
    u32 excl = block_scan(a0 + a1 + a2 + a3, warp_tot) - (a0 + a1 + a2 + a3);
    cum[h0] = excl + a0; cum[h0 + 1] = excl + a0 + a1; cum[h0 + 2] = excl + a0 + a1 + a2;
    cum[h0 + 3] = excl + a0 + a1 + a2 + a3;
    __syncthreads();
    if (threadIdx.x == 0) {
        i64* s = st + (i64)b * ST;
        s[S_LO] = -1; s[S_TARGET] = k; s[S_NPASS] = 0; s[S_C] = cand_count[b];
        s[S_HI] = first_bin(cum, -1, k);
        s[S_DONE] = cand_count[b] == 0;
    }
}

// Block (b, g): GTM on the candidates of bins (lo, hi]; passers appended to sel (warp-aggregated).
extern "C" __global__ void __launch_bounds__(256) round_kernel(const i64* TP, const i64* QP, const u64* cand,
                                                              const int* cand_child, const i64* cand_base,
                                                              const u32* best_key, int gtm, i64* st, u64* sel) {
    int b = blockIdx.x, g = blockIdx.y, G = gridDim.y;
    i64* s = st + (i64)b * ST;
    if (s[S_DONE]) return;
    Trie t = load_trie(TP);
    Req q = load_req(QP);
    const SparseReq* sp = block_sparse(q, b, gtm);
    i64 lo = s[S_LO], hi = s[S_HI], C = s[S_C];
    const u64* cb = cand + cand_base[b];
    const int* ch = cand_child + cand_base[b];
    u64* sb = sel + cand_base[b];
    float top = unsortable(best_key[b]);
    int lane = threadIdx.x & 31;
    i64 stride = (i64)G * blockDim.x;
    for (i64 base = (i64)g * blockDim.x; base < C; base += stride) {  // whole warps iterate together
        i64 i = base + threadIdx.x;
        bool pass = false;
        u64 c = 0;
        if (i < C) {
            c = cb[i];
            int bn = bin_of<NB>(c, top);
            if (bn > lo && bn <= hi) {
                i64 child = ch[i];
                pass = cd_live_at(TP, child) && (!gtm || gtm_passes(t, q, b, sp, child, depth_of(t, child)));
            }
        }
        unsigned ballot = __ballot_sync(0xffffffffu, pass);
        if (ballot) {
            i64 slot = 0;
            if (lane == 0) slot = atomicAdd((unsigned long long*)(s + S_NPASS), (unsigned long long)__popc(ballot));
            slot = __shfl_sync(0xffffffffu, slot, 0);
            if (pass) sb[slot + __popc(ballot & ((1u << lane) - 1))] = c;
        }
    }
}

// Thread b: after a round, stop if k passed (or every bin is open); else widen the window by the
// observed pass rate (at least doubling it). `last` opens every remaining bin.
extern "C" __global__ void replan_kernel(const u32* ghist, int B, int k, int last, i64* st) {
    int b = blockIdx.x * blockDim.x + threadIdx.x;
    if (b >= B) return;
    i64* s = st + (i64)b * ST;
    if (s[S_DONE]) return;
    i64 np = s[S_NPASS], hi = s[S_HI];
    if (np >= k || hi >= NB - 1) { s[S_DONE] = 1; return; }
    const u32* cum = ghist + (i64)b * NB;
    i64 seen = cum[hi];
    double rate = np > 0 ? (double)np / (double)seen : 1.0 / 64.0;
    i64 need = (i64)((double)(k - np) / rate * 1.25) + 1;
    i64 target = seen + (need > seen ? need : seen);
    s[S_LO] = hi;
    s[S_TARGET] = target;
    s[S_HI] = last ? NB - 1 : first_bin(cum, hi, target);
}

// Block b: the exact top k of the passers, best first. Up to SEL_CAP passers are ranked directly
// (each one counts the larger ones: composites are distinct); beyond that a radix select cuts them
// to k first.
extern "C" __global__ void __launch_bounds__(1024) finish_kernel(const i64* st, const u64* sel, const i64* cand_base,
                                                                int k, u64* out_comp, int* out_n) {
    __shared__ u32 hist[RADIX];
    __shared__ u64 buf[SEL_CAP];
    __shared__ u32 warp_tot[32];
    __shared__ int s_n, s_want;
    __shared__ u64 s_prefix;
    int b = blockIdx.x;
    i64 np = st[(i64)b * ST + S_NPASS];
    const u64* sb = sel + cand_base[b];
    int m = np < k ? (int)np : k;
    u64 thr = np > SEL_CAP ? kth_largest(sb, np, k, hist, warp_tot, &s_prefix, &s_want) : 0;
    if (threadIdx.x == 0) s_n = 0;
    __syncthreads();
    for (i64 i = threadIdx.x; i < np; i += blockDim.x) {
        u64 v = sb[i];
        if (v >= thr) buf[atomicAdd(&s_n, 1)] = v;
    }
    __syncthreads();
    int n = s_n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        u64 v = buf[i];
        int rank = 0;
        for (int j = 0; j < n; ++j) rank += buf[j] > v;
        if (rank < k) out_comp[(i64)b * k + rank] = v;
    }
    if (threadIdx.x == 0) out_n[b] = m;
}

// Block (b, g): passers among all candidates (the optional full count; GTM on everything; without GTM, the
// candidates on nodes with an active ad).
extern "C" __global__ void __launch_bounds__(256) count_pass_kernel(const i64* TP, const i64* QP, const int* cand_child,
                                                                   const i64* cand_count, const i64* cand_base, int gtm,
                                                                   i64* out_count) {
    int b = blockIdx.x, g = blockIdx.y, G = gridDim.y;
    Trie t = load_trie(TP);
    Req q = load_req(QP);
    // (not block_sparse: with it ptxas gives this kernel 48 registers and 132 bytes of spills, 76 here)
    const SparseReq* sp = gtm ? sparse_of(q, b) : nullptr;
    i64 C = cand_count[b];
    const int* ch = cand_child + cand_base[b];
    int local = 0;
    for (i64 i = (i64)g * blockDim.x + threadIdx.x; i < C; i += (i64)G * blockDim.x) {
        i64 child = ch[i];
        local += cd_live(t, child) && (!gtm || gtm_passes(t, q, b, sp, child, depth_of(t, child)));
    }
    for (int o = 16; o > 0; o >>= 1) local += __shfl_xor_sync(0xffffffffu, local, o);
    if ((threadIdx.x & 31) == 0 && local) atomicAdd((unsigned long long*)(out_count + b), (unsigned long long)local);
}

// One thread per output slot: composite -> (parent row, token, child node, score); -1 / -inf padding.
extern "C" __global__ void gather_kernel(const i64* TP, const i64* node_ids, const i64* req_rows, const i64* row_off,
                                         const u64* out_comp, const int* out_n, int B, int k,
                                         int* parent, int* token, int* child, float* score) {
    Trie t = load_trie(TP);
    i64 x = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= (i64)B * k) return;
    int b = (int)(x / k), i = (int)(x % k);
    if (i >= out_n[b]) {
        parent[x] = -1; token[x] = -1; child[x] = -1; score[x] = -__int_as_float(0x7f800000);
        return;
    }
    u64 c = out_comp[x];
    i64 idx = (i64)(0xFFFFFFFFu - (u32)(c & 0xFFFFFFFFu));
    i64 a = req_rows[b], z = req_rows[b + 1];  // last row with row_off <= idx (and children)
    while (z - a > 1) { i64 m = (a + z) >> 1; if (row_off[m] <= idx) a = m; else z = m; }
    i64 n = node_ids[a];
    i64 j = t.node_offsets[n] + (idx - row_off[a]);
    parent[x] = (int)a;
    token[x] = t.child_tokens[j];
    child[x] = (int)(j + 1);
    score[x] = unsortable((u32)(c >> 32));
}

// One warp per row: allowed-token bitmask (bit v % 32 of word v / 32).
// Rows whose node is not internal, or whose row_req is outside [0, B), are dead: no token allowed.
extern "C" __global__ void mask_kernel(const i64* TP, const i64* QP, const i64* node_ids, const i64* row_req, i64 R, int B,
                                       int words, int gtm, u32* out) {
    Trie t = load_trie(TP);
    Req q = load_req(QP);
    i64 r = ((i64)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    int lane = threadIdx.x & 31;
    if (r >= R) return;
    i64 n = node_ids[r];
    const i64 rb = row_req[r];
    if (n < 0 || n >= t.n_internal || (u64)rb >= (u64)B) return;
    int d = depth_of(t, n) + 1;
    int b = (int)rb;
    const SparseReq* sp = gtm ? sparse_of(q, b) : nullptr;  // a block's rows may belong to several requests
    for (i64 j = t.node_offsets[n] + lane; j < t.node_offsets[n + 1]; j += 32) {
        if (cd_live(t, j + 1) && (!gtm || gtm_passes(t, q, b, sp, j + 1, d))) {
            int v = t.child_tokens[j];
            atomicOr(out + r * words + (v >> 5), 1u << (v & 31));
        }
    }
}


// A model's scores masked in place, one warp per row (decoder integrations, docs/design.md §8): the row's node
// is recovered from its SID prefix tokens[r * tok_stride + start + j] - offsets[j], j < depth (a token outside
// [0, vocab) or not a child: no node); its children that pass CD (+GTM for request r / rows_per_req) set bits of
// the warp's mask in shared memory (MS_WORDS words a warp, dynamic); then every column the row may not take is
// set to -inf (neg_inf's bits in elem_bytes): columns offset + v of an allowed child token v stay, or with
// eos_only column eos when the prefix is a whole SID. One launch instead of recovery, mask and write apart.
extern "C" __global__ void __launch_bounds__(256) mask_scores_kernel(
        const i64* TP, const i64* QP, const i64* tokens, i64 tok_stride, i64 start, int depth, const i64* offsets,
        i64 rows_per_req, int B, int gtm, char* scores, i64 row_stride, int elem_bytes, u64 neg_inf, i64 R, i64 C,
        i64 offset, i64 vocab, i64 eos, int eos_only, int words) {
#ifdef GTMKIT_EMU
    u32* ms_bits = (u32*)emu_dyn_smem();
#else
    extern __shared__ u32 ms_bits[];
#endif
    Trie t = load_trie(TP);
    Req q = load_req(QP);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const i64 r = (i64)blockIdx.x * (blockDim.x >> 5) + warp;
    if (r >= R) return;
    u32* bits = ms_bits + warp * words;
    i64 n = 0;  // every lane walks the same prefix: its loads are broadcasts
    for (int j = 0; j < depth; ++j) {
        i64 tok = tokens[r * tok_stride + start + j] - offsets[j];
        if (tok < 0 || tok >= vocab || n >= t.n_internal) { n = -1; break; }
        i64 lo = t.node_offsets[n], end = t.node_offsets[n + 1], hi = end;
        while (lo < hi) {
            i64 mid = (lo + hi) >> 1;
            if (t.child_tokens[mid] < tok) lo = mid + 1; else hi = mid;
        }
        if (lo == end || t.child_tokens[lo] != tok) { n = -1; break; }
        n = lo + 1;
    }
    const i64 rb = r / rows_per_req;
    if (!eos_only) {
        for (int w = lane; w < words; w += 32) bits[w] = 0u;
        __syncwarp();
        if (n >= 0 && n < t.n_internal && rb < B) {
            const int d = depth_of(t, n) + 1;
            const SparseReq* sp = gtm ? sparse_of(q, (int)rb) : nullptr;
            for (i64 j = t.node_offsets[n] + lane; j < t.node_offsets[n + 1]; j += 32) {
                if (cd_live(t, j + 1) && (!gtm || gtm_passes(t, q, (int)rb, sp, j + 1, d))) {
                    int v = t.child_tokens[j];
                    atomicOr(bits + (v >> 5), 1u << (v & 31));
                }
            }
        }
        __syncwarp();
    }
    char* row = scores + r * row_stride * elem_bytes;
    for (i64 c = lane; c < C; c += 32) {
        bool allowed;
        if (eos_only) {
            allowed = c == eos && n >= t.n_internal;
        } else {
            const i64 v = c - offset;
            allowed = v >= 0 && v < vocab && ((bits[v >> 5] >> (v & 31)) & 1u);
        }
        if (allowed) continue;
        char* p = row + c * elem_bytes;
        if (elem_bytes == 4) *(u32*)p = (u32)neg_inf;
        else if (elem_bytes == 2) *(unsigned short*)p = (unsigned short)neg_inf;
        else *(u64*)p = neg_inf;
    }
}
