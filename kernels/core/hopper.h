/* Hopper (sm_90) copy-engine helpers shared by the .cu files of libhyprof
 * (CUDA C++ only): mbarriers, bulk copies (cp.async.bulk) and tensor copies
 * (cp.async.bulk.tensor) into shared memory, and the host side of a tensor
 * map (cuTensorMapEncodeTiled, reached through the runtime's driver entry
 * point: the library does not link libcuda itself).
 *
 * The device helpers exist only when compiling for sm_90 or later; a kernel
 * that uses them guards its body with HYPROF_HOPPER and its launcher checks
 * the compute capability. Everything here is static/inline. */
#ifndef HYPROF_KERNELS_HOPPER_H
#define HYPROF_KERNELS_HOPPER_H

#include <cuda_runtime.h>
#include <cudaTypedefs.h> /* CUtensorMap, PFN_cuTensorMapEncodeTiled (header only) */

#include <cstdint>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define HYPROF_HOPPER 1
#endif

namespace hyprof_cuda {

#ifdef HYPROF_HOPPER
__device__ __forceinline__ unsigned smem_u32(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(uint64_t *b, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(b)), "r"(count)
                 : "memory");
}
/* After the mbarrier inits of a thread, before the barrier that publishes them. */
__device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_tx(uint64_t *b, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(b)),
                 "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred p;\n"
                 "WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT;\n"
                 "}\n" ::"r"(smem_u32(b)),
                 "r"(parity)
                 : "memory");
}
__device__ __forceinline__ void bulk_copy(void *dst, const void *src, unsigned bytes, uint64_t *b)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];\n" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(b))
                 : "memory");
}
/* The box of tensor map `map` at element (x, y, z) into shared memory at dst
 * (128-byte aligned), completing on mbarrier b; elements outside the tensor
 * (negative coordinates too) arrive as zeros (CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE). */
__device__ __forceinline__ void tensor_copy_3d(void *dst, const CUtensorMap *map, int x, int y,
                                               int z, uint64_t *b)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(smem_u32(dst)),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(z), "r"(smem_u32(b))
                 : "memory");
}
/* Orders this thread's earlier shared-memory accesses before the copy
 * engine's next ones (a thread that issues copies into memory it read). */
__device__ __forceinline__ void fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#endif

/* cuTensorMapEncodeTiled through the runtime's driver entry point, or NULL
 * when the driver does not offer it (resolved once). */
static inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder()
{
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                             cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            p = NULL;
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

/* A 3-D float32 tensor map of nz planes of w x h floats (rows `ld` floats
 * apart, planes `plane` floats apart) read in boxes of bw x bh x 1, with
 * zeros outside. ld and plane must be multiples of 4 and base 16-byte
 * aligned (the copy engine's rules). False when it cannot be made. */
static inline bool float_tensor_map(CUtensorMap *map, const float *base, size_t w, size_t h,
                                    size_t nz, size_t ld, size_t plane, unsigned bw, unsigned bh)
{
    const PFN_cuTensorMapEncodeTiled_v12000 enc = tensor_map_encoder();
    if (!enc || ((uintptr_t)base & 15) || (ld & 3) || (plane & 3))
        return false;
    const cuuint64_t dim[3] = {w, h, nz};
    const cuuint64_t stride[2] = {ld * sizeof(float), plane * sizeof(float)};
    const cuuint32_t box[3] = {bw, bh, 1}, one[3] = {1, 1, 1};
    return enc(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, const_cast<float *>(base), dim, stride,
               box, one, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
               CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

} /* namespace hyprof_cuda */

#endif
