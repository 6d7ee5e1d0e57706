// The decoder step's memory-bound parts, each one pass over its data (gtmkit/decoding/cuda_ops.py launches them):
// the self-attention of a beam over its SID prefix, the residual add fused with T5's RMS norm, the head's
// log-softmax.
// Compiled once per element type: -DELEM_BF16, -DELEM_F16 or neither (float32). Math is fp32.

#ifdef ELEM_BF16
typedef unsigned short elem_t;
__device__ __forceinline__ float to_f(elem_t x) { return __uint_as_float(((unsigned int)x) << 16); }
__device__ __forceinline__ elem_t from_f(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u) return (elem_t)((u >> 16) | ((u & 0xffffu) ? 0x40u : 0u));  // inf, NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return (elem_t)(u >> 16);
}
#elif defined(ELEM_F16)
typedef unsigned short elem_t;
__device__ __forceinline__ float to_f(elem_t x) { float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x)); return f; }
__device__ __forceinline__ elem_t from_f(float f) { elem_t x; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f)); return x; }
#else
typedef float elem_t;
__device__ __forceinline__ float to_f(elem_t x) { return x; }
__device__ __forceinline__ elem_t from_f(float f) { return f; }
#endif

// four consecutive elements (8 or 16 bytes, aligned: the callers keep every offset a multiple of 4 elements)
#if defined(ELEM_BF16) || defined(ELEM_F16)
__device__ __forceinline__ void load4(const elem_t* p, float* f) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    f[0] = to_f((elem_t)(u.x & 0xffffu)); f[1] = to_f((elem_t)(u.x >> 16));
    f[2] = to_f((elem_t)(u.y & 0xffffu)); f[3] = to_f((elem_t)(u.y >> 16));
}
__device__ __forceinline__ void store4(elem_t* p, const float* f) {
    uint2 u;
    u.x = (unsigned int)from_f(f[0]) | ((unsigned int)from_f(f[1]) << 16);
    u.y = (unsigned int)from_f(f[2]) | ((unsigned int)from_f(f[3]) << 16);
    *reinterpret_cast<uint2*>(p) = u;
}
#else
__device__ __forceinline__ void load4(const elem_t* p, float* f) {
    const float4 u = *reinterpret_cast<const float4*>(p);
    f[0] = u.x; f[1] = u.y; f[2] = u.z; f[3] = u.w;
}
__device__ __forceinline__ void store4(elem_t* p, const float* f) {
    *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
}
#endif

#define MAX_DK_LANE 8   // d_kv up to 256: 8 elements a lane
#define MAX_POS 8       // positions of a SID prefix, the start token included

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp a (row, head): the row's query at step S-1 attends to the keys of its ancestors at steps 0..S-1.
// qkv: every step's fused Q|K|V projections of one layer, [rows of all steps, 3 * inner]; anc [R, S]: the global
// qkv row of each row's ancestor at each step (its own row last); bias [H, S]: T5's relative position bias of
// query position S-1 over key positions 0..S-1; out [R, inner]. DK <= 256, S <= 8. Element-strided lanes and few
// registers: many warps a multiprocessor hide the gathers' latency (benchmarks/results/kernel_choices.md).
extern "C" __global__ void prefix_attention(const elem_t* __restrict__ qkv, const long long* __restrict__ anc,
                                            const float* __restrict__ bias, elem_t* __restrict__ out,
                                            long long R, int H, int DK, int S) {
    const int lane = threadIdx.x & 31;
    const long long w = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= R * H) return;
    const long long r = w / H;
    const int h = (int)(w % H);
    const long long inner = (long long)H * DK, stride = 3 * inner;
    const long long* a = anc + r * S;
    const elem_t* q = qkv + a[S - 1] * stride + (long long)h * DK;
    float qv[MAX_DK_LANE], acc[MAX_DK_LANE], sc[MAX_POS];
    const int n = (DK + 31) >> 5;
    for (int i = 0; i < n; ++i) {
        const int d = lane + 32 * i;
        qv[i] = d < DK ? to_f(q[d]) : 0.f;
        acc[i] = 0.f;
    }
    float best = -__int_as_float(0x7f800000);
    for (int s = 0; s < S; ++s) {
        const elem_t* k = qkv + a[s] * stride + inner + (long long)h * DK;
        float dot = 0.f;
        for (int i = 0; i < n; ++i) {
            const int d = lane + 32 * i;
            if (d < DK) dot += qv[i] * to_f(k[d]);
        }
        sc[s] = warp_sum(dot) + bias[h * S + s];
        best = fmaxf(best, sc[s]);
    }
    float total = 0.f;
    for (int s = 0; s < S; ++s) {
        const float p = __expf(sc[s] - best);
        total += p;
        const elem_t* v = qkv + a[s] * stride + 2 * inner + (long long)h * DK;
        for (int i = 0; i < n; ++i) {
            const int d = lane + 32 * i;
            if (d < DK) acc[i] += p * to_f(v[d]);
        }
    }
    const float inv = 1.f / total;
    elem_t* o = out + r * inner + (long long)h * DK;
    for (int i = 0; i < n; ++i) {
        const int d = lane + 32 * i;
        if (d < DK) o[d] = from_f(acc[i] * inv);
    }
}

