// Constrained beam search over the succinct (LOUDS) trie on the GPU (docs/design.md §6, docs/matcher.md).
// NVRTC: built-in types only, no headers. Bit vectors are LSB-first uint64 words; rank9 directories as in
// gtmkit/_rank_select.py (row s = ones before superblock s, seven packed 9-bit word counts).
//
// One thread block cluster of CL blocks (one an SM) per query runs every step in a single launch, cluster
// barriers between phases (no kernel launches, grid syncs or host round trips). Why a cluster and not one
// block: a step's phases are chains of dependent reads of trie words scattered over ~100 MB, and one SM
// keeps too few of them in flight. A NAR launch may first prepare its proposal rows (prep_row, block r taking
// rows r, r + CL, ..). A step:
// (A) every block: the live beams (AR and a launch's first step: from the live list in global memory;
// later NAR steps: the previous step's candidates at or above its threshold, in candidate order), each
// beam's work, the shorter of its child list and its proposal row, and a prefix sum (redundantly in each
// block); NAR copies the step's one proposal row into shared memory; (B) the blocks take the
// work items in warp-sized chunks dealt in turn; an item binary-searches its entry in the other list (or
// reads the root directory), and a match becomes at once a finished key if terminal and, if it has
// children, a live candidate whose own child range is computed right there (so no step starts with a
// select0 per beam); candidates and finished keys go to the query's lists (warp-aggregated atomics on
// counters in global memory); cluster barrier; (C) NAR: every block finds the same BW-th composite (an
// exact radix select when there are more), which the next step's (A) keeps candidates by: no live list,
// no second barrier (candidates sit in two sets by step parity, so a step writes one while the next
// reads the other); AR: block 0 writes the new live list, sorted, for its caller; cluster barrier. At the
// end the best BW finished keys are ranked across the cluster by counting. With CL=1 (GPUs before sm_90)
// the barriers are __syncthreads.
// Finished keys accumulate unordered and are cut to the best BW only when their buffer could overflow,
// and at the end. Heavier steps stay exact (buffers hold BW*K candidates per query), only slower.
//
// Orders, as 64-bit composites: larger = better, distinct, never 0.
//   live candidate     (sortable(score) << 32) | (0xFFFFFFFF - child node id)
//   finished key       (sortable(normalised score) << 32) | (0xFFFFFFFF - key id)
//   prepared proposal  ((0xFFFFFFFF - token) << 32) | sortable_raw(logp)
// Live candidates tie by node id (the CPU's rule), which does not depend on the order of the live list:
// a NAR search keeps its live list unordered (the best BW by an exact radix select, no sort, which costs far
// more); the AR stepper, whose caller sees the list, sorts the kept ones best first.
// A candidate's data sits in slot p*K+k (parent beam p, proposal k). Key id ascending breaks ties among
// finished keys.
//
// NT, SORT_CAP, PREP_CAP and BEAM_CAP may be overridden at compile time (the CPU emulation test shrinks
// them to reach every path with small inputs); NT must be a multiple of 32, at most 1024.
//
// The measured choices below and their figures: benchmarks/results/kernel_choices.md.

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;
typedef unsigned short u16;

#ifndef NT
#define NT 1024         // threads per block
#endif
// A NAR search from the root prepares its first row through a shared hash table instead of the sort
// (hash0 below; step 0 looks its proposals up in the root directory: it needs them deduplicated, not
// ordered); the row stays in its proposal slots in shared memory (-1 for a dropped or repeated proposal), and
// block 0 runs step 0 alone, a slot a thread, while the other blocks sort the later rows: step 0 waits for no sort.
#ifndef SORT_CAP
#define SORT_CAP 2048   // keys the search sorts in shared memory (16 KiB), a power of two
#endif
#ifndef PREP_CAP
#define PREP_CAP 4096   // proposals per row prep_kernel sorts in shared memory (32 KiB), a power of two
#endif
#ifndef BEAM_CAP
#define BEAM_CAP 1024   // per-beam data (child range, score, work offsets) in shared memory when BW fits
#endif
#ifndef TOK_CAP
#define TOK_CAP 4096    // NAR: a step's proposal row (tokens, log-probs) in shared memory when K fits (32 KiB)
#endif
#ifndef SEL_CAP
#define SEL_CAP 4096    // keys the radix select keeps in shared memory after its first pass (32 KiB)
#endif
#ifndef CL
#define CL 8            // blocks (SMs) per query: a thread block cluster
#endif
#define FAC_CAP 64      // length factors a launch keeps in shared memory (more steps read them each step)
#define NW (NT / 32)
#define FULL 0xffffffffu

#if CL > 1
#define __search_cluster__(n) __cluster_dims__(n, 1, 1)
#else  // one block a query: no cluster features (GPUs before sm_90 have none; the host compiles CL=1 there)
#define __search_cluster__(n)
#endif
#if !defined(GTMKIT_EMU) && CL == 1
__device__ __forceinline__ u32 cluster_rank() { return 0; }
__device__ __forceinline__ void cluster_sync() { __syncthreads(); }
#define LDCG(p) (*(p))
#define PREFETCH_L2(p) asm volatile("prefetch.global.L2 [%0];" :: "l"(p))
#elif !defined(GTMKIT_EMU)  // the CPU emulation (tests/support/cuda_emu.py) defines these for its threads
#include "cluster.cuh"  // cluster_rank, cluster_sync (PTX)
// Data another block of the cluster wrote this launch is read through L2 (ld.global.cg): this SM's L1
// may hold the line from an earlier step.
#define LDCG(p) __ldcg(p)
#define PREFETCH_L2(p) asm volatile("prefetch.global.L2 [%0];" :: "l"(p))
#else
#define LDCG(p) (*(p))
#define PREFETCH_L2(p) do { } while (0)
#endif

// Pinned host memory that the host rewrites while a kernel runs (serve_kernel's requests): read past every
// cache (ld.global.cv), the control words with system-scope acquire / release.
#ifndef GTMKIT_EMU
#define LDCV(p) __ldcv(p)
__device__ __forceinline__ u32 ld_acquire_sys(const u32* p) {
    u32 v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}
