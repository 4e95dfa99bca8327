// CPU kernels of sparsebench's `cpu` backend: CSR SpMM (y = x W^T + b, grad_x = grad_y W) and
// SDDMM (grad_W sampled on the pattern of W).
//
// Layout and loop order (see docs/kernels.md for the measurements behind each choice):
//   * The gathered dense operand is transposed, xT (in, B) contiguous, so the B activations a
//     nonzero W[o, i] multiplies are one contiguous row xT[i, :].
//   * Each output row o (OpenMP over nnz-balanced row ranges) keeps acc[0:TB] in registers and,
//     for each of its nonzeros k, does acc += val[k] * xT[col[k], b0:b0+TB]: a vectorized FMA
//     over the batch tile, TB a compile-time constant (64 floats / 32 doubles = 4 AVX-512
//     registers). Two interleaved accumulator sets hide the FMA latency.
//   * xT rows are software-prefetched a few nonzeros ahead (data-dependent addresses).
//   * Results of a block of 16 (float) rows are staged and stored into y (B, out) one cache line
//     per batch index, so no transpose of y is needed and no stores alias in L1.
//   * SDDMM: per row block, the strided grad_y tile is gathered once; then each nonzero (o, i)
//     is a contiguous dot(g, xT[i, :]), four nonzeros at a time.
// Terms: SpMM = sparse x dense matrix product, SDDMM = sampled dense-dense matrix product
// (Nisa et al. 2018, "Sampled Dense Matrix Multiplication for High-Performance Machine
// Learning", HiPC).

#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace {

// Below this many multiply-adds a parallel region costs more than it saves.
constexpr int64_t kParallelMinWork = 1 << 15;
// Chunks per thread for dynamic scheduling: absorbs imbalance the nnz-based split misses
// (cache effects, other load on the machine) at negligible scheduling cost.
constexpr int64_t kChunksPerThread = 8;
// Nonzeros ahead of the current one whose xT rows are software-prefetched: the gather
// addresses are data dependent, so the hardware prefetcher cannot guess them.
// Prefetches cross row boundaries (bounded by the total nnz), so short rows are covered too.
constexpr int64_t kPrefetchDistance = 12;
// Permuted values (grad_input) are single random reads from L3: prefetched further ahead.
constexpr int64_t kValuePrefetchDistance = 64;

// Row boundaries of `n_chunks` contiguous row ranges of about equal cost, cost(row) =
// nnz(row) + 1 (the +1 charges the output writes of empty rows). The cumulative cost
// row_ptr[o] + o is monotone, so each boundary is a binary search.
std::vector<int64_t> balanced_splits(const int64_t* row_ptr, int64_t n_rows, int64_t n_chunks) {
  std::vector<int64_t> splits(n_chunks + 1);
  const int64_t total = row_ptr[n_rows] + n_rows;
  splits[0] = 0;
  for (int64_t c = 1; c < n_chunks; ++c) {
    const int64_t target = total * c / n_chunks;
    int64_t lo = splits[c - 1], hi = n_rows;
    while (lo < hi) {  // first o with cost(o) >= target
      const int64_t mid = lo + (hi - lo) / 2;
      if (row_ptr[mid] + mid < target) lo = mid + 1; else hi = mid;
    }
    splits[c] = lo;
  }
  splits[n_chunks] = n_rows;
  return splits;
}

// Run body(row_begin, row_end) over [0, n_rows) in nnz-balanced chunks, in parallel when the
// work is large enough. Threads: torch's intra-op setting (torch.set_num_threads).
template <typename F>
void for_rows(const int64_t* row_ptr, int64_t n_rows, int64_t work, const F& body) {
  if (n_rows == 0) return;
  int64_t threads = at::get_num_threads();
#ifndef _OPENMP
  threads = 1;
#endif
  if (threads <= 1 || work < kParallelMinWork || n_rows < 2) {
    body(int64_t{0}, n_rows);
    return;
  }
  const int64_t n_chunks = std::min<int64_t>(n_rows, threads * kChunksPerThread);
  const std::vector<int64_t> splits = balanced_splits(row_ptr, n_rows, n_chunks);
#ifdef _OPENMP
#pragma omp parallel for num_threads(static_cast<int>(threads)) schedule(dynamic, 1)
#endif
  for (int64_t c = 0; c < n_chunks; ++c) body(splits[c], splits[c + 1]);
}

