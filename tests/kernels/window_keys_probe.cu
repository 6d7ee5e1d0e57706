// Test kernel (tests/test_window_keys.py): warp_first_key for n cases, one warp a case; out[i] is its answer.
#include "gtm_common.cuh"
#include "window_keys.cuh"

extern "C" __global__ void first_key_probe(const float* tops, const int* bins, const u32* lo, const u32* hi, u32* out,
                                           int n) {
    const int i = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5), lane = threadIdx.x & 31;
    if (i >= n) return;  // warp-uniform
    const u32 r = warp_first_key<2048>(lo[i], hi[i], bins[i], tops[i], lane);
    if (lane == 0) out[i] = r;
}