__device__ __forceinline__ void st_release_sys(u32* p, u32 v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
#else
#define LDCV(p) (*(p))
static inline u32 ld_acquire_sys(const u32* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
static inline void st_release_sys(u32* p, u32 v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
static inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
#endif

// Compiled with -DPROFILE=1 (profiling tools only): block 0's thread 0 adds the time since its previous mark
// to trie_prof[i] at each PROF_MARK(i), and counts into PROF_ADD.
#ifndef PROFILE
#define PROFILE 0
#endif
#if PROFILE
// trie_prof[30] = the step being timed (8 = none: before and after the steps), [31] = the previous mark;
// a mark's time also goes to trie_prof[32 + 10 * step + i] for steps < 8 (phases per step).
__device__ u64 trie_prof[116];  // [112, 115): block 0's first prepared row: read, sort, write
__device__ __forceinline__ u64 gtimer() {
    u64 t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define PROF_MARK(i) do { if (blockIdx.x == 0 && threadIdx.x == 0) { u64 now_ = gtimer(); \
    u64 d_ = now_ - trie_prof[31]; trie_prof[i] += d_; trie_prof[31] = now_; \
    if (trie_prof[30] < 8) trie_prof[32 + 10 * trie_prof[30] + (i)] += d_; } } while (0)
#define PROF_ADD(i, v) do { if (blockIdx.x == 0 && threadIdx.x == 0) trie_prof[i] += (u64)(v); } while (0)
#define PROF_BEGIN do { if (blockIdx.x == 0 && threadIdx.x == 0) trie_prof[31] = gtimer(); } while (0)
// per step t < 8: its time into trie_prof[13 + t], its work items into trie_prof[21 + t]
#define PROF_STEP_BEGIN u64 step_t0_ = 0; do { if (blockIdx.x == 0 && threadIdx.x == 0) { \
    step_t0_ = gtimer(); trie_prof[30] = (u64)t; } } while (0)
#define PROF_STEP_END(t, w) do { if (blockIdx.x == 0 && threadIdx.x == 0 && (t) < 8) { \
    trie_prof[13 + (t)] += gtimer() - step_t0_; trie_prof[21 + (t)] += (u64)(w); trie_prof[30] = 8; } } while (0)
#else
#define PROF_STEP_BEGIN do { } while (0)
#define PROF_STEP_END(t, w) do { } while (0)
#define PROF_MARK(i) do { } while (0)
#define PROF_ADD(i, v) do { } while (0)
#define PROF_BEGIN do { } while (0)
#endif

// Trie parameter table (int64 values, trie/search_cuda.py builds it).
#define TP_LOUDS 0
#define TP_LOUDS_RANK 1
#define TP_LOUDS_SELECT0 2
#define TP_LABEL_LOW 3
#define TP_LABEL_HIGH 4
#define TP_HIGH_BITS 5
#define TP_TERMINAL 6
#define TP_TERMINAL_RANK 7
#define TP_ZPOS 8           // i64 [ceil(zeros / 2^zshift)] position of every 2^zshift-th zero, or -1 - i: a wide
                            // group, whose zeros are row i of TP_ZWIDE (trie/gpu_tables.py)
#define TP_ZSHIFT 9
#define TP_ROOT_BITS 10     // u64: bit v set where the root has a child labelled v (v < root_nbits)
#define TP_ROOT_RANK 11     // u32: ones before each word of it
#define TP_ROOT_NBITS 12    // 0: no root directory (the root's children are binary-searched)
#define TP_ROOT_FIRST 13    // the root's first child
#define TP_ROOT_DEG 14      // and its number of children
#define TP_ZWIDE 15         // i64 [wide groups, 2^zshift + 1] the zeros of a wide group and the one after it
#define TP_LABEL_TAIL 16    // u64: bit j set where node j+1's label is in the tail store (trie/tails.py)
#define TP_LABEL_TAIL_RANK 17
#define TP_TAIL_DICT 18     // i32: tail tokens by code
#define TP_TAIL_LOW 19      // u64: codes' low tail_low_bits bits, one field per tail node
#define TP_TAIL_WIDE 20     // u64: bit i set where tail node i's code has high bits
#define TP_TAIL_WIDE_RANK 21
#define TP_TAIL_HIGH 22     // u64: the wide codes' high tail_high_bits bits
#define TP_TAIL_NODES 23    // 0: every label is in label_low / label_high
#define TP_TAIL_LOW_BITS 24
#define TP_TAIL_HIGH_BITS 25
#define TP_LOW_BITS 26      // 8 or 16: label_low's width (trie/labels.py)
#define TP_LEVEL_LABEL 27   // i32 [K]: the token of every node of each constant deepest level
#define TP_LEVEL_FIRST 28   // i64 [K]: the first node of each of those levels
#define TP_CONST_LEVELS 29  // K (0: none)
#define TP_CONST_FROM 30    // the first node of the constant levels (num_nodes when K = 0)

// Search state table: per-query buffers [b, ...] allocated once per shape, kept between launches.
#define SP_LIVE_NODE 0      // i64 [b, BW]   live beams, best first: node
#define SP_LIVE_SCORE 1     // f32 [b, BW]     summed log-prob
#define SP_LIVE_PARENT 2    // i32 [b, BW]     beam it extends in the previous list
#define SP_LIVE_TOKEN 3     // i32 [b, BW]     token it appended
#define SP_LIVE_FIRST 4     // i64 [b, BW]     first child
#define SP_LIVE_DEG 5       // u32 [b, BW]     number of children (< 2^31: sibling labels are distinct)
#define SP_LIVE_COUNT 6     // i32 [b]
#define SP_BEAM_N 7         // u32 [b, BW]   proposals in beam p's row   } when BW > BEAM_CAP; else in
#define SP_BEAM_OFF 8       // u32 [b, BW+1] work offsets                } shared memory
#define SP_CAND 9           // u64 [b, 2, BW*K] a step's live candidates, compacted (two sets: step parity)
#define SP_SLOT_NODE 10     // i64 [b, BW*K]    AR: node of live candidate j (its position in SP_CAND)
#define SP_SLOT_FIRST 11    // i64 [b, 2, BW*K] first child and number of children of live candidate j
#define SP_SLOT_DEG 12      // u32 [b, 2, BW*K]
#define SP_FIN 13           // u64 [b, FIN_CAP] finished keys: unordered, folded to the best BW when full
#define SP_FIN_COUNT 14     // i32 [b]
#define SP_SCRATCH 15       // u64 [b, SCRATCH_STRIDE] sort space when more than SORT_CAP keys are kept
#define SP_BW 16
#define SP_FIN_CAP 17       // >= BW * (K + 1): one step adds at most BW*K to at most BW kept
#define SP_SCRATCH_STRIDE 18
#define SP_MATCH 19         // u32 [b, BW]   AR: the slots of the kept candidates, in the order they were kept
#define SP_CAND_SLOT 20     // u32 [b, BW*K] AR: slot p*K+k of each live candidate in SP_CAND
#define SP_KEPT 21          // u64 [b, BW]   AR: the kept candidates' composites, in the order they were kept
#define SP_CNT 22           // u64 [b, 4]    [t % 3]: step t's live candidates (low word), finished keys (high)
#define SP_BEAM_FIRST 23    // i64 [b, CL, BW] } a block's copies of the live beams when BW > BEAM_CAP
#define SP_BEAM_DEG 24      // u32 [b, CL, BW] } (SP_BEAM_N and SP_BEAM_OFF are [b, CL, BW (+1)] too)
#define SP_BEAM_SCORE 25    // f32 [b, CL, BW] }

