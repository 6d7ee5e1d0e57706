// Thread block cluster primitives shared by gtm_fused.cu and trie_search.cu (PTX: NVRTC has no
// cooperative_groups header). The CPU emulation (tests/cuda_emu.py) defines them for its threads.
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
#endif
