// Thread block cluster primitives shared by gtm_fused.cu and trie_search.cu (PTX: NVRTC has no
// cooperative_groups header), and distributed shared memory: remote(p, rank) is the address of shared
// variable p in block `rank` of the cluster, for the dsm_* accesses. The CPU emulation (tests/cuda_emu.py)
// defines them for its threads.
#pragma once

#ifndef GTMKIT_EMU
__device__ __forceinline__ unsigned int cluster_rank() {
    unsigned int r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// arrive has release and wait acquire semantics at cluster scope: shared and global writes made before the
// barrier by any block of the cluster are visible to every block after it.
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

// The two halves of cluster_sync, so that independent work can run between them.
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }

__device__ __forceinline__ u32 shared_addr(const void* p) {
    u64 a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (u32)a;
}

// Address of the same shared variable in block `rank` of the cluster.
__device__ __forceinline__ u32 remote(const void* p, u32 rank) {
    u32 r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(shared_addr(p)), "r"(rank));
    return r;
}

__device__ __forceinline__ void dsm_add(u32 addr, u32 v) {
    asm volatile("red.shared::cluster.add.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void dsm_max(u32 addr, u32 v) {
    asm volatile("red.shared::cluster.max.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ u32 dsm_fetch_add(u32 addr, u32 v) {
    u32 old;
    asm volatile("atom.shared::cluster.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(addr), "r"(v) : "memory");
    return old;
}

__device__ __forceinline__ u32 dsm_load(u32 addr) {
    u32 v;
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
#endif