struct Trie {
    const u64* louds;
    const u64* louds_rank;
    const u32* sel0;
    const unsigned short* low;
    const u64* high;
    int hbits;
    const u64* term;
    const u64* term_rank;
    const i64* zpos;      // louds is followed by 4 words of ones on the device (no zero), see zero_pair
    const i64* zwide;
    int zshift;
    const u64* rbits;
    const u32* rrank;
    i64 rnbits;
    i64 rfirst, rdeg;
    const u64* ltail;     // tail store (trie/tails.py); ntail == 0: none
    const u64* ltail_rank;
    const int* tdict;
    const u64* tlow;
    const u64* twide;
    const u64* twide_rank;
    const u64* thigh;
    i64 ntail;
    int tlbits, thbits;
    int lbits;            // label_low's width: 8 (read through low8) or 16
    const unsigned char* low8;
    const int* lconst;    // constant deepest levels: nodes >= cfrom (trie/labels.py)
    const i64* lfirst;
    int nconst;
    i64 cfrom;
};

struct Smem {
    u64* sort;   // [SORT_CAP]
    u32* warp;   // [33] block_scan
    u32* hist;   // [256] block_select
    u32* misc;   // [8]
    u64* sel;    // [SEL_CAP] block_select
};

#include "trie_nav.cuh"    // navigation: bit vectors, child ranges, labels, token searches
#include "trie_block.cuh"  // block-wide scans, appends, sorts, the radix select

// What AR's phase B stored for live candidate j (at j, written by any block of the cluster): its slot p*K+k
// (parent beam p, proposal k), node and child range.
struct Cand {
    u32 slot, deg;
    i64 node, first;
};

__device__ __forceinline__ Cand load_cand(u32 j, const u32* cand_slot, const i64* cand_node, const i64* cand_first,
                                          const u32* cand_deg) {
    Cand c;
    c.slot = LDCG(cand_slot + j);
    c.node = LDCG(cand_node + j);
    c.first = LDCG(cand_first + j);
    c.deg = LDCG(cand_deg + j);
    return c;
}

// AR live entry i <- candidate c (composite x), whose proposal is entry k of row row0 + p (slot p*K+k).
__device__ __forceinline__ void write_live(u32 i, u64 x, const Cand& c, int K, const int* ptok, i64 row0,
                                           i64* live_node, i64* live_first, u32* live_deg, float* live_score,
                                           int* live_parent, int* live_token) {
    const u32 p = c.slot / (u32)K, k = c.slot - p * (u32)K;
    live_node[i] = c.node;
    live_first[i] = c.first;
    live_deg[i] = c.deg;
    live_score[i] = unsortable((u32)(x >> 32));
    live_parent[i] = (int)p;
    live_token[i] = ptok[(row0 + (i64)p) * K + k];
}

__device__ __forceinline__ Trie load_trie(const i64* TP) {
    Trie t;
    t.louds = (const u64*)TP[TP_LOUDS];
    t.louds_rank = (const u64*)TP[TP_LOUDS_RANK];
    t.sel0 = (const u32*)TP[TP_LOUDS_SELECT0];
    t.low = (const unsigned short*)TP[TP_LABEL_LOW];
    t.high = (const u64*)TP[TP_LABEL_HIGH];
    t.hbits = (int)TP[TP_HIGH_BITS];
    t.term = (const u64*)TP[TP_TERMINAL];
    t.term_rank = (const u64*)TP[TP_TERMINAL_RANK];
    t.zpos = (const i64*)TP[TP_ZPOS];
    t.zwide = (const i64*)TP[TP_ZWIDE];
    t.zshift = (int)TP[TP_ZSHIFT];
    t.rbits = (const u64*)TP[TP_ROOT_BITS];
    t.rrank = (const u32*)TP[TP_ROOT_RANK];
    t.rnbits = TP[TP_ROOT_NBITS];
    t.rfirst = TP[TP_ROOT_FIRST];
    t.rdeg = TP[TP_ROOT_DEG];
    t.ltail = (const u64*)TP[TP_LABEL_TAIL];
    t.ltail_rank = (const u64*)TP[TP_LABEL_TAIL_RANK];
    t.tdict = (const int*)TP[TP_TAIL_DICT];
    t.tlow = (const u64*)TP[TP_TAIL_LOW];
    t.twide = (const u64*)TP[TP_TAIL_WIDE];
    t.twide_rank = (const u64*)TP[TP_TAIL_WIDE_RANK];
    t.thigh = (const u64*)TP[TP_TAIL_HIGH];
    t.ntail = TP[TP_TAIL_NODES];
    t.tlbits = (int)TP[TP_TAIL_LOW_BITS];
    t.thbits = (int)TP[TP_TAIL_HIGH_BITS];
    t.lbits = (int)TP[TP_LOW_BITS];
    t.low8 = (const unsigned char*)TP[TP_LABEL_LOW];
    t.lconst = (const int*)TP[TP_LEVEL_LABEL];
    t.lfirst = (const i64*)TP[TP_LEVEL_FIRST];
    t.nconst = (int)TP[TP_CONST_LEVELS];
    t.cfrom = TP[TP_CONST_FROM];
    return t;
}

// ---------------------------------------------------------------------------------------------------
// Kernels

// One block per proposal row (q, r) of [b, R, K]. rows_in holds per row K token ids then the K log-prob
// bits (one staging copy from the host). Keeps the proposals with lp > theta_tok and a token >= 0 (the
// host maps ids outside [0, 2^31-1] to -1), sorted by token, a repeated token once with its best
// log-prob, in ptok / plp [b, R, K] and pcnt [b, R]. With use_count, rows r >= live_count[q] (no live
// beam reads them: AR) get pcnt 0. Needs K <= PREP_CAP. rows_in may be pinned host memory (the NAR call
// reads its staging buffer in place: no copy in the graph); block 0 then also copies the nf length factors
// fac_in -> fac_out.
// One proposal row, by the whole block: sort buffer sb has room for `cap` keys (a power of two >= K).
__device__ __forceinline__ void prep_row(i64 row, const int* rows_in, int K, float theta_tok, int* ptok, float* plp,
                                         int* pcnt, u64* sb, u32 cap, u32* warp) {
    const int* ti = rows_in + row * 2 * K;
    const int* li = ti + K;
    u32 n2 = pow2_at_least((u32)K);
    for (u32 i = threadIdx.x; i < n2; i += NT) {
        u64 key = 0;
        if (i < (u32)K) {
            int tok = LDCV(ti + i);  // (serve_kernel: the host rewrites the staging between requests)
            float lp = __int_as_float(LDCV(li + i));
            if (tok >= 0 && lp > theta_tok) key = ((u64)(0xFFFFFFFFu - (u32)tok) << 32) | (u64)sortable_raw(lp);
        }
        sb[i] = key;
    }
    PROF_MARK(112);
    if (n2 <= NT && 2 * n2 <= cap) block_sort_desc_reg(sb, n2);
    else block_sort_desc(sb, n2);
    PROF_MARK(113);
    u32 carry = 0;
    for (u32 base = 0; base < n2; base += NT) {
        u32 i = base + threadIdx.x;
        u64 x = i < n2 ? sb[i] : 0ull;
        bool keep = x != 0ull && (i == 0 || (sb[i - 1] >> 32) != (x >> 32));  // first = best lp
        u32 tot;
        u32 pos = carry + block_scan(keep ? 1u : 0u, warp, &tot);
        if (keep) {
            ptok[row * K + pos] = (int)(0xFFFFFFFFu - (u32)(x >> 32));
            plp[row * K + pos] = unsortable((u32)x);
        }
        carry += tot;
    }
    if (threadIdx.x == 0) pcnt[row] = (int)carry;
    __syncthreads();  // sb is free again
    PROF_MARK(114);
}