#define LOGP_THREADS 256

__device__ __forceinline__ float block_reduce(float v, bool is_max, float* part) {
    for (int o = 16; o > 0; o >>= 1) {
        const float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    __syncthreads();  // part is reused by consecutive reductions
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    v = part[0];
    for (int i = 1; i < LOGP_THREADS / 32; ++i) v = is_max ? fmaxf(v, part[i]) : v + part[i];
    return v;
}

// One block a row: out[row, j] = logits[row, off + j] - logsumexp(logits[row, 0:V]) for j < vocab, in fp32 (the
// log-softmax of the head's logits, only the step's own token range written).
extern "C" __global__ void log_probs(const elem_t* __restrict__ logits, long long ld, int V, int off, int vocab,
                                     float* __restrict__ out) {
    __shared__ float part[LOGP_THREADS / 32];
    const long long row = blockIdx.x;
    const elem_t* lr = logits + row * ld;
    float m = -__int_as_float(0x7f800000);
    for (int i = threadIdx.x; i < V; i += LOGP_THREADS) m = fmaxf(m, to_f(lr[i]));
    m = block_reduce(m, true, part);
    float s = 0.f;
    for (int i = threadIdx.x; i < V; i += LOGP_THREADS) s += expf(to_f(lr[i]) - m);
    const float lse = m + logf(block_reduce(s, false, part));
    for (int j = threadIdx.x; j < vocab; j += LOGP_THREADS) out[row * vocab + j] = to_f(lr[off + j]) - lse;
}

#define NORM_THREADS 256
#define MAX_NORM_GROUPS 4  // d_model up to 4096: groups of 1024 elements, 4 a thread

// the residual stream: fp32, or the element type where compiled with -DRES_ELEM
#ifdef RES_ELEM
typedef elem_t res_t;
__device__ __forceinline__ void load_res4(const res_t* p, float* f) { load4(p, f); }
__device__ __forceinline__ void store_res4(res_t* p, const float* f) { store4(p, f); }
#else
typedef float res_t;
__device__ __forceinline__ void load_res4(const res_t* p, float* f) {
    const float4 u = *reinterpret_cast<const float4*>(p);
    f[0] = u.x; f[1] = u.y; f[2] = u.z; f[3] = u.w;
}
__device__ __forceinline__ void store_res4(res_t* p, const float* f) {
    *reinterpret_cast<float4*>(p) = make_float4(f[0], f[1], f[2], f[3]);
}
#endif

// One block a row: x[row] (the residual) += y[row] (or x[row] = y[tokens[row]] where tokens is given), then
// out[row] = x[row] * rsqrt(mean(x[row]^2) + eps) * w * scale in the element type. D is a multiple of 4.
extern "C" __global__ void add_rms_norm(res_t* __restrict__ x, const elem_t* __restrict__ y, long long y_stride,
                                        const long long* __restrict__ tokens, const float* __restrict__ w,
                                        elem_t* __restrict__ out, int D, float eps, float scale) {
    __shared__ float part[NORM_THREADS / 32];
    const long long row = blockIdx.x;
    res_t* xr = x + row * D;
    const elem_t* yr = tokens ? y + tokens[row] * y_stride : (y ? y + row * y_stride : 0);
    float v[MAX_NORM_GROUPS][4];
    float sq = 0.f;
    for (int g = 0; g < MAX_NORM_GROUPS; ++g) {
        const int d = 1024 * g + 4 * threadIdx.x;
        if (d >= D) break;
        float add[4] = {0.f, 0.f, 0.f, 0.f};
        if (yr) load4(yr + d, add);
        if (tokens) {
            for (int j = 0; j < 4; ++j) v[g][j] = add[j];
        } else {
            load_res4(xr + d, v[g]);
            for (int j = 0; j < 4; ++j) v[g][j] += add[j];
        }
#ifdef RES_ELEM
        for (int j = 0; j < 4; ++j) v[g][j] = to_f(from_f(v[g][j]));  // the norm reads the stream as stored
#endif
        if (yr) store_res4(xr + d, v[g]);
        sq += v[g][0] * v[g][0] + v[g][1] * v[g][1] + v[g][2] * v[g][2] + v[g][3] * v[g][3];
    }
    sq = warp_sum(sq);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = sq;
    __syncthreads();
    if (threadIdx.x < 32) {
        float t = threadIdx.x < NORM_THREADS / 32 ? part[threadIdx.x] : 0.f;
        t = warp_sum(t);
        if (threadIdx.x == 0) part[0] = t;
    }
    __syncthreads();
    const float rs = rsqrtf(part[0] / D + eps);
    for (int g = 0; g < MAX_NORM_GROUPS; ++g) {
        const int d = 1024 * g + 4 * threadIdx.x;
        if (d >= D) break;
        float o[4];
        for (int j = 0; j < 4; ++j) o[j] = v[g][j] * rs * w[d + j] * scale;
        store4(out + row * D + d, o);
    }
}
