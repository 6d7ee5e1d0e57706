// Trie navigation of the GPU search (part of trie_search.cu, which includes it after its types, options
// and Trie table): order-preserving float maps, the LOUDS bit vectors' rank / select, child ranges, labels,
// and the searches of a token among a node's children. NVRTC: built-in types.
#pragma once

// ---------------------------------------------------------------------------------------------------
// Order-preserving float <-> u32 maps.

__device__ __forceinline__ u32 sortable_raw(float f) {
    u32 u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ u32 sortable(float f) {  // -0 ties +0, as float comparison does
    return sortable_raw(f == 0.0f ? 0.0f : f);
}

__device__ __forceinline__ float unsortable(u32 u) {
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u);
}

// ---------------------------------------------------------------------------------------------------
// Bit vectors (same arithmetic as _rank_select.py).

__device__ __forceinline__ i64 sub_count(const u64* rd, i64 s, int w) {
    return w == 0 ? 0 : (i64)((rd[2 * s + 1] >> (9 * (w - 1))) & 511ull);
}

__device__ __forceinline__ i64 rank1(const u64* words, const u64* rd, i64 p) {  // ones in [0, p)
    i64 s = p >> 9;
    int w = (int)((p >> 6) & 7);
    i64 r = (i64)rd[2 * s] + sub_count(rd, s, w);
    int b = (int)(p & 63);
    if (b) r += __popcll(words[p >> 6] & ((1ull << b) - 1ull));
    return r;
}

__device__ __forceinline__ i64 zeros_before(const u64* rd, i64 s) { return s * 512 - (i64)rd[2 * s]; }

__device__ __forceinline__ int select64(u64 x, int r) {  // position of the r-th (0-based) set bit
    int pos = 0;
    int c = __popcll(x & 0xFFFFFFFFull);
    if (r >= c) { r -= c; x >>= 32; pos += 32; }
    c = __popcll(x & 0xFFFFull);
    if (r >= c) { r -= c; x >>= 16; pos += 16; }
    c = __popcll(x & 0xFFull);
    if (r >= c) { r -= c; x >>= 8; pos += 8; }
    for (int i = 0; i < r; ++i) x &= x - 1ull;
    return pos + __ffsll((long long)x) - 1;
}

// Position of the k-th (0-based) zero of the LOUDS bits.
__device__ __forceinline__ i64 select0(const Trie& t, i64 k) {
    i64 j = k / 512;
    i64 lo = t.sel0[j], hi = t.sel0[j + 1];
    while (hi - lo > 8) {
        i64 mid = (lo + hi + 1) >> 1;
        if (zeros_before(t.louds_rank, mid) <= k) lo = mid; else hi = mid - 1;
    }
    // the last superblock in [lo, hi] with at most k zeros before it: its <= 8 candidates are loaded
    // together rather than one after the other (zeros_before is monotone)
    i64 sb = lo;
#pragma unroll
    for (int d = 1; d <= 8; ++d)
        if (lo + d <= hi && zeros_before(t.louds_rank, lo + d) <= k) sb = lo + d;
    lo = sb;
    i64 r = k - zeros_before(t.louds_rank, lo);
    int w = 0;
    for (int ww = 1; ww < 8; ++ww) {
        if (64 * ww - sub_count(t.louds_rank, lo, ww) <= r) w = ww; else break;
    }
    i64 c = 64 * w - sub_count(t.louds_rank, lo, w);
    return (lo * 8 + w) * 64 + select64(~t.louds[lo * 8 + w], (int)(r - c));
}

// Position of the zero after z, the k-th zero (node k's run of ones ends there): the two words from z + 1
// are tried first (nearly every node has fewer than 64 children), longer runs go through the select
// directory. A word-by-word scan would walk the root's run (up to millions of children with large
// vocabularies) one dependent load per word.
__device__ __forceinline__ i64 run_end(const Trie& t, i64 z, i64 k) {
    i64 p = z + 1, w = p >> 6;
    u64 x = ~t.louds[w] & (~0ull << (p & 63));
    if (x) return w * 64 + (__ffsll((long long)x) - 1);
    x = ~t.louds[w + 1];  // exists: a zero follows z
    if (x) return (w + 1) * 64 + (__ffsll((long long)x) - 1);
    return select0(t, k + 1);
}

// Position of the r-th (0-based) set bit of the four words x[0..3] (word 0 at w), or -1 if fewer.
__device__ __forceinline__ i64 nth_in4(const u64* x, i64 w, int r) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        int c = __popcll(x[i]);
        if (r < c) return (w + i) * 64 + select64(x[i], r);
        r -= c;
    }
    return -1;
}