// prep_row's proposals for one row of K <= NT, left in their slots: raw_tok[i] = proposal i's token if it is
// kept, else -1, raw_lp[i] its log-prob. Duplicates go through a table of SORT_CAP token slots (linear
// probing; load <= 1/2, the host checks 2 * pow2(K) <= SORT_CAP) and their best log-prob bits in sb
// (16 KiB), 32-bit atomics only (64-bit shared atomics are CAS loops on sm_90). Of repeated tokens with the
// same best log-prob one is kept, whichever claims the slot first: the kept (token, log-prob) pairs are the
// same.
__device__ __forceinline__ void prep_row_hashed(i64 row, const int* rows_in, int K, float theta_tok, u64* sb,
                                                int* raw_tok, float* raw_lp) {
    u32* tab = (u32*)sb;
    u32* best = tab + SORT_CAP;
    const u32 EMPTY = 0xFFFFFFFFu;
    for (u32 i = threadIdx.x; i < SORT_CAP; i += NT) { tab[i] = EMPTY; best[i] = 0u; }
    const int* ti = rows_in + row * 2 * K;
    int tok = -1;
    float lp = 0.0f;
    if ((int)threadIdx.x < K) {
        tok = LDCV(ti + threadIdx.x);
        lp = __int_as_float(LDCV(ti + K + threadIdx.x));
    }
    const bool valid = tok >= 0 && lp > theta_tok;  // (NaN fails; a valid key is never 0 below)
    const u32 key = sortable_raw(lp);
    __syncthreads();
    u32 h = (u32)(((u64)(u32)tok * 0x9E3779B97F4A7C15ull) >> 40) & (SORT_CAP - 1u);
    if (valid) {
        for (;;) {
            const u32 old = atomicCAS(&tab[h], EMPTY, (u32)tok);
            if (old == EMPTY || old == (u32)tok) break;
            h = (h + 1u) & (SORT_CAP - 1u);
        }
        atomicMax(&best[h], key);
    }
    __syncthreads();
    const bool keep = valid && best[h] == key && atomicCAS(&best[h], key, 0u) == key;
    if ((int)threadIdx.x < K) {
        raw_tok[threadIdx.x] = keep ? tok : -1;
        raw_lp[threadIdx.x] = lp;
    }
    __syncthreads();  // sb is free again, the slots are complete
}

extern "C" __global__ void __launch_bounds__(NT, 1) prep_kernel(
    const int* rows_in, int R, int K, float theta_tok, const int* live_count, int use_count,
    int* ptok, float* plp, int* pcnt, const double* fac_in, double* fac_out, int nf) {
    __shared__ u64 s_sort[PREP_CAP];
    __shared__ u32 s_warp[33];
    const i64 row = blockIdx.x;
    if (row == 0)
        for (int i = threadIdx.x; i < nf; i += NT) fac_out[i] = fac_in[i];
    if (use_count && (int)(row % R) >= live_count[row / R]) {  // block-uniform
        if (threadIdx.x == 0) pcnt[row] = 0;
        return;
    }
    prep_row(row, rows_in, K, theta_tok, ptok, plp, pcnt, s_sort, PREP_CAP, s_warp);
}

// Keep the best BW finished keys (all that can still be reported), best first, at the front of fin.
__device__ __forceinline__ u32 fold_finished(u64* fin, u32 fc, u32 BW, u64* gbuf, Smem& s) {
    u32 m;
    const u64* best = block_top(fin, fc, BW, gbuf, s, &m);
    for (u32 i = threadIdx.x; i < m; i += NT) fin[i] = best[i];
    __syncthreads();
    return m;
}