inline void prefetch(const void* p) {
#if defined(__GNUC__)
  __builtin_prefetch(p, 0, 3);
#endif
}

// Values of the nonzeros in the order the kernel walks them: directly (forward), or through a
// permutation (grad_input walks the CSR of W^T, whose values are values[perm]). Permuting
// inside the kernel saves a separate gather pass and its (nnz,) temporary: with prefetching,
// the random reads cost less than torch's index_select plus a fresh allocation.
template <typename T>
struct DirectValues {
  const T* __restrict v;
  T operator()(int64_t k) const { return v[k]; }
  void prefetch_at(int64_t) const {}
};

template <typename T>
struct PermutedValues {
  const T* __restrict v;
  const int64_t* __restrict perm;
  T operator()(int64_t k) const { return v[perm[k]]; }
  void prefetch_at(int64_t k) const { prefetch(v + perm[k]); }
};

// Rows per block: results of a block of output rows are staged in a small buffer and stored to
// y (B, rows) one cache line (RB consecutive o) per batch index. Storing y[b, o] row by row
// instead writes B values with a stride of rows * sizeof(T) bytes: for power-of-two widths
// all of them fall into the same L1 set and evict each other (measured 1.8x slower at 95%
// sparsity, 4x at 99%, on 4096 x 4096, B = 64).
template <typename T>
constexpr int row_block() {
  return 64 / static_cast<int>(sizeof(T));
}

// Batch tile sizes: the largest is 256 bytes of accumulators per chain (4 AVX-512 / 8 AVX2
// registers); the remainder of B is covered by halving tiles down to 1, all compile-time.
template <typename T>
constexpr int max_tile() {
  return 256 / static_cast<int>(sizeof(T));
}

// acc[t] = init + sum_k val[k] * x_{col[k]}[t], t < TB, over the nonzeros [k0, k1) of one row.
// `x` points at xT[0, b0] (row stride ldx); the result goes to out[0:TB] (contiguous).
// Besides hiding latency, the prefetch branch keeps GCC 12 from turning this loop into a
// gather-based outer-loop vectorization with the accumulators in memory (6.6x slower).
template <typename T, typename I, int TB, typename V>
inline void spmm_tile(int64_t k0, int64_t k1, int64_t kmax, const I* __restrict col,
                      const V& val, const T* __restrict x, int64_t ldx, T init,
                      T* __restrict out) {
  T acc0[TB], acc1[TB];
#pragma omp simd
  for (int t = 0; t < TB; ++t) {
    acc0[t] = init;
    acc1[t] = T(0);
  }
  int64_t k = k0;
  for (; k + 1 < k1; k += 2) {
    if (k + kPrefetchDistance + 1 < kmax) {
      const T* p0 = x + static_cast<int64_t>(col[k + kPrefetchDistance]) * ldx;
      const T* p1 = x + static_cast<int64_t>(col[k + kPrefetchDistance + 1]) * ldx;
      for (int t = 0; t < TB; t += 64 / static_cast<int>(sizeof(T))) {
        prefetch(p0 + t);
        prefetch(p1 + t);
      }
    }
    if (k + kValuePrefetchDistance + 1 < kmax) {
      val.prefetch_at(k + kValuePrefetchDistance);
      val.prefetch_at(k + kValuePrefetchDistance + 1);
    }
    const T v0 = val(k), v1 = val(k + 1);
    const T* __restrict x0 = x + static_cast<int64_t>(col[k]) * ldx;
    const T* __restrict x1 = x + static_cast<int64_t>(col[k + 1]) * ldx;
#pragma omp simd
    for (int t = 0; t < TB; ++t) {
      acc0[t] += v0 * x0[t];
      acc1[t] += v1 * x1[t];
    }
  }
  if (k < k1) {
    const T v0 = val(k);
    const T* __restrict x0 = x + static_cast<int64_t>(col[k]) * ldx;
#pragma omp simd
    for (int t = 0; t < TB; ++t) acc0[t] += v0 * x0[t];
  }
#pragma omp simd
  for (int t = 0; t < TB; ++t) out[t] = acc0[t] + acc1[t];
}

