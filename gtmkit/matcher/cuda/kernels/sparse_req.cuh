// A request's GTM rows as the few words that matter, kept in shared memory by the fused step (gtm_fused.cu) and
// read by the multi-kernel step (gtm_step.cu). NVRTC: built-in types only. Needs gtm_common.cuh first. The host
// builds each request's image in this struct's byte layout (cuda/sparse_req.py, which must match: u64 arrays
// first, no padding).
//
// Why: partition_passes ANDs every bitmask attribute's request row with the node's row over all W words and
// reloads the row for each attribute (A x W divergent loads a partition: 15 for the synth schema), and reloads
// the Bloom row for every signature. A divergent warp load costs a pass of the L1 pipeline a distinct line,
// so those passes, not the few round trips, bound a block's tests. A request row holds a bit or two an
// attribute: testing only its non-zero words is the same test, exactly:
//   OR_w (row[w] & rq[w]) != 0  <=>  OR over w with rq[w] != 0;  (br & sg) == sg  <=>  over w with sg[w] != 0.

// Capacities, as sparse_req.py's Caps (the CPU emulation shrinks them, so that some requests take the full test)
#ifndef SP_A
#define SP_A 16   // bitmask attributes
#endif
#ifndef SP_P
#define SP_P 32   // non-zero bitmask request words, all attributes
#endif
#ifndef SP_NB
#define SP_NB 4   // Bloom matchers
#endif
#ifndef SP_S
#define SP_S 16   // signatures, all Bloom matchers
#endif
#ifndef SP_Q
#define SP_Q 64   // non-zero signature words, all signatures
#endif

struct SparseReq {
    u64 bm_m[SP_P];     // bitmask: the request word ...
    u64 bl_m[SP_Q];     // Bloom: the signature word ...
    u32 bm_w[SP_P];     // ... and its index in the row
    u32 bl_w[SP_Q];
    u32 bm_end[SP_A];   // attribute a's words: [bm_end[a - 1], bm_end[a])
    u32 sig_end[SP_S];  // signature s's words: [sig_end[s - 1], sig_end[s])
    u32 k_end[SP_NB];   // Bloom matcher k's signatures: [k_end[k - 1], k_end[k])
    int A, ok;          // ok: everything fit (else the full test, node_passes_fast)
};

static_assert(sizeof(SparseReq) == 8 * (SP_P + SP_Q) + 4 * (SP_P + SP_Q + SP_A + SP_S + SP_NB + 2), "packed as on the host");
static_assert(sizeof(SparseReq) % 8 == 0, "copied a u64 at a time");

// Request b's image (q.sparse) into shared memory, a u64 a thread; the caller syncs before reading it.
__device__ __forceinline__ void load_sparse_req(const Req& q, int b, SparseReq& sp, int tid, int nt) {
    const int n = (int)(sizeof(SparseReq) / 8);
    const u64* src = q.sparse + (i64)b * n;
    for (int i = tid; i < n; i += nt) reinterpret_cast<u64*>(&sp)[i] = src[i];
}

// partition_passes over the request's non-zero words (same answer).
__device__ __forceinline__ bool partition_passes_sp(const Trie& t, const SparseReq& sp, i64 p, int bid, int bloom0) {
    const u64* row = t.bitmask_table + (i64)bid * t.W;
    u32 e = 0;
    for (int a = 0; a < sp.A; ++a) {
        u64 hit = 0;
        for (const u32 e1 = sp.bm_end[a]; e < e1; ++e) hit |= row[sp.bm_w[e]] & sp.bm_m[e];
        if (!hit) return false;
    }
    u32 s = 0;
    for (int k = 0; k < t.nb; ++k) {
        const int id = k == 0 ? bloom0 : t.part_bloom[p * t.nb + k];
        const u64* br = t.bloom_table + (t.bloom_base[k] + id) * t.Wb;
        const u32 s1 = sp.k_end[k];
        bool found = false;
        for (; s < s1 && !found; ++s) {
            bool inside = true;
            for (u32 g = s > 0 ? sp.sig_end[s - 1] : 0u; g < sp.sig_end[s] && inside; ++g)
                inside = (br[sp.bl_w[g]] & sp.bl_m[g]) == sp.bl_m[g];
            found = inside;
        }
        if (!found) return false;
        s = s1;  // the next matcher's signatures
    }
    return true;
}

struct SparseTest {  // node_passes_by's partition test over the shared lists
    const Trie& t;
    const SparseReq& sp;
    __device__ __forceinline__ bool operator()(i64 p, int bid, int bl) const { return partition_passes_sp(t, sp, p, bid, bl); }
};
