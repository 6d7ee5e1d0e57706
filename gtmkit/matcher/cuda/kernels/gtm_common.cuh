// Device code shared by the CD+GTM kernels (gtm_step.cu, gtm_fused.cu, postfilter.cu).
// NVRTC: built-in types only, no std headers. Included with the kernels folder on the include path.
#pragma once

typedef unsigned long long u64;
typedef unsigned int u32;
typedef long long i64;

// Programmatic dependent launch (sm_90+; matcher/cuda/pdl.py launches with it inside GraphedBeamSearch): a kernel
// lets the next one in its stream start at once (GRID_DEP_LAUNCH: that one's blocks take SMs this one leaves
// free and run up to their GRID_DEP_WAIT), and waits at GRID_DEP_WAIT until the kernel before it has finished
// and its writes are visible. Nothing before GRID_DEP_WAIT may read what an earlier kernel wrote or write
// anything an earlier kernel reads: only the pointer tables (written once, before any launch) are read there.
// Without PDL both are no-ops.
#if !defined(GTMKIT_EMU) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define GRID_DEP_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define GRID_DEP_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define GRID_DEP_LAUNCH() do { } while (0)
#define GRID_DEP_WAIT() do { } while (0)
#endif

#define SPAN 64.0f         // score bins cover [best - SPAN, best]; lower scores share the last bin

struct Trie {
    const i64* node_offsets; const int* child_tokens; const i64* level_offsets; int n_levels;  // n_levels = L + 2
    int jagged; const i64* level_base; const i64* level_width; const i64* part_offsets;
    const int* part_bitmask; const int* part_bloom; int nb;
    const u64* bitmask_table; int W; const u64* bloom_table; int Wb; const i64* bloom_base;
    i64 n_internal;
    const int* node_live; int live;  // paused ads (matcher/live.py): live != 0 prunes nodes whose count is 0
};

struct Req {
    const u64* bitmask; int A;              // [B, A, W]
    const i64* sig_off; const u64* sigs;    // [B, nb+1], [n, Wb]
    const i64* code_off; const i64* codes;  // [B, nb+1], [n]
    const u64* sparse;                      // [B] SparseReq images (sparse_req.cuh)
};

// Kernels receive their tables as one int64 array of pointers and sizes (built once on the host:
// gtmkit/matcher/cuda/backend.py, same order), which keeps launches short and CuPy-friendly.
__device__ __forceinline__ Trie load_trie(const i64* P) {
    Trie t;
    t.node_offsets = (const i64*)P[0]; t.child_tokens = (const int*)P[1]; t.level_offsets = (const i64*)P[2];
    t.n_levels = (int)P[3]; t.jagged = (int)P[4]; t.level_base = (const i64*)P[5]; t.level_width = (const i64*)P[6];
    t.part_offsets = (const i64*)P[7]; t.part_bitmask = (const int*)P[8]; t.part_bloom = (const int*)P[9];
    t.nb = (int)P[10]; t.bitmask_table = (const u64*)P[11]; t.W = (int)P[12]; t.bloom_table = (const u64*)P[13];
    t.Wb = (int)P[14]; t.bloom_base = (const i64*)P[15]; t.n_internal = P[16];
    // the flag is read from device memory at each launch, so a captured graph sees a pause made after its capture
    t.node_live = (const int*)P[17]; t.live = *(const int*)P[18];
    return t;
}

// CD once ads are paused: a node with no active ad below it is absent (docs/design.md §9).
__device__ __forceinline__ bool cd_live(const Trie& t, i64 node) { return !t.live || t.node_live[node] > 0; }
// The same from the pointer table at each use: for a kernel at its register limit, where two more values held
// across its loop spill; the table's words are uniform loads that L1 keeps.
__device__ __forceinline__ bool cd_live_at(const i64* P, i64 node) {
    return !*(const int*)P[18] || ((const int*)P[17])[node] > 0;
}

__device__ __forceinline__ Req load_req(const i64* P) {
    Req q;
    q.bitmask = (const u64*)P[0]; q.A = (int)P[1]; q.sig_off = (const i64*)P[2]; q.sigs = (const u64*)P[3];
    q.code_off = (const i64*)P[4]; q.codes = (const i64*)P[5]; q.sparse = (const u64*)P[6];
    return q;
}