// Rows [o0, o0 + n), n <= RB, batch columns [b0, B): full tiles of width TB, then the
// remainder with TB / 2, ... Each tile is staged in buf[RB][TB] and stored transposed.
template <typename T, typename I, int TB, typename V>
void spmm_block(int64_t o0, int n, int64_t b0, int64_t B, const int64_t* row_ptr,
                const I* col, const V& val, const T* xT, const T* bias, T* y, int64_t ldy,
                int64_t kmax) {
  constexpr int RB = row_block<T>();
  alignas(64) T buf[RB][TB];
  for (; b0 + TB <= B; b0 += TB) {
    for (int r = 0; r < n; ++r) {
      const int64_t o = o0 + r;
      spmm_tile<T, I, TB, V>(row_ptr[o], row_ptr[o + 1], kmax, col, val, xT + b0, B,
                          bias ? bias[o] : T(0), buf[r]);
    }
    if (n == RB) {  // compile-time bounds: the compiler vectorizes the transposed store
      for (int t = 0; t < TB; ++t) {
        T* __restrict dst = y + (b0 + t) * ldy + o0;
#pragma omp simd
        for (int r = 0; r < RB; ++r) dst[r] = buf[r][t];
      }
    } else {
      for (int t = 0; t < TB; ++t) {
        T* __restrict dst = y + (b0 + t) * ldy + o0;
        for (int r = 0; r < n; ++r) dst[r] = buf[r][t];
      }
    }
  }
  if constexpr (TB > 1) {
    if (b0 < B) {
      spmm_block<T, I, TB / 2, V>(o0, n, b0, B, row_ptr, col, val, xT, bias, y, ldy, kmax);
    }
  }
}

// y (B, n_rows) = A xT^T (+ bias), A in CSR (row_ptr, col, val), xT (n_cols, B) contiguous.
template <typename T, typename I, typename V>
void spmm_impl(const int64_t* row_ptr, const I* col, const V& val, const T* xT, const T* bias,
               int64_t n_rows, int64_t B, T* y) {
  constexpr int RB = row_block<T>();
  const int64_t nnz = row_ptr[n_rows];
  if (B == 0) return;
  for_rows(row_ptr, n_rows, (nnz + n_rows) * B, [&](int64_t r0, int64_t r1) {
    for (int64_t o0 = r0; o0 < r1; o0 += RB) {
      const int n = static_cast<int>(std::min<int64_t>(RB, r1 - o0));
      spmm_block<T, I, max_tile<T>(), V>(o0, n, 0, B, row_ptr, col, val, xT, bias, y, n_rows,
                                         nnz);
    }
  });
}

// out[k] (+)= sum_t g[t] * x_{col[k]}[t] over a batch tile of width TB, for the nonzeros
// [k0, k1) of one row. `g` holds that row's TB gradient values (already gathered).
template <typename T, typename I, int TB>
struct SddmmTile {
  static inline void run(int64_t k0, int64_t k1, int64_t kmax, const I* __restrict col,
                         const T* __restrict g, const T* __restrict x, int64_t ldx,
                         bool accumulate, T* __restrict out) {
    int64_t k = k0;
    for (; k + 3 < k1; k += 4) {
      const T* __restrict x0 = x + static_cast<int64_t>(col[k]) * ldx;
      const T* __restrict x1 = x + static_cast<int64_t>(col[k + 1]) * ldx;
      const T* __restrict x2 = x + static_cast<int64_t>(col[k + 2]) * ldx;
      const T* __restrict x3 = x + static_cast<int64_t>(col[k + 3]) * ldx;
      if (k + kPrefetchDistance + 3 < kmax) {
        for (int j = 0; j < 4; ++j) {
          const T* p = x + static_cast<int64_t>(col[k + kPrefetchDistance + j]) * ldx;
          for (int t = 0; t < TB; t += 64 / static_cast<int>(sizeof(T))) prefetch(p + t);
        }
      }
      T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
      for (int t = 0; t < TB; ++t) {
        s0 += g[t] * x0[t];
        s1 += g[t] * x1[t];
        s2 += g[t] * x2[t];
        s3 += g[t] * x3[t];
      }
      if (accumulate) {
        out[k] += s0;
        out[k + 1] += s1;
        out[k + 2] += s2;
        out[k + 3] += s3;
      } else {
        out[k] = s0;
        out[k + 1] = s1;
        out[k + 2] = s2;
        out[k + 3] = s3;
      }
    }
    for (; k < k1; ++k) {
      const T* __restrict x0 = x + static_cast<int64_t>(col[k]) * ldx;
      T s0 = 0;
#pragma omp simd reduction(+ : s0)
      for (int t = 0; t < TB; ++t) s0 += g[t] * x0[t];
      out[k] = accumulate ? out[k] + s0 : s0;
    }
  }
};

