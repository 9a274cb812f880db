#pragma once
// Configuration macros: the only macros kiln defines besides include guards.

#define KILN_VERSION_MAJOR 0
#define KILN_VERSION_MINOR 1
#define KILN_VERSION_PATCH 0

// KILN_HD marks code that must run on the host and inside CUDA kernels.
#if defined(__CUDACC__)
#define KILN_HD __host__ __device__
#else
#define KILN_HD
#endif

// KILN_HD_TEMPLATE precedes a __host__ __device__ template that host code also instantiates with host-only
// arguments (the CPU's loaders): nvcc then compiles each instantiation for the side it is called from, without
// its warning #20014.
#if defined(__CUDACC__)
#define KILN_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define KILN_HD_TEMPLATE
#endif

// KILN_INLINE forces inlining of the tiny per-element functions of a fused loop, where the compiler optimizes. At
// -O0 (no __OPTIMIZE__) it is plain `inline`, as KILN_LAMBDA_INLINE is empty: forced inlining there copied each
// expression into every caller of the loop's paths and made nothing fast, and without it clang 14 compiled an eager
// kernel part under AddressSanitizer in 0.67x the CPU (bench/RESULTS.md, "What the test command costs").
#if defined(__CUDACC__)
#define KILN_INLINE __forceinline__
#elif (defined(__GNUC__) || defined(__clang__)) && defined(__OPTIMIZE__)
#define KILN_INLINE inline __attribute__((always_inline))
#else
#define KILN_INLINE inline
#endif

// KILN_NOINLINE keeps a function out of line: the cold or size-heavy paths of a fused loop (threaded runs, head
// and tail batches) that would otherwise be inlined once more at every call.
#if defined(__CUDACC__)
#define KILN_NOINLINE __noinline__
#elif defined(__GNUC__) || defined(__clang__)
#define KILN_NOINLINE __attribute__((noinline))
#else
#define KILN_NOINLINE
#endif

// The same for the index-sequence lambdas inside those functions (host code only): an outlined lambda would take
// the frame of computed values by reference, which keeps every value in memory instead of in registers.
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && defined(__OPTIMIZE__)
#define KILN_LAMBDA_INLINE __attribute__((always_inline))
#else
#define KILN_LAMBDA_INLINE
#endif

// KILN_FP_CONTRACT: fused loops compute a * b + c, a * b - c and c - a * b in floating point as one fused
// multiply-add (one rounding instead of two) where the target has FMA instructions, whichever compiler builds
// them. GCC contracts such pairs by default, clang only within one source expression, and a graph's ops are
// separate expressions: without this, the same graph was two operations slower per element under clang. Define
// it to 0 to leave contraction to the compiler's -ffp-contract setting. CUDA device code leaves it to nvcc, which
// contracts by default.
#ifndef KILN_FP_CONTRACT
#if (defined(__FMA__) || defined(__ARM_FEATURE_FMA)) && !defined(__CUDA_ARCH__)
#define KILN_FP_CONTRACT 1
#else
#define KILN_FP_CONTRACT 0
#endif
#endif

// KILN_DETAIL_KERNEL_GUARD(T, allowed): a test's guard (test/CMakeLists.txt, "headers_compile_no_kernels"). The
// headers' inline code must not compile an eager kernel: every translation unit would pay for it (0.2 to 0.4 s of
// CPU per op). Defining KILN_DETAIL_NO_HEADER_KERNELS turns each kernel's instantiation into a compile error, so
// that a translation unit that includes kiln and calls nothing compiles only where no header does so.
#ifdef KILN_DETAIL_NO_HEADER_KERNELS
#define KILN_DETAIL_KERNEL_GUARD(T, allowed)                                                                      \
    static_assert(sizeof(T) == 0 || (allowed), "kiln: an eager kernel was instantiated by code in kiln's headers")
#else
#define KILN_DETAIL_KERNEL_GUARD(T, allowed) static_assert(true)
#endif
