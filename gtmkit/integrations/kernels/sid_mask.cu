// Masking a model's scores to the allowed SID tokens on the GPU, in place, one thread a column of a row, rows
// strided over grid.y (no 64-bit division per element) (the CPU
// form is gtmkit/integrations/masking.py; both must agree). Only -inf is ever written, so the kernel needs
// the element's width and the bit pattern of -inf, not its type: float32, float16, bfloat16 and float64 alike.
// NVRTC: built-in types only.

typedef long long i64;
typedef unsigned long long u64;

// Element (r, c) of scores (rows of row_stride elements) stays when column c is allowed for row r:
//   eos_only = 0: c = offset + v with v in [0, vocab) and bit v of mask row r / words_div set (words_div > 1:
//                 rows that share one mask, e.g. every row of a request at the root);
//   eos_only = 1: c == eos and nodes[r] >= 0 (a whole SID was generated; eos < 0 allows nothing).
// Every other element becomes -inf.
extern "C" __global__ void block_scores_kernel(char* __restrict__ scores, i64 row_stride, int elem_bytes,
                                               u64 neg_inf, i64 rows, i64 cols,
                                               const unsigned* __restrict__ words, int n_words, i64 words_div,
                                               const i64* __restrict__ nodes, i64 offset, i64 vocab, i64 eos,
                                               int eos_only) {
    i64 c = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        bool allowed;
        if (eos_only) {
            allowed = c == eos && nodes[r] >= 0;
        } else {
            i64 v = c - offset;
            allowed = v >= 0 && v < vocab && ((words[(r / words_div) * n_words + (v >> 5)] >> (v & 31)) & 1u);
        }
        if (allowed) continue;
        char* p = scores + (r * row_stride + c) * elem_bytes;
        if (elem_bytes == 4) *(unsigned*)p = (unsigned)neg_inf;
        else if (elem_bytes == 2) *(unsigned short*)p = (unsigned short)neg_inf;
        else *(u64*)p = neg_inf;
    }
}
