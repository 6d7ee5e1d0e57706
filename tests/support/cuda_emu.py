"""A small CUDA emulation on the CPU, so that the kernels in gtmkit/matcher/cuda/kernels/ run without a GPU and
can be checked against the CPU code in CI (tests/cuda/test_trie_gpu_emu.py, tests/cuda/test_fused_emu.py).

A .cu file is compiled with g++ behind HARNESS: each CUDA thread is a fiber (ucontext) on the calling thread;
__syncthreads and the warp intrinsics are barriers that yield until all their threads arrive (a warp intrinsic
reached by part of a warp is a deadlock, reported and aborted, as a wrong mask would misbehave on the GPU); a static __shared__ variable is shared by every thread of the launch, so kernels
that declare them run one block at a time; dynamic shared memory is per block. A thread block cluster's
blocks run at once, with a split arrive/wait cluster barrier and the distributed-shared-memory helpers
of gtm_fused.cu (compiled with GTMKIT_EMU, which swaps its PTX for these); clusters run one after the
other. `launch` checks every argument against the kernel's signature (a Python int or a wrong dtype
fails here; CuPy would pass it on silently)."""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import numpy as np

KERNEL_DIR = Path(__file__).resolve().parents[2] / "gtmkit" / "matcher" / "cuda" / "kernels"
SHARED_KERNELS = KERNEL_DIR.parents[2] / "_gpu" / "kernels"