#if defined(__AVX512F__)
// float, 64-wide tile on AVX-512: the generic loop above spends most of its time in the
// compiler's horizontal reductions (~100 shuffles per 4 nonzeros). Here g stays in 4
// registers and the 4 dot-product vectors of 4 nonzeros are reduced together by a transpose
// tree (unpack, shuffle, 2 lane folds) into one 4-float vector: 1.7x faster at 95% sparsity.
template <typename I>
struct SddmmTile<float, I, 64> {
  static inline void run(int64_t k0, int64_t k1, int64_t kmax, const I* __restrict col,
                         const float* __restrict g, const float* __restrict x, int64_t ldx,
                         bool accumulate, float* __restrict out) {
    const __m512 g0 = _mm512_loadu_ps(g), g1 = _mm512_loadu_ps(g + 16);
    const __m512 g2 = _mm512_loadu_ps(g + 32), g3 = _mm512_loadu_ps(g + 48);
    int64_t k = k0;
    for (; k + 3 < k1; k += 4) {
      if (k + kPrefetchDistance + 3 < kmax) {
        for (int j = 0; j < 4; ++j) {
          const float* p = x + static_cast<int64_t>(col[k + kPrefetchDistance + j]) * ldx;
          for (int t = 0; t < 64; t += 16) prefetch(p + t);
        }
      }
      __m512 s[4];
      for (int j = 0; j < 4; ++j) {
        const float* xj = x + static_cast<int64_t>(col[k + j]) * ldx;
        __m512 a = _mm512_mul_ps(g0, _mm512_loadu_ps(xj));
        __m512 b = _mm512_mul_ps(g1, _mm512_loadu_ps(xj + 16));
        a = _mm512_fmadd_ps(g2, _mm512_loadu_ps(xj + 32), a);
        b = _mm512_fmadd_ps(g3, _mm512_loadu_ps(xj + 48), b);
        s[j] = _mm512_add_ps(a, b);
      }
      // Per 128-bit lane: [s0 s1 s0 s1], then [s0 s1 s2 s3]; then fold the 4 lanes.
      const __m512 t01 =
          _mm512_add_ps(_mm512_unpacklo_ps(s[0], s[1]), _mm512_unpackhi_ps(s[0], s[1]));
      const __m512 t23 =
          _mm512_add_ps(_mm512_unpacklo_ps(s[2], s[3]), _mm512_unpackhi_ps(s[2], s[3]));
      const __m512 u = _mm512_add_ps(_mm512_shuffle_ps(t01, t23, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_ps(t01, t23, _MM_SHUFFLE(3, 2, 3, 2)));
      const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(u), _mm512_extractf32x8_ps(u, 1));
      __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
      if (accumulate) q = _mm_add_ps(q, _mm_loadu_ps(out + k));
      _mm_storeu_ps(out + k, q);
    }
    for (; k < k1; ++k) {
      const float* xk = x + static_cast<int64_t>(col[k]) * ldx;
      __m512 a = _mm512_mul_ps(g0, _mm512_loadu_ps(xk));
      a = _mm512_fmadd_ps(g1, _mm512_loadu_ps(xk + 16), a);
      a = _mm512_fmadd_ps(g2, _mm512_loadu_ps(xk + 32), a);
      a = _mm512_fmadd_ps(g3, _mm512_loadu_ps(xk + 48), a);
      const float s0 = _mm512_reduce_add_ps(a);
      out[k] = accumulate ? out[k] + s0 : s0;
    }
  }
};
#endif