// One block per query: steps t0 .. t1-1 of the search (semantics in trie/search_cpu.py), then, with
// finalize, the best BW finished keys into out_ids / out_scores [b, BW]. Proposal rows are prepared
// [b, R, K]: beam p reads row t (nar) or row p (AR). init: start from the root. Step t normalises with
// factors[t + 1 - fbase] (the host's float64 factors, so scores round as on the CPU); step last_step
// builds no live list.
// (The trie and scratch pointer tables are never written: restrict lets the compiler reload their entries instead
// of holding them in registers across the search, which spills less.)
__device__ __forceinline__ void search_body(
    const i64* __restrict__ TP, const i64* __restrict__ SP, const int* ptok, const float* plp, const int* pcnt, int R, int K, int nar,
    int t0, int t1, int last_step, int init, int finalize, float theta_sent, const double* factors, int fbase,
    i64* out_ids, float* out_scores, const int* rows_in, float theta_tok) {
#ifdef GTMKIT_EMU
    unsigned char* smem_raw = emu_dyn_smem();
#else
    extern __shared__ __align__(16) unsigned char smem_raw[];
#endif
    // dynamic shared memory (SEARCH_SMEM bytes), per block of the cluster
    u64* s_sort = (u64*)smem_raw;                    // [SORT_CAP]
    u64* s_sel = s_sort + SORT_CAP;                  // [SEL_CAP] block_select's copy of its keys
    double* s_fac = (double*)(s_sel + SEL_CAP);      // [FAC_CAP] this launch's length factors
    i64* s_first = (i64*)(s_fac + FAC_CAP);          // [BEAM_CAP] copies of the live beams' first child,
    u32* s_deg = (u32*)(s_first + BEAM_CAP);         // [BEAM_CAP]   children,
    float* s_score = (float*)(s_deg + BEAM_CAP);     // [BEAM_CAP]   score,
    u32* s_n = (u32*)(s_score + BEAM_CAP);           // [BEAM_CAP]   proposals
    u32* s_off = s_n + BEAM_CAP;                     // [BEAM_CAP + 1] work offsets
    u32* s_hist = s_off + BEAM_CAP + 1;              // [256]
    u32* s_warp = s_hist + 256;                      // [33]
    u32* s_misc = s_warp + 33;                       // [8]
    int* s_tok = (int*)(s_misc + 8);                 // [TOK_CAP] NAR: this step's proposal row, tokens
    float* s_lp = (float*)(s_tok + TOK_CAP);         // [TOK_CAP]   and log-probs
    Smem s;
    s.sort = s_sort;
    s.warp = s_warp;
    s.hist = s_hist;
    s.misc = s_misc;
    s.sel = s_sel;
    const Trie tr = load_trie(TP);
    const i64 q = blockIdx.x / CL;
    const u32 rank = cluster_rank();  // block `rank` of the query's cluster
    const i64 qb = q * CL + rank;
    const u32 BW = (u32)SP[SP_BW];
    const u32 lane = threadIdx.x & 31u;
    i64* live_node = (i64*)SP[SP_LIVE_NODE] + q * BW;
    float* live_score = (float*)SP[SP_LIVE_SCORE] + q * BW;
    int* live_parent = (int*)SP[SP_LIVE_PARENT] + q * BW;
    int* live_token = (int*)SP[SP_LIVE_TOKEN] + q * BW;
    i64* live_first = (i64*)SP[SP_LIVE_FIRST] + q * BW;
    u32* live_deg = (u32*)SP[SP_LIVE_DEG] + q * BW;
    int* live_count = (int*)SP[SP_LIVE_COUNT] + q;
    // what phase B reads per beam, this block's copies: in shared memory when BW fits, else in global
    // memory of the block's own
    const bool small = BW <= BEAM_CAP;
    i64* beam_first = small ? s_first : (i64*)SP[SP_BEAM_FIRST] + qb * BW;
    u32* beam_deg = small ? s_deg : (u32*)SP[SP_BEAM_DEG] + qb * BW;
    float* beam_score = small ? s_score : (float*)SP[SP_BEAM_SCORE] + qb * BW;
    u32* beam_n = small ? s_n : (u32*)SP[SP_BEAM_N] + qb * BW;
    u32* off = small ? s_off : (u32*)SP[SP_BEAM_OFF] + qb * (BW + 1);
    // a step's live candidates by position: composite, first child and children in two sets (step parity:
    // NAR reads the previous step's while it writes this step's); AR's node and slot in one
    u64* cand_base = (u64*)SP[SP_CAND] + q * 2 * BW * K;
    i64* cand_first_base = (i64*)SP[SP_SLOT_FIRST] + q * 2 * BW * K;
    u32* cand_deg_base = (u32*)SP[SP_SLOT_DEG] + q * 2 * BW * K;
    i64* cand_node = (i64*)SP[SP_SLOT_NODE] + q * BW * K;
    u32* match_all = (u32*)SP[SP_MATCH] + q * BW;
    u64* cnt = (u64*)SP[SP_CNT] + q * 4;  // [t % 3]: step t's live candidates (low word), finished keys (high)
    u32* cand_slot = (u32*)SP[SP_CAND_SLOT] + q * BW * K;
    u64* kept = (u64*)SP[SP_KEPT] + q * BW;
    const i64 fin_cap = SP[SP_FIN_CAP];
    u64* fin = (u64*)SP[SP_FIN] + q * fin_cap;
    int* fin_count = (int*)SP[SP_FIN_COUNT] + q;
    u64* gbuf = (u64*)SP[SP_SCRATCH] + q * SP[SP_SCRATCH_STRIDE];
    const float NEG_INF = __uint_as_float(0xff800000u);

    PROF_BEGIN;
    // the launch's factors, read once (they may be in pinned host memory: one read over the bus, not one a
    // step); the first NT are stored after the rows are prepared, so the two reads over the bus overlap
    const bool fac_smem = t1 - t0 <= FAC_CAP;
    // hash0 (the first row hashed, top of file), when: step 0 from the root with the proposals among the root's
    // children (its degree >= K), no fold possible (W <= K), one work item a thread, the slots in s_tok; the same
    // in every block
    const bool hash0 = rows_in && nar && init && t0 == 0 && tr.rdeg >= (i64)K && fin_cap >= (i64)K &&
                       K <= NT && K <= TOK_CAP;
    const double fac0 = fac_smem && (int)threadIdx.x < t1 - t0 ? factors[t0 + 1 - fbase + threadIdx.x] : 0.0;
    if (rows_in) {  // NAR: the query's proposal rows prepared here, block `rank` taking rows rank, rank + CL, ..
        // (no prep_kernel launch; K <= NT and 2 * pow2(K) <= SORT_CAP, the host checks)
        for (int r = (int)rank; r < R; r += CL) {
            if (hash0 && r == 0) prep_row_hashed(q * R, rows_in, K, theta_tok, s.sort, s_tok, s_lp);
            else prep_row(q * R + r, rows_in, K, theta_tok, (int*)ptok, (float*)plp, (int*)pcnt, s.sort, SORT_CAP, s.warp);
        }
    }
    PROF_MARK(9);  // prep rows (block 0's)
    if (fac_smem && (int)threadIdx.x < t1 - t0) s_fac[threadIdx.x] = fac0;
    for (int i = threadIdx.x + NT; fac_smem && i < t1 - t0; i += NT) s_fac[i] = factors[t0 + 1 - fbase + i];
    if (init && rank == 0) {  // the root, score 0; nothing finished
        for (u32 i = threadIdx.x; i < BW; i += NT) {
            live_node[i] = i == 0 ? 0 : -1;
            live_score[i] = i == 0 ? 0.0f : NEG_INF;
            live_parent[i] = -1;
            live_token[i] = -1;
        }
        if (threadIdx.x == 0) {  // (AR's caller reads the list; every block starts from the root below)
            live_first[0] = tr.rfirst;
            live_deg[0] = (u32)tr.rdeg;
            *live_count = 1;
            *fin_count = 0;
        }
    }
    if (rank == 0 && threadIdx.x < 4) cnt[threadIdx.x] = 0;
    u32 nl = 1, fc = 0;
    if (!hash0) cluster_sync();  // rows prepared, counters cleared
    else __syncthreads();        // (block 0 runs step 0 alone: its own row and counters)
    if (!init) {
        nl = (u32)LDCG(live_count);
        fc = (u32)LDCG(fin_count);
        cluster_sync();  // every thread has read the counts before block 0 may store new ones
    }
    PROF_MARK(0);  // start: the root, counters, the first barriers

    u32 prev_n = 0;     // NAR: the previous step's live candidates
    u64 prev_tau = 0;   //   and the composite threshold of the BW best of them
    for (int t = t0; t < t1 && nl > 0; ++t) {
        const bool last = t == last_step;
        const u32 par = (u32)(t & 1);
        u64* cand = cand_base + par * BW * K;
        i64* cand_first = cand_first_base + par * BW * K;
        u32* cand_deg = cand_deg_base + par * BW * K;
        u64* counters = cnt + t % 3;  // block 0 clears the set of step t + 2 after this step's barrier
        const double factor = fac_smem ? s_fac[t - t0] : factors[t + 1 - fbase];
        PROF_STEP_BEGIN;

        // NAR: the step's one proposal row, which every work item binary-searches, goes to shared memory
        // (from global memory each probe of the search was a dependent L2 round trip). Its first NT entries
        // are loaded here and stored after phase A, so the two phases' reads overlap.
        const bool row_smem = nar && K <= TOK_CAP;
        const i64 nar_row = q * R + t;
        u32 row_n = 0, nar_n = 0;
        int tok0 = 0;
        float lp0 = 0.0f;
        const bool idle0 = hash0 && t == t0 && rank != 0;  // hash0: not this block's step (its row is not ready)
        const bool raw = hash0 && t == t0;  // hash0: the row is in s_tok / s_lp already, K slots
        if (nar && !idle0 && !raw) {
            nar_n = (u32)LDCG(pcnt + nar_row);  // prepared by this launch's cluster: read past L1
            row_n = row_smem ? nar_n : 0u;
            // the row's first NT slots, kept or not, loaded with its count instead of after it (the count is read
            // once, here, not again for each beam once the previous step's candidates are in)
            if (row_smem && threadIdx.x < (u32)K) {
                tok0 = LDCG(ptok + nar_row * K + threadIdx.x);
                lp0 = LDCG(plp + nar_row * K + threadIdx.x);
            }
        }

        // Phase A: the live beams into this block's beam arrays. From the live list at the launch's first
        // step and always in AR; after that NAR's beams are the previous step's candidates at or above
        // prev_tau, taken in candidate order by every block alike: no live list is written, read or waited
        // for (AR's caller reads its live list, best first).
        const bool from_cand = nar && t > t0;
        if (from_cand) {
            const u64* pc = cand_base + (par ^ 1u) * BW * K;
            const i64* pf = cand_first_base + (par ^ 1u) * BW * K;
            const u32* pd = cand_deg_base + (par ^ 1u) * BW * K;
            const bool cut = prev_n > BW;  // block_select ran: its shared copy holds the first SEL_CAP keys
            u32* kidx = beam_n;            // the kept candidates' indices (beam_n is written after)
            u32 kc = 0;
            for (u32 base = 0; cut && base < prev_n; base += NT) {
                const u32 i = base + threadIdx.x;
                const u64 x = i < prev_n ? (i < SEL_CAP ? s.sel[i] : LDCG(pc + i)) : 0ull;
                const bool keep = i < prev_n && x >= prev_tau;
                u32 tot;
                const u32 pos = kc + block_scan(keep ? 1u : 0u, s.warp, &tot);
                if (keep) kidx[pos] = i;
                kc += tot;
            }
            __syncthreads();  // kidx is complete
            for (u32 p = threadIdx.x; p < nl; p += NT) {  // one round trip for all: the keys are in hand
                const u32 i = cut ? kidx[p] : p;
                const u64 x = cut && i < SEL_CAP ? s.sel[i] : LDCG(pc + i);
                beam_first[p] = LDCG(pf + i);
                beam_deg[p] = LDCG(pd + i);
                beam_score[p] = unsortable((u32)(x >> 32));
            }
            __syncthreads();  // beam_deg is complete
        }
        // the work of every live beam, min(children, proposals): a beam walks the shorter of its child list
        // and its proposal row, binary-searching each entry in the other
        u32 carry = 0;
        for (u32 base = 0; base < nl; base += NT) {
            u32 p = base + threadIdx.x;
            u32 work = 0;
            if (p < nl) {
                u32 n = idle0 ? 0u : raw ? (u32)K : nar ? nar_n
                      : (u32)LDCG(pcnt + q * R + (nar ? t : (int)p));  // prepared by any block
                u32 deg;
                if (from_cand) {
                    deg = beam_deg[p];
                } else if (init && t == t0) {  // the root (the host's constants: no select0 chain)
                    deg = (u32)tr.rdeg;
                    beam_first[p] = tr.rfirst;
                    beam_deg[p] = deg;
                    beam_score[p] = 0.0f;
                } else {  // the live list is block 0's: read past L1, which may hold an older one
                    deg = LDCG(live_deg + p);
                    beam_first[p] = LDCG(live_first + p);
                    beam_deg[p] = deg;
                    beam_score[p] = LDCG(live_score + p);
                }
                beam_n[p] = n;
                work = deg < n ? deg : n;
            }
            u32 tot;
            u32 ex = block_scan(work, s.warp, &tot);
            if (p < nl) off[p] = carry + ex;
            carry += tot;
        }
        const u32 W = carry;
        if (threadIdx.x < row_n) {
            s_tok[threadIdx.x] = tok0;
            s_lp[threadIdx.x] = lp0;
        }
        for (u32 i = threadIdx.x + NT; i < row_n; i += NT) {
            s_tok[i] = LDCG(ptok + nar_row * K + i);
            s_lp[i] = LDCG(plp + nar_row * K + i);
        }
        PROF_MARK(2);  // phase A
        // a step finishes at most one key per work item: fold only when W more could overflow fin
        // (every block computes the same fc and W: the branch is cluster-uniform)
        if ((i64)fc + (i64)W > fin_cap) {
            if (rank == 0) fold_finished(fin, fc, BW, gbuf, s);
            fc = fc < BW ? fc : BW;
            cluster_sync();
        }
        PROF_MARK(1);  // fold
        PROF_ADD(10, W);
        PROF_ADD(12, 1);
        if (threadIdx.x == 0) off[nl] = W;
        __syncthreads();

        // Phase B: the cluster's blocks take the work items in warp-sized chunks dealt in turn (chunk c to
        // block c % CL), so that even a step with fewer items than a block has threads spreads over every
        // SM (step 0 has ~K items: with turns of NT one block got them all). Work item w belongs to the beam
        // p with off[p] <= w < off[p+1]; it finds its entry in the other list (B1). A match above
        // theta_sent (slot p*K+k) becomes a finished key if terminal and a live candidate if it has
        // children, whose child range is computed right there (B2). With a cluster a step is about one
        // round of items a thread, so B2 runs in the same round as the B1 that found the match (a
        // separate B2 over a compacted match list cost a barrier and two dependent reads a step). Loop
        // bounds are warp-uniform so every lane reaches the warp_append ballots.
        const bool solo = hash0 && t == t0 && init;
        for (u32 base = solo ? (rank == 0 ? (threadIdx.x >> 5) * 32 : W) : (rank + CL * (threadIdx.x >> 5)) * 32;
             base < W; base += solo ? NT : NT * CL) {
            u32 w = base + lane;
            bool hit = false;
            u32 slot = 0, p = 0, k = 0;
            i64 c = 0, row = 0;
            float sc = 0.0f;
            if (w < W) {
                u32 lo = 0, hi = nl;  // off[lo] <= w < off[hi]
                while (hi - lo > 1) {
                    u32 mid = (lo + hi) >> 1;
                    if (off[mid] <= w) lo = mid; else hi = mid;
                }
                p = lo;
                const u32 i = w - off[p];
                row = q * R + (nar ? t : (int)p);
                const int* toks = row_smem ? s_tok : ptok + row * K;
                const u32 n = beam_n[p], deg = beam_deg[p];
                const i64 first = beam_first[p];
                bool match;
                if (deg < n) {  // child i: its label among the proposals
                    c = first + i;
                    i64 lab = label_of(tr, c);
                    k = tokens_lower_bound(toks, n, lab);
                    match = k < n && (i64)toks[k] == lab;
                } else if (first == tr.rfirst && tr.rnbits > 0) {  // proposal i among the root's children:
                    k = i;                                            // one read of the root directory
                    const i64 tok = toks[k];
                    match = false;
                    if (tok >= 0 && tok < tr.rnbits) {  // (hash0: -1 marks a dropped slot)
                        const u64 word = tr.rbits[tok >> 6];
                        const int bit = (int)(tok & 63);
                        match = (word >> bit) & 1ull;
                        c = first + (i64)tr.rrank[tok >> 6] + (i64)__popcll(word & ((1ull << bit) - 1ull));
                    }
                } else {  // proposal i: its token among the children
                    k = i;
                    i64 tok = toks[k];
                    c = children_lower_bound(tr, first, first + deg, tok);
                    match = c < first + deg && label_of(tr, c) == tok;
                }
                if (match) {
                    sc = beam_score[p] + (row_smem ? s_lp[k] : plp[row * K + k]);
                    hit = sc > theta_sent;
                    slot = p * (u32)K + k;
                }
            }
            bool is_live = false, is_fin = false;
            u64 live_key = 0, fin_key = 0;
            i64 child_first = 0;
            u32 child_deg = 0;
            if (hit) {
                const u64 term_word = tr.term[c >> 6];  // loaded ahead of its use
                const bool term = (term_word >> (c & 63)) & 1ull;
                u64 rd0 = 0, rd1 = 0;  // the key id's rank directory row, loaded before the
                if (term) {            // select0 chain below and used after it
                    rd0 = tr.term_rank[2 * (c >> 9)];
                    rd1 = tr.term_rank[2 * (c >> 9) + 1];
                }
                if (!last) {
                    // the child's own child range, which the next step reads (and which tells
                    // whether a terminal child has children: a non-terminal one always has)
                    i64 z1;
                    const i64 z = zero_pair(tr, c, &z1);
                    child_deg = (u32)(z1 - z - 1);
                    if (child_deg > 0) {
                        is_live = true;
                        live_key = ((u64)sortable(sc) << 32) | (u64)(0xFFFFFFFFu - (u32)c);
                        child_first = z - c;
                    }
                }
                if (term) {  // rank1(terminal, c) from the row and word already loaded
                    int ww = (int)((c >> 6) & 7), bit = (int)(c & 63);
                    u64 key = rd0 + (ww ? (rd1 >> (9 * (ww - 1))) & 511ull : 0ull);
                    if (bit) key += (u64)__popcll(term_word & ((1ull << bit) - 1ull));
                    float norm = (float)((double)sc * factor);
                    norm = norm == norm ? norm : NEG_INF;  // (+inf x a factor of 0: NaN ranks as -inf)
                    is_fin = true;
                    fin_key = ((u64)sortable(norm) << 32) | (u64)(0xFFFFFFFFu - (u32)key);
                }
            }
            u32 pl, pf;  // positions in the query's lists, over the whole cluster
            warp_append2(is_live, is_fin, counters, &pl, &pf);
            if (is_live) {
                // the labels the next step reads first if this candidate is kept, on their way to L2
#if !TRIE_TAILS  // with tails a label's entry needs a rank: no address to prefetch yet
#if TRIE_LOW8
                PREFETCH_L2(tr.low8 + child_first - 1);
#else
                PREFETCH_L2(tr.low + child_first - 1);
#endif
                if (tr.hbits) PREFETCH_L2(tr.high + ((child_first - 1) * tr.hbits >> 6));
#endif
                cand[pl] = live_key;
                cand_first[pl] = child_first;
                cand_deg[pl] = child_deg;
                if (!nar) {
                    cand_slot[pl] = slot;
                    cand_node[pl] = c;
                }
            }
            if (is_fin) fin[fc + pf] = fin_key;
        }
        cluster_sync();  // every block's candidates and finished keys are written
        const u64 both = LDCG(counters);
        const u32 n_live = (u32)both;
        fc += (u32)(both >> 32);
        // step t + 2's counters: every block read them (as step t - 1's) before this barrier, and none adds
        // to them before the next step's barrier, which block 0 reaches after this store
        if (rank == 0 && threadIdx.x == 0) cnt[(t + 2) % 3] = 0;
        PROF_MARK(3);  // phase B2
        PROF_ADD(11, n_live);

        // The best BW candidates (none on the last step): every candidate at or above the BW-th composite
        // (exact: composites are distinct).
        const u32 m = n_live < BW ? n_live : BW;
        if (nar) {  // every block finds the same threshold; the next step's phase A takes the candidates
            prev_tau = n_live > BW ? block_select(cand, n_live, BW, s) : 0ull;
            prev_n = n_live;
            PROF_MARK(5);  // radix select
        } else {  // AR: block 0 writes the new live list, best first (its composites sorted, each to its rank)
            if (rank == 0) {
                const u64 tau = n_live > BW ? block_select(cand, n_live, BW, s) : 0ull;
                PROF_MARK(5);  // radix select
                if (threadIdx.x == 0) s.misc[3] = 0;
                __syncthreads();
                for (u32 base = threadIdx.x & ~31u; base < n_live; base += NT) {
                    u32 i = base + lane;
                    u64 x = i < n_live ? LDCG(cand + i) : 0ull;
                    bool keep = i < n_live && x >= tau;
                    u32 pos = warp_append(keep, &s.misc[3]);
                    if (keep) {
                        kept[pos] = x;
                        match_all[pos] = i;
                    }
                }
                PROF_MARK(6);  // compaction
                if (m > 0) {
                    u32 n2 = pow2_at_least(m);
                    u64* sb = n2 <= SORT_CAP ? s.sort : gbuf;
                    __syncthreads();  // kept[] is complete
                    for (u32 i = threadIdx.x; i < n2; i += NT) sb[i] = i < m ? kept[i] : 0ull;
                    if (n2 <= NT && sb == s.sort && 2 * n2 <= SORT_CAP) block_sort_desc_reg(sb, n2);
                    else block_sort_desc(sb, n2);
                    PROF_MARK(7);  // sort
                    for (u32 i = threadIdx.x; i < m; i += NT) {
                        const u64 x = kept[i];
                        u32 lo = 0, hi = m;  // its rank: sb[0, m) is descending, x is in it once
                        while (lo < hi) {
                            u32 mid = (lo + hi) >> 1;
                            if (sb[mid] > x) lo = mid + 1; else hi = mid;
                        }
                        const Cand cd = load_cand(match_all[i], cand_slot, cand_node, cand_first, cand_deg);
                        write_live(lo, x, cd, K, ptok, q * R, live_node, live_first, live_deg, live_score, live_parent,
                                   live_token);
                    }
                }
                for (u32 i = m + threadIdx.x; i < BW; i += NT) {
                    live_node[i] = -1;
                    live_score[i] = NEG_INF;
                    live_parent[i] = -1;
                    live_token[i] = -1;
                }
            }
            cluster_sync();  // the new live list is written
        }
        nl = m;
        PROF_MARK(4);  // new live list
        PROF_STEP_END(t, W);
    }
    if (finalize && BW <= SORT_CAP) {
        // The best BW finished keys, best first, ranked by the whole cluster: every block selects the same
        // ones into its shared memory, then ranks a share of them by counting the larger ones (8 lanes a
        // key), faster than one block's bitonic sort of them.
        const u32 m = fc < BW ? fc : BW;
        const u64 tau = fc > BW ? block_select(fin, fc, BW, s) : 0ull;
        u32 carry = 0;  // kept in index order (a prefix sum, not atomics): the same order in every block
        for (u32 base = 0; base < fc; base += NT) {
            u32 i = base + threadIdx.x;
            u64 x = i < fc ? LDCG(fin + i) : 0ull;
            bool keep = i < fc && x >= tau;
            u32 tot;
            u32 pos = carry + block_scan(keep ? 1u : 0u, s.warp, &tot);
            if (keep) s.sort[pos] = x;
            carry += tot;
        }
        cluster_sync();  // every block has its copy: fin may be overwritten
        const u32 per = (m + CL - 1) / CL;  // keys block `rank` ranks: rank * per .. (rank + 1) * per - 1
        for (u32 kb = 0; kb < per; kb += NT / 8) {
            const u32 j = rank * per + kb + threadIdx.x / 8, sub = threadIdx.x & 7u;
            const bool mine = kb + threadIdx.x / 8 < per && j < m;
            const u64 x = mine ? s.sort[j] : 0ull;
            u32 above = 0;
            for (u32 i = sub; mine && i < m; i += 8) above += s.sort[i] > x ? 1u : 0u;
            above += __shfl_xor_sync(FULL, above, 1);
            above += __shfl_xor_sync(FULL, above, 2);
            above += __shfl_xor_sync(FULL, above, 4);
            if (mine && sub == 0) {
                out_ids[q * BW + above] = (i64)(0xFFFFFFFFu - (u32)x);
                out_scores[q * BW + above] = unsortable((u32)(x >> 32));
                fin[above] = x;  // the folded list: later steps (AR) continue from it
            }
        }
        for (u32 i = m + threadIdx.x; rank == 0 && i < BW; i += NT) {
            out_ids[q * BW + i] = -1;
            out_scores[q * BW + i] = NEG_INF;
        }
        fc = m;
    } else if (finalize && rank == 0) {  // more than SORT_CAP: block 0 sorts them in global memory
        u32 m;
        const u64* best = block_top(fin, fc, BW, gbuf, s, &m);
        for (u32 i = threadIdx.x; i < BW; i += NT) {
            u64 x = i < m ? best[i] : 0ull;
            out_ids[q * BW + i] = i < m ? (i64)(0xFFFFFFFFu - (u32)x) : -1;
            out_scores[q * BW + i] = i < m ? unsortable((u32)(x >> 32)) : NEG_INF;
            if (i < m) fin[i] = x;
        }
        fc = m;
    }
    if (rank == 0 && threadIdx.x == 0) {
        *live_count = (int)nl;
        *fin_count = (int)fc;
    }
    PROF_MARK(8);  // finalize
}

