// The synthetic decoder's logits on the GPU (same hash as gtmkit/synth/logits.py). NVRTC: built-in types only.

typedef unsigned long long u64;
typedef long long i64;

__device__ __forceinline__ u64 mix64(u64 h) {
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    return h ^ (h >> 31);
}

// keys[r] = step 0: user_keys[parent[r]]; later: mix64(old_keys[parent[r]] ^ (token + 7)), 0 when dead.
extern "C" __global__ void extend_keys(const u64* old_keys, const u64* user_keys, const int* parent, const int* prev,
                                       int step, i64 R, u64* keys, i64* boost_row) {
    i64 r = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    int p = parent[r];
    if (step == 0) { keys[r] = user_keys[p]; boost_row[r] = p; return; }
    keys[r] = p >= 0 ? mix64(old_keys[p] ^ (u64)(i64)(prev[r] + 7)) : 0ull;
    boost_row[r] = -1;
}

// One block per row: log_softmax(scale * logistic(hash(key, v)) + boost[row, v]).
extern "C" __global__ void synthetic_logits(const u64* keys, const i64* boost_row, const float* boosts, int V,
                                            float scale, float* out) {
    __shared__ float red[32];
    i64 r = blockIdx.x;
    u64 key = keys[r];
    i64 br = boost_row[r];
    float mx = -3.0e38f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
        u64 h = mix64(key ^ ((u64)(v + 1) * 0x9E3779B97F4A7C15ull));
        double u = ((double)(h >> 11) + 0.5) / 9007199254740992.0;
        float x = (float)(scale * log(u / (1.0 - u)));
        if (br >= 0) x += boosts[br * V + v];
        out[r * V + v] = x;
        mx = fmaxf(mx, x);
    }
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
    __syncthreads();
    if (threadIdx.x < 32) {
        float m = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : -3.0e38f;
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (threadIdx.x == 0) red[0] = m;
    }
    __syncthreads();
    mx = red[0];
    __syncthreads();
    float s = 0.f;
    for (int v = threadIdx.x; v < V; v += blockDim.x) s += expf(out[r * V + v] - mx);
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        float m = threadIdx.x < (blockDim.x >> 5) ? red[threadIdx.x] : 0.f;
        for (int o = 16; o > 0; o >>= 1) m += __shfl_xor_sync(0xffffffffu, m, o);
        if (threadIdx.x == 0) red[0] = m;
    }
    __syncthreads();
    float lse = mx + logf(red[0]);
    for (int v = threadIdx.x; v < V; v += blockDim.x) out[r * V + v] -= lse;
}
