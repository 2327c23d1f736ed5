"""The device-side helpers every generated CUDA unit starts with (no torch headers): the
accumulator and its combine rules, warp-shuffle reductions and the block scan."""

from __future__ import annotations

from kcoder.policy.geometry import Geometry

HELPERS = r"""
#include <cooperative_groups.h>
struct Acc { double v; long long i; };
struct AccF { float v; long long i; };  // max/min/argmax/argmin of float values: exact in float
struct C_sum { __device__ static Acc c(Acc a, Acc b) { return {a.v + b.v, 0}; } };
struct C_prod { __device__ static Acc c(Acc a, Acc b) { return {a.v * b.v, 0}; } };
struct C_max { template <class A> __device__ static A c(A a, A b) { return (b.v > a.v || b.v != b.v) ? b : a; } };
struct C_min { template <class A> __device__ static A c(A a, A b) { return (b.v < a.v || b.v != b.v) ? b : a; } };
// NaN wins, then the larger (smaller) value, then the smaller index: commutative, so a
// butterfly gives every lane the same answer, and the first index wins (as ATen does).
struct C_argmax { template <class A> __device__ static A c(A a, A b) {
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) return (an && bn) ? (a.i <= b.i ? a : b) : (an ? a : b);
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a; } };
struct C_argmin { template <class A> __device__ static A c(A a, A b) {
  const bool an = a.v != a.v, bn = b.v != b.v;
  if (an || bn) return (an && bn) ? (a.i <= b.i ? a : b) : (an ? a : b);
  return (b.v < a.v || (b.v == a.v && b.i < a.i)) ? b : a; } };
// Online softmax: v is the running max, i holds the bits of the running sum of exp(x - max)
// (the rescale factor in float: its argument is a difference of float values).
struct C_lse { __device__ static Acc c(Acc a, Acc b) {
  const double sa = __longlong_as_double(a.i), sb = __longlong_as_double(b.i);
  if (a.v != a.v || b.v != b.v) return {a.v != a.v ? a.v : b.v, __double_as_longlong(NAN)};  // NaN wins, as in max
  if (b.v > a.v) return {b.v, __double_as_longlong(sb + (sa == 0.0 ? 0.0 : sa * (double)expf((float)(a.v - b.v))))};
  if (a.v > b.v) return {a.v, __double_as_longlong(sa + (sb == 0.0 ? 0.0 : sb * (double)expf((float)(b.v - a.v))))};
  return {a.v, __double_as_longlong(sa + sb)}; } };
struct S_sum { __device__ static double c(double a, double b) { return a + b; } };
struct S_prod { __device__ static double c(double a, double b) { return a * b; } };
template <class Op>
__device__ __forceinline__ Acc kc_warp_reduce(Acc v) {
  #pragma unroll
  for (int s = 16; s > 0; s >>= 1) {
    const Acc o{__shfl_xor_sync(0xffffffffu, v.v, s), __shfl_xor_sync(0xffffffffu, v.i, s)};
    v = Op::c(v, o);
  }
  return v;
}
// Every thread of the block gets the block's combined value (sh: 32 Acc).
template <class Op>
__device__ __forceinline__ Acc kc_block_reduce(Acc v, Acc id, Acc* sh) {
  v = kc_warp_reduce<Op>(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  v = kc_warp_reduce<Op>(lane < (int)(blockDim.x >> 5) ? sh[lane] : id);
  __syncthreads();  // sh is reused by the next stage
  return v;
}
// A column block (32 columns x kY = blockDim.x / 32 threads down each): the kY partials of
// each column combined in the same order by every thread of the column (sh: blockDim.x Acc).
template <class Op>
__device__ __forceinline__ Acc kc_column_reduce(Acc v, Acc* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  const int tx = threadIdx.x & 31, ny = blockDim.x >> 5;
  v = sh[tx];
  for (int y = 1; y < ny; ++y) v = Op::c(v, sh[y * 32 + tx]);
  __syncthreads();  // sh is reused by the next stage
  return v;
}
// Thread block clusters (sm_90; cuda_cluster.py): the block's rank in its cluster, the split
// cluster barrier, and a stage's block partials combined over the cluster, every block getting
// the same bits (the ranks' partials in one warp butterfly, read from each block's `slot`).
// A cluster kernel compiled for an older GPU (a multi-arch build) is never launched there
// (kc_cluster_fits says no): it keeps no cluster attribute and traps if it ever runs.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define KC_CLUSTER_DIMS(n)
#else
#define KC_CLUSTER_DIMS(n) __cluster_dims__(n, 1, 1)
#endif
__device__ __forceinline__ unsigned kc_cluster_rank() {
#if __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().block_rank();
#else
  __trap();
  return 0;
#endif
}
__device__ __forceinline__ void kc_cluster_arrive() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void kc_cluster_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}
template <class Op, int CL>
__device__ __forceinline__ Acc kc_cluster_reduce(Acc v, Acc id, Acc* slot) {
#if __CUDA_ARCH__ >= 900
  if (threadIdx.x == 0) *slot = v;
  kc_cluster_arrive();  // every block's partial written before any block reads one
  kc_cluster_wait();
  const int lane = threadIdx.x & 31;
  Acc w = id;
  if (lane < CL) w = *cooperative_groups::this_cluster().map_shared_rank(slot, (unsigned)lane);
  return kc_warp_reduce<Op>(w);
#else
  return v;
#endif
}
// Host: can a cluster of `kernel` (its __cluster_dims__) with `smem` bytes of dynamic shared
// memory a block be resident on the current device? (No: the caller runs another layout.)
template <class K>
static bool kc_cluster_fits(K kernel, unsigned grid, int threads, int smem) {
  int dev = 0, major = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess || major < 9) {
    (void)cudaGetLastError();
    return false;
  }
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}
// The exclusive prefix of v over the block's threads (blockDim.x a multiple of 32), and the
// block's total in `total`: a shuffle scan per warp, then one of the warps' totals.
template <class Op>
__device__ double kc_block_scan(double v, double id, double* sh, double& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  double x = v;
  for (int s = 1; s < 32; s <<= 1) {
    const double y = __shfl_up_sync(0xffffffffu, x, s);
    if (lane >= s) x = Op::c(y, x);
  }
  if (lane == 31) sh[warp] = x;
  __syncthreads();
  if (warp == 0) {
    double w = lane < nw ? sh[lane] : id;
    for (int s = 1; s < 32; s <<= 1) {
      const double y = __shfl_up_sync(0xffffffffu, w, s);
      if (lane >= s) w = Op::c(y, w);
    }
    if (lane < nw) sh[lane] = w;
  }
  __syncthreads();
  const double before = warp ? sh[warp - 1] : id;
  total = sh[nw - 1];
  double excl = __shfl_up_sync(0xffffffffu, x, 1);
  excl = lane ? Op::c(before, excl) : before;
  __syncthreads();  // sh is reused by the next chunk
  return excl;
}
"""