extern "C" __global__ void __search_cluster__(CL) __launch_bounds__(NT, 1) search_kernel(
    const i64* __restrict__ TP, const i64* __restrict__ SP, const int* ptok, const float* plp, const int* pcnt, int R, int K, int nar,
    int t0, int t1, int last_step, int init, int finalize, float theta_sent, const double* factors, int fbase,
    i64* out_ids, float* out_scores, const int* rows_in, float theta_tok) {
    search_body(TP, SP, ptok, plp, pcnt, R, K, nar, t0, t1, last_step, init, finalize, theta_sent, factors, fbase,
                out_ids, out_scores, rows_in, theta_tok);
}

// A resident NAR search (trie/server_cuda.py): one cluster waits for requests in pinned host memory and runs
// each as a search_kernel launch from the root would (rows prepared from the staging rows_in, all R steps,
// results into out_ids / out_scores), with no launch a request. ctl[0]: the host's request number
// (SERVE_STOP ends the kernel); ctl[1]: the last request done, stored after the results are visible to the
// host. max_req > 0 ends it after that many requests (the CPU emulation's tests).
#define SERVE_STOP 0xFFFFFFFFu
extern "C" __global__ void __search_cluster__(CL) __launch_bounds__(NT, 1) serve_kernel(
    const i64* __restrict__ TP, const i64* __restrict__ SP, const int* ptok, const float* plp, const int* pcnt, int R, int K,
    float theta_sent, const double* factors, i64* out_ids, float* out_scores, const int* rows_in, float theta_tok,
    u32* ctl, int max_req) {
    __shared__ u32 s_req;
    u32 seen = ld_acquire_sys(ctl + 1);
    for (int served = 0; max_req <= 0 || served < max_req; ++served) {
        if (threadIdx.x == 0) {  // every block waits on its own: the search's barriers align them after
            u32 v;
            while ((v = ld_acquire_sys(ctl)) == seen) {
            }
            s_req = v;
        }
        __syncthreads();
        const u32 v = s_req;
        __syncthreads();  // read by all before thread 0 writes it again
        if (v == SERVE_STOP) break;
        seen = v;
        search_body(TP, SP, ptok, plp, pcnt, R, K, 1, 0, R, R - 1, 1, 1, theta_sent, factors, 0, out_ids, out_scores,
                    rows_in, theta_tok);
        __threadfence_system();  // this thread's results reach the host before the request is marked done
        cluster_sync();
        if (cluster_rank() == 0 && threadIdx.x == 0) st_release_sys(ctl + 1, v);
    }
}
