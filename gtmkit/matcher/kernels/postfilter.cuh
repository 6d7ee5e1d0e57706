// Exact ad eligibility on the GPU (DESIGN §2, the test of gtmkit/matcher/exact.py): the SID->ad map and the
// ad-level tables, shared by the post-filter kernels (postfilter.cu) and the fused step's post-filter phase
// (gtm_fused.cu). Include after gtm_common.cuh. NVRTC: built-in types only.
#pragma once

#define FLAG_ADS 64   // verdicts kept as bits for up to this many ads of one SID; beyond, tested again

struct AdIndex {
    const i64* sid_ad_offsets; const i64* sid_ad_ids; const int* ad_bitmask;
    const i64* allow_off; const int* allow_codes; i64 allow_stride;
    const i64* excl_off; const int* excl_codes; i64 excl_stride; i64 n_ads;
};

__device__ __forceinline__ AdIndex load_ads(const i64* P) {
    AdIndex a;
    a.sid_ad_offsets = (const i64*)P[0]; a.sid_ad_ids = (const i64*)P[1]; a.ad_bitmask = (const int*)P[2];
    a.allow_off = (const i64*)P[3]; a.allow_codes = (const int*)P[4]; a.allow_stride = P[5];
    a.excl_off = (const i64*)P[6]; a.excl_codes = (const int*)P[7]; a.excl_stride = P[8]; a.n_ads = P[9];
    return a;
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