INIT = {"sum": "Acc{0.0, 0}", "prod": "Acc{1.0, 0}", "max": "Acc{-INFINITY, 0}", "min": "Acc{INFINITY, 0}",
        "argmax": "Acc{-INFINITY, 0x7fffffffffffffffLL}", "argmin": "Acc{INFINITY, 0x7fffffffffffffffLL}",
        "lse": "Acc{-INFINITY, 0}"}
INIT_F = {k: v.replace("Acc{", "AccF{") for k, v in INIT.items() if k in ("max", "min", "argmax", "argmin")}


def offset(sizes: list[int], strides: list[int], var: str, itype: str) -> str:
    """The element offset of flat index `var` over `sizes` (row-major) with `strides`, as C
    with literal sizes and strides: the divisions by constants become multiply-shifts."""
    terms = []
    for d, (n, s) in enumerate(zip(sizes, strides, strict=True)):
        if s == 0 or n == 1:
            continue
        div = 1
        for m in sizes[d + 1:]:
            div *= m
        idx = var if div == 1 else f"({var} / ({itype}){div})"
        if d > 0:
            idx = f"({idx} % ({itype}){n})"
        terms.append(idx if s == 1 else f"{idx} * ({itype}){s}")
    return " + ".join(terms) if terms else f"({itype})0"


INT_SPAN = (1 << 31) - (1 << 24)  # the reach below which offsets are 32-bit (index_type)


def index_type(geo: Geometry) -> str:
    """int when every offset fits with room to spare (a loop index runs up to a few tiles past
    the end before its bound check), else 64-bit."""
    return "int" if geo.span() < INT_SPAN else "long long"
