// A request's GTM rows as at most SL_W words a matcher ("slots"), kept in shared memory by the fused step
// (gtm_fused.cu, SPT=2). NVRTC: built-in types only. Needs gtm_common.cuh first. The host builds each request's
// image in this struct's byte layout (gtmkit/matcher/slot_req.py, which must match: u64 arrays first).
//
// Why (beyond sparse_req.cuh's non-zero words): a partition then loads its bitmask words and its first Bloom
// row's words at once, SL_W + SL_W independent loads in one round trip, and tests every attribute and
// signature from registers; with word lists the attributes' and signatures' loads came one after another.
//   attribute a passes  <=>  OR_j (row[bm_w[j]] & bm_m[a][j]) != 0   (the request's words of a, in its slots)
//   signature s inside  <=>  AND_j (br[bl_w[k][j]] & bl_m[s][j]) == bl_m[s][j]

#ifndef SL_A
#define SL_A 16   // bitmask attributes
#endif
#define SL_W 4    // slots: distinct request words of the bitmask row, and of each Bloom matcher's row
#ifndef SL_NB
#define SL_NB 4   // Bloom matchers
#endif
#ifndef SL_S
#define SL_S 16   // signatures, all Bloom matchers
#endif

struct SlotReq {
    u64 bm_m[SL_A][SL_W];   // attribute a's request word in each bitmask slot (0: none)
    u64 bl_m[SL_S][SL_W];   // signature s's word in each slot of its matcher
    u32 bm_w[SL_W];         // the bitmask row's word of each slot
    u32 bl_w[SL_NB][SL_W];  // matcher k's Bloom row word of each slot
    u32 bl_n[SL_NB];        // matcher k's slots in use
    u32 k_end[SL_NB];       // matcher k's signatures: [k_end[k - 1], k_end[k])
    int A, bm_n, ok, pad;   // bm_n: bitmask slots in use; ok: everything fit (else the full test)
};

static_assert(sizeof(SlotReq) == 8 * SL_W * (SL_A + SL_S) + 4 * (SL_W + SL_NB * SL_W + 2 * SL_NB + 4), "packed as on the host");

// Request b's image (q.slots) into shared memory, a u64 a thread; the caller syncs before reading it.
__device__ __forceinline__ void load_slot_req(const Req& q, int b, SlotReq& sp, int tid, int nt) {
    const int n = (int)(sizeof(SlotReq) / 8);
    const u64* src = q.slots + (i64)b * n;
    for (int i = tid; i < n; i += nt) reinterpret_cast<u64*>(&sp)[i] = src[i];
}

__device__ __forceinline__ bool sigs_inside(const SlotReq& sp, const u64* v, u32 s0, u32 s1) {
    for (u32 s = s0; s < s1; ++s) {
        bool inside = true;
#pragma unroll
        for (int j = 0; j < SL_W; ++j) inside &= (v[j] & sp.bl_m[s][j]) == sp.bl_m[s][j];
        if (inside) return true;
    }
    return false;
}

// partition_passes from the slots (same answer).
__device__ __forceinline__ bool partition_passes_slot(const Trie& t, const SlotReq& sp, i64 p, int bid, int bloom0) {
    const u64* row = t.bitmask_table + (i64)bid * t.W;
    u64 x[SL_W], y[SL_W];
    const u64* br0 = t.bloom_table + (t.nb > 0 ? (t.bloom_base[0] + bloom0) * t.Wb : 0);
#pragma unroll
    for (int j = 0; j < SL_W; ++j) {  // all issued before any is used
        x[j] = j < sp.bm_n ? row[sp.bm_w[j]] : 0ull;
        y[j] = t.nb > 0 && j < (int)sp.bl_n[0] ? br0[sp.bl_w[0][j]] : 0ull;
    }
    for (int a = 0; a < sp.A; ++a) {
        u64 hit = 0;
#pragma unroll
        for (int j = 0; j < SL_W; ++j) hit |= x[j] & sp.bm_m[a][j];
        if (!hit) return false;
    }
    if (t.nb > 0 && !sigs_inside(sp, y, 0, sp.k_end[0])) return false;
    for (int k = 1; k < t.nb; ++k) {
        const u64* br = t.bloom_table + (t.bloom_base[k] + t.part_bloom[p * t.nb + k]) * t.Wb;
#pragma unroll
        for (int j = 0; j < SL_W; ++j) y[j] = j < (int)sp.bl_n[k] ? br[sp.bl_w[k][j]] : 0ull;
        if (!sigs_inside(sp, y, sp.k_end[k - 1], sp.k_end[k])) return false;
    }
    return true;
}

struct SlotTest {  // node_passes_by's partition test over the shared slots
    const Trie& t;
    const SlotReq& sp;
    __device__ __forceinline__ bool operator()(i64 p, int bid, int bl) const { return partition_passes_slot(t, sp, p, bid, bl); }
};