HARNESS = r"""
#include <math.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

struct emu_dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local emu_dim3 threadIdx, blockIdx;  // the running fiber's, swapped in by the scheduler
static emu_dim3 blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __cluster_dims__(...)
#define __shared__ static
#define __restrict__ __restrict

using std::max;  // CUDA's integer max / min
using std::min;

// ---- fibers: every CUDA thread of a cluster is a fiber on the calling thread; a barrier yields until the
// last of its threads arrives. One OS thread switching fibers costs far less than hundreds of OS threads
// meeting at futex barriers on a few cores.
struct EmuFiber { ucontext_t ctx; emu_dim3 tid, bid; unsigned rank = 0, cl_gen = 0; bool done = false; };
static thread_local ucontext_t emu_sched;
static thread_local EmuFiber* emu_cur;
static thread_local unsigned long long emu_progress;  // barriers completed and fibers finished
static thread_local unsigned emu_rank;       // the block's rank in its cluster
static thread_local unsigned emu_cl_my_gen;  // the cluster barrier's generation at this fiber's arrive
static inline void emu_yield() { swapcontext(&emu_cur->ctx, &emu_sched); }
struct EmuBarrier { unsigned need = 0, arrived = 0, gen = 0; };
static inline void emu_barrier_wait(EmuBarrier& b) {
    const unsigned g = b.gen;
    if (++b.arrived == b.need) { b.arrived = 0; ++b.gen; ++emu_progress; return; }
    while (b.gen == g) emu_yield();
}

#define EMU_MAX_CL 8
struct EmuWarp { EmuBarrier bar; unsigned long long v[32]; };
struct EmuBlock { EmuBarrier bar; int count = 0; unsigned char* smem = nullptr; };
static EmuBlock emu_blocks[EMU_MAX_CL];
static EmuWarp emu_warps[EMU_MAX_CL * 32];

static inline void __syncthreads() { emu_barrier_wait(emu_blocks[emu_rank].bar); }
static inline void emu_full(unsigned mask) {
    if (mask != 0xffffffffu) { fprintf(stderr, "emu: partial warp mask\n"); abort(); }
}
static inline EmuWarp& emu_warp() { return emu_warps[emu_rank * 32 + (threadIdx.x >> 5)]; }
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_full(mask); emu_barrier_wait(emu_warp().bar); }
template <class T> static inline T emu_exchange(T v, int src) {
    EmuWarp& w = emu_warp();
    unsigned long long bits = 0;
    memcpy(&bits, &v, sizeof(T));
    w.v[threadIdx.x & 31] = bits;
    emu_barrier_wait(w.bar);
    unsigned long long got = w.v[src & 31];
    emu_barrier_wait(w.bar);
    T r;
    memcpy(&r, &got, sizeof(T));
    return r;
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src) {
    emu_full(mask);
    return emu_exchange(v, src);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int d) {
    emu_full(mask);
    return emu_exchange(v, (int)(threadIdx.x & 31) ^ d);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d) {
    emu_full(mask);
    int lane = threadIdx.x & 31;
    return emu_exchange(v, lane >= (int)d ? lane - (int)d : lane);
}
static inline unsigned __ballot_sync(unsigned mask, int pred) {
    emu_full(mask);
    EmuWarp& w = emu_warp();
    w.v[threadIdx.x & 31] = pred ? 1 : 0;
    emu_barrier_wait(w.bar);
    unsigned r = 0;
    for (int i = 0; i < 32; ++i)
        if (w.v[i] != 0) r |= 1u << i;
    emu_barrier_wait(w.bar);
    return r;
}
static inline int __syncthreads_count(int pred) {
    EmuBlock& b = emu_blocks[emu_rank];
    __syncthreads();  // the previous call's reset is done
    if (pred) __atomic_fetch_add(&b.count, 1, __ATOMIC_SEQ_CST);
    __syncthreads();
    int r = __atomic_load_n(&b.count, __ATOMIC_SEQ_CST);
    __syncthreads();
    if (threadIdx.x == 0) b.count = 0;
    return r;
}
template <class T, class V> static inline T atomicAdd(T* a, V v) { return __atomic_fetch_add(a, (T)v, __ATOMIC_SEQ_CST); }
template <class T, class V> static inline T atomicOr(T* a, V v) { return __atomic_fetch_or(a, (T)v, __ATOMIC_SEQ_CST); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
template <class T, class V> static inline T atomicExch(T* a, V v) { return __atomic_exchange_n(a, (T)v, __ATOMIC_SEQ_CST); }
template <class T, class V> static inline T atomicMax(T* a, V v) {
    T old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
    while (old < (T)v && !__atomic_compare_exchange_n(a, &old, (T)v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return old;
}
template <class T, class V> static inline T atomicMin(T* a, V v) {
    T old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
    while (old > (T)v && !__atomic_compare_exchange_n(a, &old, (T)v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
    return old;
}
template <class T, class V, class W> static inline T atomicCAS(T* a, V expected, W v) {
    T old = (T)expected;
    __atomic_compare_exchange_n(a, &old, (T)v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return old;  // the value found (== expected when it swapped)
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline int __ffsll(long long x) { return __builtin_ffsll(x); }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float emu_half_to_float(unsigned short h) {
    unsigned s = (h >> 15) & 1u, e = (h >> 10) & 31u, m = h & 1023u, u;
    if (e == 31) u = (s << 31) | 0x7f800000u | (m << 13);
    else if (e) u = (s << 31) | ((e + 112) << 23) | (m << 13);
    else if (!m) u = s << 31;
    else { float f = (float)m / 16777216.0f; return s ? -f : f; }  // subnormal: m * 2^-24
    return __uint_as_float(u);
}

// ---- clusters -------------------------------------------------------------------------------------
static unsigned emu_cl = 1;
static unsigned emu_cl_arrived = 0, emu_cl_gen = 0;
static inline unsigned char* emu_dyn_smem() { return emu_blocks[emu_rank].smem; }
static inline unsigned cluster_rank() { return emu_rank; }
static inline void cluster_arrive() {
    emu_cl_my_gen = emu_cl_gen;
    if (++emu_cl_arrived == emu_cl * blockDim.x) { emu_cl_arrived = 0; ++emu_cl_gen; ++emu_progress; }
}
static inline void cluster_wait() {
    while (emu_cl_gen == emu_cl_my_gen) emu_yield();
}
static inline void cluster_sync() { cluster_arrive(); cluster_wait(); }
// the same shared variable in block `rank` of the cluster, and atomic access to it
static inline unsigned* remote(const void* p, unsigned rank) {
    return (unsigned*)(emu_blocks[rank].smem + ((const unsigned char*)p - emu_dyn_smem()));
}
static inline void dsm_add(unsigned* a, unsigned v) { __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
static inline unsigned dsm_fetch_add(unsigned* a, unsigned v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
static inline void dsm_max(unsigned* a, unsigned v) {
    unsigned old = __atomic_load_n(a, __ATOMIC_SEQ_CST);
    while (old < v && !__atomic_compare_exchange_n(a, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
}
static inline unsigned dsm_load(unsigned* a) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }

// grid blocks in clusters of `cl`; a cluster's blocks run at once, each with `smem` bytes of dynamic
// shared memory (garbage-filled: kernels must initialise what they read)
#define EMU_STACK (256 << 10)
template <class F> struct EmuBody { static void run(unsigned lo, unsigned hi) {
    const F* f = (const F*)(((unsigned long long)hi << 32) | lo);
    (*f)();
    emu_cur->done = true;
    ++emu_progress;
} };
template <class F> static void emu_launch(unsigned grid, unsigned grid_y, unsigned block, unsigned cl, unsigned smem,
                                          F f) {
    if (block < 1 || block > 1024 || cl < 1 || cl > EMU_MAX_CL || grid % cl || (cl > 1 && grid_y != 1)) {
        fprintf(stderr, "emu: bad launch shape\n");
        abort();
    }
    blockDim.x = block;
    gridDim.x = grid;
    gridDim.y = grid_y;
    emu_cl = cl;
    std::vector<unsigned char> mem((size_t)cl * smem + 1);
    for (size_t i = 0; i < mem.size(); ++i) mem[i] = (unsigned char)(i * 131 + 17);
    for (unsigned r = 0; r < cl; ++r) {
        emu_blocks[r].bar = EmuBarrier{block, 0, 0};
        emu_blocks[r].count = 0;
        emu_blocks[r].smem = mem.data() + (size_t)r * smem;
        for (unsigned w = 0; w < (block + 31) / 32; ++w)  // a last partial warp has fewer lanes
            emu_warps[r * 32 + w].bar = EmuBarrier{block - 32 * w < 32 ? block - 32 * w : 32, 0, 0};
    }
    emu_cl_arrived = 0;
    const size_t n = (size_t)cl * block;
    char* stacks = (char*)mmap(nullptr, n * EMU_STACK, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) { fprintf(stderr, "emu: no memory for fiber stacks\n"); abort(); }
    std::vector<EmuFiber> fibers(n);
    const unsigned long long fp = (unsigned long long)&f;
    const unsigned clusters = grid / cl * grid_y;
    for (unsigned c = 0; c < clusters; ++c) {  // a cluster's fibers run to their ends before the next cluster
        for (size_t i = 0; i < n; ++i) {
            EmuFiber& fb = fibers[i];
            fb = EmuFiber();
            fb.rank = (unsigned)(i / block);
            fb.tid.x = (unsigned)(i % block);
            fb.bid.x = (c % (grid / cl)) * cl + fb.rank;  // x fastest, then y (clusters are 1-D)
            fb.bid.y = c / (grid / cl);
            getcontext(&fb.ctx);
            fb.ctx.uc_stack.ss_sp = stacks + i * EMU_STACK;
            fb.ctx.uc_stack.ss_size = EMU_STACK;
            fb.ctx.uc_link = &emu_sched;
            makecontext(&fb.ctx, (void (*)())EmuBody<F>::run, 2, (unsigned)(fp & 0xffffffffu), (unsigned)(fp >> 32));
        }
        size_t live = n;
        while (live) {
            const unsigned long long before = emu_progress;
            for (size_t i = 0; i < n; ++i) {
                EmuFiber& fb = fibers[i];
                if (fb.done) continue;
                threadIdx = fb.tid; blockIdx = fb.bid; emu_rank = fb.rank; emu_cl_my_gen = fb.cl_gen;
                emu_cur = &fb;
                swapcontext(&emu_sched, &fb.ctx);
                fb.cl_gen = emu_cl_my_gen;
                if (fb.done) --live;
            }
            if (live && emu_progress == before) {  // every live thread waits at a barrier that cannot complete
                fprintf(stderr, "emu: deadlock (a barrier or warp intrinsic not reached by all its threads)\n");
                abort();
            }
        }
    }
    munmap(stacks, n * EMU_STACK);
}
"""

