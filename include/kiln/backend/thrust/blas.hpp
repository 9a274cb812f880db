#pragma once
// The GPU device's products (backend/thrust/device.hpp calls them): the BLAS contract, cuBLAS on CUDA (float and
// double; its handle on the device's stream) and a reference kernel elsewhere (integer products, and every dtype on
// the emulated device).
#include <cstddef>
#include <string>
#include <type_traits>

#include "kernels.hpp"

#if KILN_GPU_CUDA
#include <cublas_v2.h>
#endif

namespace kiln {
namespace backend {
namespace gpu {

// C (m x n, column-major, leading dimension ldc) = op(A) op(B): the BLAS contract, on the host for the emulated
// device (cuBLAS's reference), in cuBLAS on CUDA. op(X) is X or its transpose. With batch strides, element e of
// batch q = e / (m n) reads A + q sa and B + q sb and writes C + q sc (cuBLAS's strided-batched contract).
template <class T>
struct gemm_kernel {
    bool ta, tb;
    std::ptrdiff_t m, n, k;
    const T* a;
    std::ptrdiff_t lda;
    const T* b;
    std::ptrdiff_t ldb;
    T* c;
    std::ptrdiff_t ldc;
    std::ptrdiff_t sa = 0, sb = 0, sc = 0;
    KILN_HD void operator()(std::ptrdiff_t e) const {
        const std::ptrdiff_t q = e / (m * n), r = e % (m * n);
        const std::ptrdiff_t i = r % m, j = r / m;
        const T* a = this->a + q * sa;
        const T* b = this->b + q * sb;
        T* c = this->c + q * sc;
        T acc = T(0);
        for (std::ptrdiff_t p = 0; p < k; ++p) {
            const T av = ta ? a[p + i * lda] : a[i + p * lda];
            const T bv = tb ? b[j + p * ldb] : b[p + j * ldb];
            if constexpr (std::is_same_v<T, bool>) acc = acc || (av && bv);
            else if constexpr (std::is_integral_v<T>)
                acc = static_cast<T>(::kiln::detail::kernels::wrapping_add(acc, ::kiln::detail::kernels::wrapping_mul(av, bv)));
            else acc += av * bv;
        }
        c[i + j * ldc] = acc;
    }
};

#if KILN_GPU_CUDA
// The handle a thread uses while it captures a CUDA graph on device `index`: its own, on the capturing stream,
// with a workspace of its own (cuBLAS must not allocate one during a capture).
inline cublasHandle_t capture_blas_handle(int index, cudaStream_t s) {
    struct handles {
        cublasHandle_t h[gpu_memory::max_devices] = {};
        void* workspace[gpu_memory::max_devices] = {};
        ~handles() {
            for (int i = 0; i < gpu_memory::max_devices; ++i) {
                if (h[i]) cublasDestroy(h[i]);
                if (workspace[i]) cudaFree(workspace[i]);
            }
        }
    };
    static thread_local handles hs;
    constexpr std::size_t workspace_bytes = std::size_t{32} << 20;  // cuBLAS's advice for Hopper
    if (!hs.h[index]) {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;  // (made on first use, possibly inside a capture)
        cudaThreadExchangeStreamCaptureMode(&mode);
        gpu_memory::scoped_device on(index);
        cublasHandle_t h{};
        void* w = nullptr;
        const bool ok = cublasCreate(&h) == CUBLAS_STATUS_SUCCESS && cudaMalloc(&w, workspace_bytes) == cudaSuccess;
        cudaThreadExchangeStreamCaptureMode(&mode);
        if (!ok) {
            if (h) cublasDestroy(h);
            (void)cudaGetLastError();
            throw device_error("kiln: device_error in 'matmul': cuBLAS could not be initialized for a CUDA graph");
        }
        hs.h[index] = h;
        hs.workspace[index] = w;
    }
    cublasSetStream(hs.h[index], s);  // (which resets the workspace: set again)
    cublasSetWorkspace(hs.h[index], hs.workspace[index], workspace_bytes);
    return hs.h[index];
}

inline cublasHandle_t blas_handle(int index = gpu_memory::current_device()) {
    if (const gpu_memory::capture_state& c = gpu_memory::capturing(); c.stream && c.index == index) [[unlikely]]
        return capture_blas_handle(index, c.stream);
    struct handles {
        cublasHandle_t h[gpu_memory::max_devices] = {};
    };
    static handles hs;
    static std::atomic_flag lock = ATOMIC_FLAG_INIT;
    while (lock.test_and_set(std::memory_order_acquire)) {}
    if (!hs.h[index]) {
        gpu_memory::scoped_device on(index);
        cublasHandle_t h{};
        if (cublasCreate(&h) == CUBLAS_STATUS_SUCCESS) {
            cublasSetStream(h, gpu_memory::stream(index));
            hs.h[index] = h;
        }
    }
    lock.clear(std::memory_order_release);
    if (!hs.h[index]) throw device_error("kiln: device_error in 'matmul': cuBLAS could not be initialized");
    return hs.h[index];
}
#endif

// `batches` column-major products C = op(A) op(B), operand q at a + q sa, b + q sb, c + q sc (a stride of 0 repeats
// an operand): through cuBLAS for float and double on CUDA (cublas{S,D}gemm for one product, the strided-batched
// call for several), one pass of the kernel above otherwise. op(X) is X or its transpose.
template <class T>
void blas_strided_batched(bool ta, bool tb, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const T* a,
                          std::ptrdiff_t lda, std::ptrdiff_t sa, const T* b, std::ptrdiff_t ldb, std::ptrdiff_t sb, T* c,
                          std::ptrdiff_t ldc, std::ptrdiff_t sc, std::ptrdiff_t batches) {
#if KILN_GPU_CUDA
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        const T one = 1, zero = 0;
        const auto oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
        const int M = static_cast<int>(m), N = static_cast<int>(n), K = static_cast<int>(k);
        const int LA = static_cast<int>(lda), LB = static_cast<int>(ldb), LC = static_cast<int>(ldc);
        const auto SA = static_cast<long long>(sa), SB = static_cast<long long>(sb), SC = static_cast<long long>(sc);
        cublasStatus_t st;
        if constexpr (std::is_same_v<T, float>)
            st = batches == 1 ? cublasSgemm(blas_handle(), oa, ob, M, N, K, &one, a, LA, b, LB, &zero, c, LC)
                              : cublasSgemmStridedBatched(blas_handle(), oa, ob, M, N, K, &one, a, LA, SA, b, LB, SB, &zero, c,
                                                          LC, SC, static_cast<int>(batches));
        else
            st = batches == 1 ? cublasDgemm(blas_handle(), oa, ob, M, N, K, &one, a, LA, b, LB, &zero, c, LC)
                              : cublasDgemmStridedBatched(blas_handle(), oa, ob, M, N, K, &one, a, LA, SA, b, LB, SB, &zero, c,
                                                          LC, SC, static_cast<int>(batches));
        if (st != CUBLAS_STATUS_SUCCESS)
            throw device_error("kiln: device_error in 'matmul': cuBLAS failed (status " + std::to_string(static_cast<int>(st)) +
                               ")");
        return;
    }
#endif
    for_each_n(batches * m * n, gemm_kernel<T>{ta, tb, m, n, k, a, lda, b, ldb, c, ldc, sa, sb, sc});
}

// One column-major product C = op(A) op(B).
template <class T>
void blas(bool ta, bool tb, std::ptrdiff_t m, std::ptrdiff_t n, std::ptrdiff_t k, const T* a, std::ptrdiff_t lda,
          const T* b, std::ptrdiff_t ldb, T* c, std::ptrdiff_t ldc) {
    blas_strided_batched(ta, tb, m, n, k, a, lda, 0, b, ldb, 0, c, ldc, 0, 1);
}

}  // namespace gpu
}  // namespace backend
}  // namespace kiln
