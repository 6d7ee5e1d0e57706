// The decoder step's memory-bound parts, each one pass over its data (gtmkit/decoding/cuda_ops.py launches them):
// the self-attention of a beam over its SID prefix and the residual add fused with T5's RMS norm.
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

#define MAX_GROUPS 2   // d_kv up to 256: groups of 128 elements, 4 a lane
#define MAX_POS 8       // positions of a SID prefix, the start token included

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// One warp a (row, head): the row's query at step S-1 attends to the keys of its ancestors at steps 0..S-1.
// qkv: every step's fused Q|K|V projections of one layer, [rows of all steps, 3 * inner]; anc [R, S]: the global
// qkv row of each row's ancestor at each step (its own row last); bias [H, S]: T5's relative position bias of
// query position S-1 over key positions 0..S-1; out [R, inner]. DK is a multiple of 4, at most 256; S <= 8.
// Every key and value load is issued before the first is used: the loads of a warp are independent, so their
// latencies overlap instead of adding up.
extern "C" __global__ void prefix_attention(const elem_t* __restrict__ qkv, const long long* __restrict__ anc,
                                            const float* __restrict__ bias, elem_t* __restrict__ out,
                                            long long R, int H, int DK, int S) {
    const int lane = threadIdx.x & 31;
    const long long w = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (w >= R * H) return;
    const long long r = w / H;
    const int h = (int)(w % H);
    const long long inner = (long long)H * DK, stride = 3 * inner;
    const long long mine = lane < S ? anc[r * S + lane] : 0;  // one ancestor a lane, then shared
    long long row[MAX_POS];
#pragma unroll
    for (int s = 0; s < MAX_POS; ++s) row[s] = __shfl_sync(0xffffffffu, mine, s);
    const int groups = (DK + 127) >> 7;
    float acc[MAX_GROUPS][4];
    float sc[MAX_POS];
#pragma unroll
    for (int s = 0; s < MAX_POS; ++s) sc[s] = 0.f;
    for (int g = 0; g < groups; ++g) {
        const int d = 128 * g + 4 * lane;
        float qv[4] = {0.f, 0.f, 0.f, 0.f}, kv[MAX_POS][4], vv[MAX_POS][4];
        const long long off = (long long)h * DK + d;
        if (d < DK) {
            load4(qkv + row[S - 1] * stride + off, qv);
#pragma unroll
            for (int s = 0; s < MAX_POS; ++s)
                if (s < S) {
                    load4(qkv + row[s] * stride + inner + off, kv[s]);
                    load4(qkv + row[s] * stride + 2 * inner + off, vv[s]);
                }
        }
#pragma unroll
        for (int s = 0; s < MAX_POS; ++s)
            if (s < S && d < DK) sc[s] += qv[0] * kv[s][0] + qv[1] * kv[s][1] + qv[2] * kv[s][2] + qv[3] * kv[s][3];
        // the values stay in registers for the weighted sum below only while one group is live: keep them
        for (int j = 0; j < 4; ++j) acc[g][j] = 0.f;
        if (g == 0 && groups == 1) {
            float best = -__int_as_float(0x7f800000), p[MAX_POS], total = 0.f;
#pragma unroll
            for (int s = 0; s < MAX_POS; ++s)
                if (s < S) {
                    sc[s] = warp_sum(sc[s]) + bias[h * S + s];
                    best = fmaxf(best, sc[s]);
                }
#pragma unroll
            for (int s = 0; s < MAX_POS; ++s)
                if (s < S) {
                    p[s] = __expf(sc[s] - best);
                    total += p[s];
                }
            const float inv = 1.f / total;
            if (d < DK) {
#pragma unroll
                for (int s = 0; s < MAX_POS; ++s)
                    if (s < S)
                        for (int j = 0; j < 4; ++j) acc[0][j] += p[s] * inv * vv[s][j];
                store4(out + r * inner + off, acc[0]);
            }
            return;
        }
    }
    // d_kv > 128: the scores are complete only now; the values are read a second time
    float best = -__int_as_float(0x7f800000), p[MAX_POS], total = 0.f;
#pragma unroll
    for (int s = 0; s < MAX_POS; ++s)
        if (s < S) {
            sc[s] = warp_sum(sc[s]) + bias[h * S + s];
            best = fmaxf(best, sc[s]);
        }
#pragma unroll
    for (int s = 0; s < MAX_POS; ++s)
        if (s < S) {
            p[s] = __expf(sc[s] - best);
            total += p[s];
        }
    const float inv = 1.f / total;
    for (int g = 0; g < groups; ++g) {
        const int d = 128 * g + 4 * lane;
        if (d >= DK) continue;
        const long long off = (long long)h * DK + d;
#pragma unroll
        for (int s = 0; s < MAX_POS; ++s)
            if (s < S) {
                float vv[4];
                load4(qkv + row[s] * stride + 2 * inner + off, vv);
                for (int j = 0; j < 4; ++j) acc[g][j] += p[s] * inv * vv[j];
            }
        store4(out + r * inner + off, acc[g]);
    }
}

#define NORM_THREADS 256
#define MAX_NORM_GROUPS 4  // d_model up to 4096: groups of 1024 elements, 4 a thread

// One block a row: x[row] (fp32 residual) += y[row] (or x[row] = y[tokens[row]] where tokens is given), then
// out[row] = x[row] * rsqrt(mean(x[row]^2) + eps) * w * scale in the element type. D is a multiple of 4.
extern "C" __global__ void add_rms_norm(float* __restrict__ x, const elem_t* __restrict__ y, long long y_stride,
                                        const long long* __restrict__ tokens, const float* __restrict__ w,
                                        elem_t* __restrict__ out, int D, float eps, float scale) {
    __shared__ float part[NORM_THREADS / 32];
    const long long row = blockIdx.x;
    float* xr = x + row * D;
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
            const float4 u = *reinterpret_cast<const float4*>(xr + d);
            v[g][0] = u.x + add[0]; v[g][1] = u.y + add[1]; v[g][2] = u.z + add[2]; v[g][3] = u.w + add[3];
        }
        if (yr) *reinterpret_cast<float4*>(xr + d) = make_float4(v[g][0], v[g][1], v[g][2], v[g][3]);
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