__device__ __forceinline__ u32 sortable(float f) {
    u32 u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float unsortable(u32 k) {
    u32 u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    return __uint_as_float(u);
}

// A candidate's composite from its score and number (the fused step's): NaN ranks as -inf, -0 ties +0 (as on the
// CPU).
__device__ __forceinline__ u64 candidate_key(float sc, u32 idx) {
    if (sc != sc) sc = -__int_as_float(0x7f800000);
    if (sc == 0.0f) sc = 0.0f;
    return ((u64)sortable(sc) << 32) | (u64)(0xFFFFFFFFu - idx);
}

__device__ __forceinline__ int depth_of(const Trie& t, i64 node) {
    int a = 0, b = t.n_levels - 1;
    while (b - a > 1) { int m = (a + b) >> 1; if (t.level_offsets[m] <= node) a = m; else b = m; }
    return a;
}

// ---- GTM: does any of a node's partitions admit the request (docs/design.md §2) ----------------------
// Shaped for latency: walking partitions one by one, each one's table rows would only be fetched once its id
// has arrived; here the ids of up to PF partitions are loaded together, then the partitions are tested in
// order, each loading the words it needs. No prefetches: an L1 prefetch of a partition's rows costs the L1
// pipeline a pass a distinct line, as a load does, and the divergent loads of ~700 tests a block already
// bound the round.
#define PF 4

__device__ __forceinline__ bool partition_passes(const Trie& t, const Req& q, int b, i64 p, int bid, int bloom0) {
    const u64* row = t.bitmask_table + (i64)bid * t.W;
    const u64* rq = q.bitmask + (i64)b * q.A * t.W;
    for (int a = 0; a < q.A; ++a) {
        u64 hit = 0;
        for (int w = 0; w < t.W; ++w) hit |= row[w] & rq[a * t.W + w];
        if (!hit) return false;
    }
    for (int k = 0; k < t.nb; ++k) {
        int id = k == 0 ? bloom0 : t.part_bloom[p * t.nb + k];
        const u64* br = t.bloom_table + (t.bloom_base[k] + id) * t.Wb;
        bool found = false;
        for (i64 s = q.sig_off[b * (t.nb + 1) + k]; s < q.sig_off[b * (t.nb + 1) + k + 1] && !found; ++s) {
            const u64* sg = q.sigs + s * t.Wb;
            bool inside = true;
            for (int w = 0; w < t.Wb; ++w) inside &= (br[w] & sg[w]) == sg[w];
            found = inside;
        }
        if (!found) return false;
    }
    return true;
}

// Does any of the node's partitions pass `part` (partition id p, its bitmask id, its first Bloom id)?
template <class PartTest>
__device__ __forceinline__ bool node_passes_by(const Trie& t, i64 node, int depth, const PartTest& part) {
    i64 s0, s1;
    if (t.jagged) { s0 = t.part_offsets[node]; s1 = t.part_offsets[node + 1]; }
    else { i64 w = t.level_width[depth]; s0 = t.level_base[depth] + (node - t.level_offsets[depth]) * w; s1 = s0 + w; }
    for (i64 p0 = s0; p0 < s1; p0 += PF) {
        int bid[PF], bl[PF];
#pragma unroll
        for (int x = 0; x < PF; ++x) {
            bid[x] = p0 + x < s1 ? t.part_bitmask[p0 + x] : -1;
            bl[x] = (p0 + x < s1 && t.nb > 0) ? t.part_bloom[(p0 + x) * t.nb] : 0;
        }
#pragma unroll
        for (int x = 0; x < PF; ++x) {
            if (bid[x] < 0) return false;  // past the node's partitions; fixed layouts also pad with -1
            if (part(p0 + x, bid[x], bl[x])) return true;
        }
    }
    return false;
}

struct FullTest {  // node_passes_by's partition test over the request's full rows
    const Trie& t;
    const Req& q;
    int b;
    __device__ __forceinline__ bool operator()(i64 p, int bid, int bl) const { return partition_passes(t, q, b, p, bid, bl); }
};

__device__ bool node_passes_fast(const Trie& t, const Req& q, int b, i64 node, int depth) {
    return node_passes_by(t, node, depth, FullTest{t, q, b});
}

// Depth of a node from level offsets held in shared memory (n_levels entries).
__device__ __forceinline__ int depth_in(const i64* lvl, int n_levels, i64 node) {
    int a = 0, z = n_levels - 1;
    while (z - a > 1) { int m = (a + z) >> 1; if (lvl[m] <= node) a = m; else z = m; }
    return a;
}

__device__ __forceinline__ float load_lp(const void* lp, int dtype, i64 idx) {
    if (dtype == 0) return ((const float*)lp)[idx];
    unsigned short h = ((const unsigned short*)lp)[idx];
    if (dtype == 2) return __uint_as_float(((u32)h) << 16);  // bfloat16
#ifdef GTMKIT_EMU
    return emu_half_to_float(h);                                 // float16
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));             // float16
    return f;
#endif
}

// Linear score bins below the request's best score `top` (bin 0 = best): a lower bin never holds a
// lower score, so scanning bins in order visits candidates best first, bin by bin.
template <int NBINS>
__device__ __forceinline__ int bin_of(u64 comp, float top) {
    float s = unsortable((u32)(comp >> 32));
    if (!(s > -3.0e38f)) return NBINS - 1;
    float x = (top - s) * (NBINS / SPAN);
    if (!(x > 0.0f)) return 0;  // at or above top (inputs that are not log-probs)
    return x < (float)(NBINS - 1) ? (int)x : NBINS - 1;  // NaN (no finite best) lands in the last bin too
}

// Inclusive prefix sum over the block (blockDim.x == 1024) in thread order; warp shuffles, two barriers.
__device__ u32 block_scan(u32 v, u32* warp_tot) {
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    for (int o = 1; o < 32; o <<= 1) { u32 n = __shfl_up_sync(0xffffffffu, v, o); if (lane >= o) v += n; }
    if (lane == 31) warp_tot[wid] = v;
    __syncthreads();
    if (wid == 0) {
        u32 w = lane < (int)(blockDim.x >> 5) ? warp_tot[lane] : 0u;  // blocks of fewer than 32 warps
        for (int o = 1; o < 32; o <<= 1) { u32 n = __shfl_up_sync(0xffffffffu, w, o); if (lane >= o) w += n; }
        warp_tot[lane] = w;
    }
    __syncthreads();
    u32 out = v + (wid > 0 ? warp_tot[wid - 1] : 0u);
    __syncthreads();
    return out;
}

