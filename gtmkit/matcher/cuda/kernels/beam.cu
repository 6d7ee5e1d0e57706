// Beam-state kernels of the captured (CUDA graph) beam search. NVRTC: built-in types only.

typedef long long i64;

// Row r of the new beam: copy its parent's tokens (or -1 for a dead row) and append its token.
extern "C" __global__ void reorder_history(const int* hist, int t, const int* parent, const int* token, i64 R,
                                           int* new_hist) {
    i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    int p = parent[r];
    for (int c = 0; c < t; ++c) new_hist[r * (t + 1) + c] = p >= 0 ? hist[(i64)p * t + c] : -1;
    new_hist[r * (t + 1) + t] = token[r];
}