// Rows [o0, o0 + n), batch columns [b0, B), tiles as in spmm_block; the gradient tile of the
// row block is gathered once, one cache line of gy (RB consecutive o) per batch index.
template <typename T, typename I, int TB>
void sddmm_block(int64_t o0, int n, int64_t b0, int64_t B, const int64_t* row_ptr,
                 const I* col, const T* gy, int64_t g_sb, int64_t g_so, const T* xT, T* out,
                 int64_t kmax) {
  constexpr int RB = row_block<T>();
  alignas(64) T buf[RB][TB];
  for (; b0 + TB <= B; b0 += TB) {
    for (int t = 0; t < TB; ++t) {
      const T* __restrict src = gy + (b0 + t) * g_sb + o0 * g_so;
      for (int r = 0; r < n; ++r) buf[r][t] = src[r * g_so];
    }
    for (int r = 0; r < n; ++r) {
      const int64_t o = o0 + r;
      SddmmTile<T, I, TB>::run(row_ptr[o], row_ptr[o + 1], kmax, col, buf[r], xT + b0, B,
                               /*accumulate=*/b0 > 0, out);
    }
  }
  if constexpr (TB > 1) {
    if (b0 < B) {
      sddmm_block<T, I, TB / 2>(o0, n, b0, B, row_ptr, col, gy, g_sb, g_so, xT, out, kmax);
    }
  }
}

// out[k] = sum_b gy[b, o] xT[col[k], b] for every nonzero k = (o, col[k]) of the CSR pattern.
// gy (B, n_rows) with any strides (g_sb, g_so); xT (n_cols, B) contiguous.
template <typename T, typename I>
void sddmm_impl(const int64_t* row_ptr, const I* col, const T* gy, int64_t g_sb, int64_t g_so,
                const T* xT, int64_t n_rows, int64_t B, T* out) {
  constexpr int RB = row_block<T>();
  const int64_t nnz = row_ptr[n_rows];
  if (B == 0) {
    std::fill(out, out + nnz, T(0));
    return;
  }
  for_rows(row_ptr, n_rows, (nnz + n_rows) * B, [&](int64_t r0, int64_t r1) {
    for (int64_t o0 = r0; o0 < r1; o0 += RB) {
      const int n = static_cast<int>(std::min<int64_t>(RB, r1 - o0));
      sddmm_block<T, I, max_tile<T>()>(o0, n, 0, B, row_ptr, col, gy, g_sb, g_so, xT, out,
                                       nnz);
    }
  });
}

void check_pattern(const torch::Tensor& row_ptr, const torch::Tensor& col,
                   const torch::Tensor& ref) {
  TORCH_CHECK(row_ptr.device().is_cpu() && col.device().is_cpu() && ref.device().is_cpu(),
              "sparse_linear cpu kernels take CPU tensors");
  TORCH_CHECK(row_ptr.dim() == 1 && row_ptr.numel() >= 1 && row_ptr.is_contiguous() &&
                  row_ptr.scalar_type() == torch::kInt64,
              "row_ptr must be a contiguous int64 vector of length rows + 1");
  TORCH_CHECK(col.dim() == 1 && col.is_contiguous() &&
                  (col.scalar_type() == torch::kInt32 || col.scalar_type() == torch::kInt64),
              "col_idx must be a contiguous int32 or int64 vector");
  TORCH_CHECK(ref.scalar_type() == torch::kFloat32 || ref.scalar_type() == torch::kFloat64,
              "sparse_linear cpu kernels support float32 and float64, got ",
              ref.scalar_type());
}

}  // namespace

template <typename T, typename I>
void spmm_dispatch_values(const torch::Tensor& row_ptr, const torch::Tensor& col_idx,
                          const torch::Tensor& values, const torch::Tensor& perm,
                          const torch::Tensor& xT, const T* bias, torch::Tensor& y) {
  const int64_t n_rows = row_ptr.numel() - 1;
  const int64_t* rp = row_ptr.data_ptr<int64_t>();
  const I* col = col_idx.data_ptr<I>();
  if (perm.defined()) {
    const PermutedValues<T> val{values.data_ptr<T>(), perm.data_ptr<int64_t>()};
    spmm_impl<T, I>(rp, col, val, xT.data_ptr<T>(), bias, n_rows, xT.size(1), y.data_ptr<T>());
  } else {
    const DirectValues<T> val{values.data_ptr<T>()};
    spmm_impl<T, I>(rp, col, val, xT.data_ptr<T>(), bias, n_rows, xT.size(1), y.data_ptr<T>());
  }
}

