// Thread block cluster primitives shared by gtm_fused.cu and trie_search.cu (PTX: NVRTC has no
// cooperative_groups header). The CPU emulation (tests/support/cuda_emu.py) defines them for its threads.
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

// Distributed shared memory: the address of a shared variable in block `rank` of the cluster, and access to
// it (u32).
__device__ __forceinline__ unsigned int shared_addr(const void* p) {
    unsigned long long a;
    asm("cvta.to.shared.u64 %0, %1;" : "=l"(a) : "l"(p));
    return (unsigned int)a;
}

// Address of the same shared variable in block `rank` of the cluster.
__device__ __forceinline__ unsigned int remote(const void* p, unsigned int rank) {
    unsigned int r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(shared_addr(p)), "r"(rank));
    return r;
}

__device__ __forceinline__ void dsm_add(unsigned int addr, unsigned int v) {
    asm volatile("red.shared::cluster.add.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void dsm_max(unsigned int addr, unsigned int v) {
    asm volatile("red.shared::cluster.max.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned int dsm_fetch_add(unsigned int addr, unsigned int v) {
    unsigned int old;
    asm volatile("atom.shared::cluster.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(addr), "r"(v) : "memory");
    return old;
}

__device__ __forceinline__ unsigned int dsm_load(unsigned int addr) {
    unsigned int v;
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
    return v;
}
#endif
