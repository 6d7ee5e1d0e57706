// Node recovery on the GPU: the trie node each row's token prefix leads to, one thread a row (the CPU
// form is gtmkit/matcher/cpu/prefix.py; both must agree). NVRTC: built-in types only.

typedef long long i64;

// out[r] = node reached from the root by tokens[r * row_stride + start + j] - offsets[j], j < depth; -1 when a
// token is outside [0, vocab) or not a child of the node so far. Children of node n are the CSR slots
// node_offsets[n] .. node_offsets[n+1]-1 with sorted tokens, and slot s holds node s + 1 (docs/design.md §3).
extern "C" __global__ void prefix_nodes_kernel(const i64* __restrict__ node_offsets, const int* __restrict__ child_tokens,
                                               i64 n_internal, const i64* __restrict__ tokens, i64 row_stride,
                                               i64 start, int depth, const i64* __restrict__ offsets, i64 vocab,
                                               i64 rows, i64* __restrict__ out) {
    i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    i64 n = 0;
    for (int j = 0; j < depth; ++j) {
        i64 tok = tokens[r * row_stride + start + j] - offsets[j];
        if (tok < 0 || tok >= vocab || n >= n_internal) { n = -1; break; }
        i64 lo = node_offsets[n], end = node_offsets[n + 1], hi = end;
        while (lo < hi) {
            i64 mid = (lo + hi) >> 1;
            if (child_tokens[mid] < tok) lo = mid + 1; else hi = mid;
        }
        if (lo == end || child_tokens[lo] != tok) { n = -1; break; }
        n = lo + 1;
    }
    out[r] = n;
}
