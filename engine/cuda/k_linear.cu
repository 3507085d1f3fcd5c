/*
 * k_linear.cu — the small kernels around matmul's and linear's GEMMs
 * (k_linear.h). Grid-stride loops; the column sums give each column to one
 * thread, which adds its rows in order (the CPU's order, the same bits).
 */
#include "cuda/k_blas_math.cuh"
#include "cuda/k_linear.h"

#define THREADS 256

/* Blocks for n elements, capped: grid-stride loops take the rest. */
#define blocks(n) k_blocks((n), THREADS)

template <int DT> static __global__ void bias_rows_kernel(float *y, const void *b, int64_t n, int64_t cols)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = kb_load<DT>(b, i % cols);
}

extern "C" cudaError_t k_bias_rows(float *y, const void *b, int dtype, int64_t rows, int64_t cols, cudaStream_t s)
{
    const int64_t n = rows * cols;
    if (n <= 0)
        return cudaSuccess;
    if (dtype == K_F32)
        bias_rows_kernel<K_F32><<<blocks(n), THREADS, 0, s>>>(y, b, n, cols);
    else if (dtype == K_F16)
        bias_rows_kernel<K_F16><<<blocks(n), THREADS, 0, s>>>(y, b, n, cols);
    else
        bias_rows_kernel<K_BF16><<<blocks(n), THREADS, 0, s>>>(y, b, n, cols);
    return cudaGetLastError();
}

/* One thread per column, its rows added in order (neighbouring threads
 * read neighbouring columns: coalesced). */
template <int DT>
static __global__ void col_sums_kernel(const void *dy, int64_t rows, int64_t cols, float *db, int acc)
{
    for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < cols; c += (int64_t)gridDim.x * blockDim.x) {
        float s = acc ? db[c] : 0.0f;
        for (int64_t r = 0; r < rows; r++)
            s += kb_load<DT>(dy, r * cols + c);
        db[c] = s;
    }
}

extern "C" cudaError_t k_col_sums(const void *dy, int dtype, int64_t rows, int64_t cols, float *db, int acc,
                                  cudaStream_t s)
{
    if (cols <= 0)
        return cudaSuccess;
    if (dtype == K_F32)
        col_sums_kernel<K_F32><<<blocks(cols), THREADS, 0, s>>>(dy, rows, cols, db, acc);
    else if (dtype == K_F16)
        col_sums_kernel<K_F16><<<blocks(cols), THREADS, 0, s>>>(dy, rows, cols, db, acc);
    else
        col_sums_kernel<K_BF16><<<blocks(cols), THREADS, 0, s>>>(dy, rows, cols, db, acc);
    return cudaGetLastError();
}

static __global__ void act_kernel(int act, float *y, int64_t n)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float x = y[i];
        switch (act) {
        case K_ACT_RELU: y[i] = x < 0.0f ? 0.0f : x; break;
        case K_ACT_GELU: y[i] = k_gelu(x); break;
        case K_ACT_TANH: y[i] = tanhf(x); break;
        default: y[i] = 1.0f / (1.0f + expf(-x)); break; /* K_ACT_SIGMOID */
        }
    }
}

extern "C" cudaError_t k_act_inplace(int act, float *y, int64_t n, cudaStream_t s)
{
    if (n <= 0)
        return cudaSuccess;
    act_kernel<<<blocks(n), THREADS, 0, s>>>(act, y, n);
    return cudaGetLastError();
}