// The k-th zero (node k's, z) and the next one (*z1): node k's children are nodes z - k .. *z1 - k - 2.
// From the sampled position of zero (k >> zshift) << zshift, both are found in the four words loaded
// at once from there (one dependent read after the sample instead of select0's walk of the rank
// directory and run_end's). A wide group's sample (where a long run of ones puts its zeros past the four
// words) points at the list of its zeros instead: one read of two neighbours. Zeros further away in a
// group that is not listed (past the host's budget) take the general path.
__device__ __forceinline__ i64 zero_pair(const Trie& t, i64 k, i64* z1) {
    const i64 j = k >> t.zshift;
    const i64 p = t.zpos[j];
    const int r = (int)(k - (j << t.zshift));  // zeros after p's (which is zero 0 here)
    if (p < 0) {
        const i64* e = t.zwide + (-1 - p) * ((1ll << t.zshift) + 1) + r;
        *z1 = e[1];
        return e[0];
    }
    const i64 w = p >> 6;
    u64 x[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] = ~t.louds[w + i];
    x[0] &= ~0ull << (p & 63);
    i64 z = nth_in4(x, w, r);
    i64 n = z >= 0 ? nth_in4(x, w, r + 1) : -1;
    if (z < 0) z = select0(t, k);
    if (n < 0) n = run_end(t, z, k);
    *z1 = n;
    return z;
}

__device__ __forceinline__ bool get_bit(const u64* words, i64 i) { return (words[i >> 6] >> (i & 63)) & 1ull; }

__device__ __forceinline__ i64 packed_field(const u64* words, i64 i, int width) {  // pack_fields' value i
    if (width == 0) return 0;
    i64 p = i * width;
    i64 w = p >> 6;
    int off = (int)(p & 63);
    u64 x = words[w] >> off;
    if (off + width > 64) x |= words[w + 1] << (64 - off);
    return (i64)(x & ((1ull << width) - 1ull));
}

// Label of a tail node j+1 (trie/tails.py): its code's dictionary token.
__device__ __forceinline__ i64 tail_label_of(const Trie& t, i64 j) {
    i64 i = rank1(t.ltail, t.ltail_rank, j);
    i64 c = packed_field(t.tlow, i, t.tlbits);
    if (t.thbits && get_bit(t.twide, i)) c |= packed_field(t.thigh, rank1(t.twide, t.twide_rank, i), t.thbits) << t.tlbits;
    return (i64)t.tdict[c];
}

// Label of a node of the constant deepest levels (node >= cfrom): its level's token.
__device__ __forceinline__ i64 const_label_of(const Trie& t, i64 node) {
    int k = t.nconst - 1;
    while (k > 0 && node < t.lfirst[k]) --k;
    return (i64)t.lconst[k];
}

// The trie's label layout is compiled in (trie/search_cuda.py trie_layout), so a trie without tails, 8-bit labels
// or constant levels runs format 2's label read and nothing else.
#ifndef TRIE_TAILS
#define TRIE_TAILS 0
#endif
#ifndef TRIE_LOW8
#define TRIE_LOW8 0
#endif
#ifndef TRIE_CONST
#define TRIE_CONST 0
#endif
#define TRIE_LOW_BITS (TRIE_LOW8 ? 8 : 16)

__device__ __forceinline__ i64 label_of(const Trie& t, i64 node) {  // token on the edge into node >= 1
#if TRIE_CONST
    if (node >= t.cfrom) return const_label_of(t, node);
#endif
    i64 j = node - 1;
#if TRIE_TAILS
    if (get_bit(t.ltail, j)) return tail_label_of(t, j);
    j -= rank1(t.ltail, t.ltail_rank, j);
#endif
#if TRIE_LOW8
    i64 v = (i64)t.low8[j];
#else
    i64 v = (i64)t.low[j];
#endif
    if (t.hbits) {
        i64 p = j * t.hbits;
        i64 w = p >> 6;
        int off = (int)(p & 63);
        u64 x = t.high[w] >> off;
        if (off + t.hbits > 64) x |= t.high[w + 1] << (64 - off);
        v |= (i64)(x & ((1ull << t.hbits) - 1ull)) << TRIE_LOW_BITS;
    }
    return v;
}

__device__ __forceinline__ i64 children_lower_bound(const Trie& t, i64 lo, i64 hi, i64 tok) {
    while (lo < hi) {
        i64 mid = (lo + hi) >> 1;
        if (label_of(t, mid) < tok) lo = mid + 1; else hi = mid;
    }
    return lo;
}

__device__ __forceinline__ u32 tokens_lower_bound(const int* toks, u32 n, i64 lab) {
    u32 lo = 0, hi = n;
    while (lo < hi) {
        u32 mid = (lo + hi) >> 1;
        if ((i64)toks[mid] < lab) lo = mid + 1; else hi = mid;
    }
    return lo;
}