KERNEL_RE = re.compile(r'extern "C" __global__ void\s+(?:__\w+__\([^)]*\)\s*)*(\w+)\(([^)]*)\)')
# kernel parameter types -> what a launch must pass (a NumPy scalar type, or an array dtype for pointers;
# None: any dtype)
SCALARS = {"int": np.int32, "float": np.float32, "double": np.float64, "i64": np.int64, "u64": np.uint64}
POINTEES = {"int": np.int32, "float": np.float32, "double": np.float64, "i64": np.int64, "u64": np.uint64,
            "u32": np.uint32, "unsigned": np.uint32, "void": None, "char": None,
            "unsigned char": np.uint8}


def kernel_signatures(source: str) -> dict:
    """kernel name -> parameter types, e.g. ["const int*", "int", ...]."""
    out = {}
    for name, params in KERNEL_RE.findall(source):
        types = []
        for p in params.split(","):
            typ = p.strip().rsplit(None, 1)[0] if "*" not in p else p[:p.rindex("*") + 1].strip()
            types.append(" ".join(typ.split()))
        out[name] = types
    return out


def build_emulator(tmp_path: Path, kernel_file: Path, defines: dict, extra: str = "") -> tuple:
    """Compile kernel_file behind HARNESS -> (ctypes library, signatures). Each kernel NAME gets a C entry
    emu_NAME(grid, block, cluster, smem_bytes, args)."""
    source = Path(kernel_file).read_text()
    sigs = kernel_signatures(source)
    wrappers = []
    for name, types in sigs.items():
        args = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
        wrappers.append(f'extern "C" void emu_{name}(unsigned grid, unsigned grid_y, unsigned block, unsigned cl, '
                        f'unsigned smem, void** a) {{ emu_launch(grid, grid_y, block, cl, smem, [=] {{ {name}({args}); }}); }}')
    src = tmp_path / "emu.cpp"
    src.write_text(HARNESS + f'#include "{kernel_file}"\n' + "\n".join(wrappers) + "\n" + extra)
    lib = tmp_path / "emu.so"
    flags = [f"-D{k}={v}" for k, v in defines.items()]
    # -O0: on test inputs the kernels run for moments; compiling them is most of an emulated test's time
    r = subprocess.run(["g++", "-O0", "-std=c++17", "-pthread", "-shared", "-fPIC", "-w", f"-I{KERNEL_DIR}", f"-I{SHARED_KERNELS}", *flags,
                        str(src), "-o", str(lib)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    return ctypes.CDLL(str(lib)), sigs


def launch(lib, sigs: dict, name: str, grid, block: int, args: tuple, cluster: int = 1, smem: int = 0):
    """Run kernel `name` on the emulation (grid: blocks, or (x, y) blocks), each argument checked against its
    parameter type; None or an integer 0 passes a null pointer."""
    types = sigs[name]
    assert len(args) == len(types), (name, len(args), len(types))
    gx, gy = (grid, 1) if np.isscalar(grid) else (tuple(grid) + (1,))[:2]
    held = []
    for typ, a in zip(types, args):
        if typ.endswith("*") and (a is None or (np.isscalar(a) and a == 0)):  # a null pointer
            held.append(ctypes.c_void_p(None))
        elif typ.endswith("*"):
            want = POINTEES[typ.replace("const", "").replace("*", "").strip()]
            assert isinstance(a, np.ndarray) and a.flags.c_contiguous and (want is None or a.dtype == want), \
                (name, typ, a)
            held.append(ctypes.c_void_p(a.ctypes.data))
        else:
            want = SCALARS[typ]
            assert type(a) is want, (name, typ, type(a))
            held.append(np.ctypeslib.as_ctypes_type(want)(a))
    ptrs = (ctypes.c_void_p * max(len(held), 1))(*[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in held])
    assert gx > 0 and gy > 0, (name, grid)  # CUDA refuses an empty grid
    getattr(lib, "emu_" + name)(ctypes.c_uint(gx), ctypes.c_uint(gy), ctypes.c_uint(block), ctypes.c_uint(cluster),
                                ctypes.c_uint(smem), ptrs)


def garbage(shape, dtype, rng) -> np.ndarray:
    """An array of random bytes, as fresh device memory holds: a kernel that reads what nobody wrote then
    fails the comparisons instead of reading lucky zeros."""
    a = np.empty(shape, dtype)
    a.view(np.uint8).reshape(-1)[:] = rng.integers(0, 256, a.nbytes, dtype=np.uint8)
    return a