// y (B, rows) = xT^T A^T + bias for A (rows, cols) in CSR; xT (cols, B) contiguous. The k-th
// nonzero's value is values[k], or values[perm[k]] when perm is given.
torch::Tensor spmm(const torch::Tensor& row_ptr, const torch::Tensor& col_idx,
                   const torch::Tensor& values, const torch::Tensor& xT,
                   const c10::optional<torch::Tensor>& bias,
                   const c10::optional<torch::Tensor>& perm) {
  check_pattern(row_ptr, col_idx, xT);
  const int64_t n_rows = row_ptr.numel() - 1;
  TORCH_CHECK(xT.dim() == 2 && xT.is_contiguous(), "xT must be a contiguous (cols, B) matrix");
  TORCH_CHECK(values.dim() == 1 && values.is_contiguous() &&
                  values.scalar_type() == xT.scalar_type() &&
                  values.numel() == col_idx.numel(),
              "values must be a contiguous vector of length nnz with the dtype of x");
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) {
    TORCH_CHECK(bias->dim() == 1 && bias->is_contiguous() && bias->numel() == n_rows &&
                    bias->scalar_type() == xT.scalar_type(),
                "bias must be a contiguous vector of length rows with the dtype of x");
  }
  torch::Tensor p;
  if (perm.has_value() && perm->defined()) {
    p = *perm;
    TORCH_CHECK(p.dim() == 1 && p.is_contiguous() && p.scalar_type() == torch::kInt64 &&
                    p.numel() == col_idx.numel() && p.device().is_cpu(),
                "perm must be a contiguous int64 CPU vector of length nnz");
  }
  auto y = torch::empty({xT.size(1), n_rows}, xT.options());
  AT_DISPATCH_FLOATING_TYPES(xT.scalar_type(), "sparse_linear_spmm", [&] {
    const scalar_t* b = has_bias ? bias->data_ptr<scalar_t>() : nullptr;
    if (col_idx.scalar_type() == torch::kInt32) {
      spmm_dispatch_values<scalar_t, int32_t>(row_ptr, col_idx, values, p, xT, b, y);
    } else {
      spmm_dispatch_values<scalar_t, int64_t>(row_ptr, col_idx, values, p, xT, b, y);
    }
  });
  return y;
}

// out (nnz,) = [sum_b gy[b, o] xT[i, b] for each nonzero (o, i) of the CSR pattern, CSR order].
torch::Tensor sddmm(const torch::Tensor& row_ptr, const torch::Tensor& col_idx,
                    const torch::Tensor& gy, const torch::Tensor& xT) {
  check_pattern(row_ptr, col_idx, xT);
  const int64_t n_rows = row_ptr.numel() - 1;
  TORCH_CHECK(xT.dim() == 2 && xT.is_contiguous(), "xT must be a contiguous (cols, B) matrix");
  TORCH_CHECK(gy.dim() == 2 && gy.size(1) == n_rows && gy.size(0) == xT.size(1) &&
                  gy.scalar_type() == xT.scalar_type(),
              "grad_y must be (B, rows) with the dtype of x");
  auto out = torch::empty({col_idx.numel()}, xT.options());
  AT_DISPATCH_FLOATING_TYPES(xT.scalar_type(), "sparse_linear_sddmm", [&] {
    if (col_idx.scalar_type() == torch::kInt32) {
      sddmm_impl<scalar_t, int32_t>(row_ptr.data_ptr<int64_t>(), col_idx.data_ptr<int32_t>(),
                                    gy.data_ptr<scalar_t>(), gy.stride(0), gy.stride(1),
                                    xT.data_ptr<scalar_t>(), n_rows, xT.size(1),
                                    out.data_ptr<scalar_t>());
    } else {
      sddmm_impl<scalar_t, int64_t>(row_ptr.data_ptr<int64_t>(), col_idx.data_ptr<int64_t>(),
                                    gy.data_ptr<scalar_t>(), gy.stride(0), gy.stride(1),
                                    xT.data_ptr<scalar_t>(), n_rows, xT.size(1),
                                    out.data_ptr<scalar_t>());
    }
  });
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "sparsebench CPU CSR SpMM / SDDMM kernels";
  m.def("spmm", &spmm, "y (B, rows) = xT^T A^T + bias, A in CSR (values optionally permuted)",
        py::arg("row_ptr"), py::arg("col_idx"), py::arg("values"), py::arg("xT"),
        py::arg("bias") = py::none(), py::arg("perm") = py::none(),
        py::call_guard<py::gil_scoped_release>());
  m.def("sddmm", &sddmm, "values of grad_y^T x sampled on the CSR pattern", py::arg("row_ptr"),
        py::arg("col_idx"), py::arg("grad_y"), py::arg("xT"),
        py::call_guard<py::gil_scoped_release>());
}
