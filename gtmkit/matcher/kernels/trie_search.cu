// Constrained beam search over the succinct (LOUDS) trie on the GPU: one step's candidate expansion.
// NVRTC: built-in types only. Bit vectors are LSB-first uint64 words; rank9 directories as in
// gtmkit/indexer/succinct_bits.py (row s = ones before superblock s, seven packed 9-bit word counts).
//
// Block (q, p) expands live beam p of query q against the step's proposals (sorted by token, one per
// token, already cut by theta_tok): each thread binary-searches its proposals among the node's child
// labels. Candidate slot i = p * K + k, so ordering slots ascending = (parent beam asc, token asc).
// Live candidates are written as (sortable(score) << 32) | (0xFFFFFFFF - i), finished ones as
// (sortable(normalised score) << 32) | (0xFFFFFFFF - key id); 0 marks an empty slot.

typedef unsigned long long u64;
typedef long long i64;
typedef unsigned int u32;

#define SUPER_BITS 512
#define SAMPLE 512

__device__ __forceinline__ u32 sortable(float f) {
    if (f == 0.0f) f = 0.0f;  // -0 ties +0
    u32 u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

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

__device__ __forceinline__ i64 zeros_before(const u64* rd, i64 s) {
    return s * SUPER_BITS - (i64)rd[2 * s];
}

__device__ __forceinline__ int select64(u64 x, int r) {  // position of the r-th set bit (0-based)
    for (int i = 0; i < r; ++i) x &= x - 1ull;
    return __ffsll((long long)x) - 1;
}

// Position of the k-th (0-based) zero of the LOUDS bits.
__device__ i64 select0(const u64* words, const u64* rd, const u32* samples, i64 k) {
    i64 j = k / SAMPLE;
    i64 lo = samples[j], hi = samples[j + 1];
    while (hi - lo > 8) {
        i64 mid = (lo + hi + 1) >> 1;
        if (zeros_before(rd, mid) <= k) lo = mid; else hi = mid - 1;
    }
    while (lo < hi && zeros_before(rd, lo + 1) <= k) ++lo;
    i64 r = k - zeros_before(rd, lo);
    int w = 0;
    for (int ww = 1; ww < 8; ++ww) {
        i64 c = 64 * ww - sub_count(rd, lo, ww);
        if (c <= r) w = ww; else break;
    }
    i64 c = 64 * w - sub_count(rd, lo, w);
    u64 x = ~words[lo * 8 + w];
    return (lo * 8 + w) * 64 + select64(x, (int)(r - c));
}

__device__ __forceinline__ i64 next_zero(const u64* words, i64 p) {
    i64 w = p >> 6;
    u64 x = ~words[w] & (~0ull << (p & 63));
    while (x == 0ull) { ++w; x = ~words[w]; }
    return w * 64 + (__ffsll((long long)x) - 1);
}

__device__ __forceinline__ i64 label_of(const unsigned short* low, const u64* high, int hbits, i64 node) {
    i64 j = node - 1;
    i64 v = low[j];
    if (hbits) {
        i64 p = j * hbits;
        i64 w = p >> 6;
        int off = (int)(p & 63);
        u64 x = high[w] >> off;
        if (off + hbits > 64) x |= high[w + 1] << (64 - off);
        v |= (i64)(x & ((1ull << hbits) - 1ull)) << 16;
    }
    return v;
}

__device__ __forceinline__ bool get_bit(const u64* words, i64 i) { return (words[i >> 6] >> (i & 63)) & 1ull; }

extern "C" __global__ void expand_kernel(
    const u64* louds, const u64* louds_rank, const u32* louds_select0,
    const unsigned short* label_low, const u64* label_high, int high_bits,
    const u64* terminal, const u64* terminal_rank,
    const int* ptok, const float* plp, const int* pcnt, int T, int K, int t,
    const i64* live_node, const float* live_score, const i64* live_count, int BW,
    float theta_sent, double factor, u64* live_out, i64* child_out, u64* fin_out) {
    __shared__ i64 s_first, s_end;
    int q = blockIdx.x, p = blockIdx.y;
    if (p >= live_count[q]) return;
    i64 v = live_node[(i64)q * BW + p];
    float s = live_score[(i64)q * BW + p];
    if (threadIdx.x == 0) {
        i64 z = select0(louds, louds_rank, louds_select0, v);
        s_first = z - v;
        s_end = s_first + (next_zero(louds, z + 1) - z - 1);
    }
    __syncthreads();
    i64 first = s_first, end = s_end;
    if (first >= end) return;
    i64 row = ((i64)q * T + t) * K;
    int n = pcnt[(i64)q * T + t];
    i64 base = (i64)q * BW * K + (i64)p * K;
    for (int k = threadIdx.x; k < n; k += blockDim.x) {
        i64 tok = ptok[row + k];
        i64 a = first, z = end;
        while (a < z) {
            i64 m = (a + z) >> 1;
            if (label_of(label_low, label_high, high_bits, m) < tok) a = m + 1; else z = m;
        }
        if (a >= end || label_of(label_low, label_high, high_bits, a) != tok) continue;
        float sc = s + plp[row + k];
        if (!(sc > theta_sent)) continue;
        u32 slot = (u32)(p * K + k);
        if (get_bit(terminal, a)) {
            float norm = (float)((double)sc * factor);
            i64 key = rank1(terminal, terminal_rank, a);
            fin_out[base + k] = ((u64)sortable(norm) << 32) | (u64)(0xFFFFFFFFu - (u32)key);
        }
        i64 za = select0(louds, louds_rank, louds_select0, a);
        if (get_bit(louds, za + 1)) {  // a has children: it can stay live
            live_out[base + k] = ((u64)sortable(sc) << 32) | (u64)(0xFFFFFFFFu - slot);
            child_out[base + k] = a;
        }
    }
}
