#pragma once
// Shared test helpers: the {device x dtype} grid, tolerances, tensor comparison, and reference cases.

#include <attn/attn.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace attn::test {

/// One point of the {device x dtype} grid.
struct DeviceDtype {
  torch::DeviceType device;
  torch::Dtype dtype;
};

/// cpu x {float32, float64, bfloat16}, cuda x {float32, float64, float16, bfloat16}.
std::vector<DeviceDtype> device_dtype_grid();
std::string param_name(const DeviceDtype& p);

/// Comparison tolerance for results in `dtype` against a reference: float32 1e-5 and float64 1e-10
/// (see close()); float16/bfloat16 against the float64 reference.
double tolerance(torch::Dtype dtype);

/// Skips (visibly, with a message) when `device` is CUDA and no GPU is present. Returns true if skipped.
bool skip_without(torch::DeviceType device);

/// `values` as a 1-D int64 tensor: positions, lengths and token ids for the caches' tests.
torch::Tensor longs(const std::vector<int64_t>& values);

/// Elementwise |actual - expected| <= tol * (|expected| + max|expected|): relative error, with elements
/// near zero judged against the tensor's own scale. NaNs must sit at the same places. Shapes must match.
::testing::AssertionResult close(const torch::Tensor& actual, const torch::Tensor& expected, double tol);
#define EXPECT_CLOSE(actual, expected, tol) EXPECT_TRUE(::attn::test::close((actual), (expected), (tol)))

/// A reference case written by tests/reference/make_references.py.
class ReferenceCase {
 public:
  /// The case NAME.pt in `dir` (default: the PyTorch references of make_references.py).
  explicit ReferenceCase(const std::string& name, const std::string& dir = ATTN_REFERENCE_DIR);
  bool has(const std::string& key) const;
  torch::Tensor tensor(const std::string& key) const;
  /// tensor(key) converted to `options` (floating tensors only change dtype; bool masks keep theirs).
  torch::Tensor tensor(const std::string& key, const torch::TensorOptions& options) const;
  /// The optional tensor, undefined when absent.
  torch::Tensor maybe(const std::string& key, const torch::TensorOptions& options) const;
  int64_t integer(const std::string& key) const;
  bool boolean(const std::string& key) const;
  double real(const std::string& key) const;
  std::string text(const std::string& key) const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  c10::impl::GenericDict dict_;
};

/// Names from the manifest that start with `prefix` (read at test registration).
std::vector<std::string> reference_cases(const std::string& prefix, const std::string& dir = ATTN_REFERENCE_DIR);

/// Reads a file into a byte vector (for torch::pickle_load).
std::vector<char> read_file(const std::string& path);

/// Copies `w` into `linear`'s weight (and `b` into its bias when defined), without recording autograd.
void load_linear(torch::nn::Linear& linear, const torch::Tensor& w, const torch::Tensor& b = {});

}  // namespace attn::test

namespace attn::test {

/// Attention written out in float64 from its definition, for tests that need an independent reference:
/// softmax over the `allowed` pairs (bool, broadcast to [..., Tq, Tk]) of q kᵀ·scale, rows with no allowed
/// key give zeros. Returns (output, weights) in float64 on the CPU.
std::tuple<torch::Tensor, torch::Tensor> float64_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                           const torch::Tensor& v, const torch::Tensor& allowed,
                                                           double scale);

/// How far an attention's output and gradients lie from softmax(q kᵀ / sqrt(d)) v in float64 on the same values:
/// for the output, d query, d key and d value in turn, the mean and the largest absolute error over the mean
/// absolute size of the reference. `attend` runs the attention under test on leaves of q's dtype (it is
/// differentiated with the cotangent `cotangent`); q, k, v and the cotangent are [..., T, d] of that dtype.
struct ErrorOfResult {
  const char* what;  // "output", "d query", "d key", "d value"
  double mean, max;
};
std::vector<ErrorOfResult> errors_against_float64(
    const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& cotangent,
    const std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>& attend);

/// An int8 cache's rotation written out from its definition, apart from attn's fast transform: the [d, d]
/// float64 block-diagonal Walsh–Hadamard matrix, H[i][j] = (-1)^popcount(i & j) / sqrt(n) within each block
/// of n = d & -d (the largest power of two dividing d). Symmetric: a row x rotates to x·H.
torch::Tensor float64_hadamard(int64_t d);

/// What int8 rows stand for as the decode op reads them, in float64: rows [..., d] times their scales [...].
torch::Tensor dequantized(const torch::Tensor& rows, const torch::Tensor& scales);

/// What an int8 cache's rows stand for in the model's own basis, in float64: dequantized, rotated back by
/// float64_hadamard.
torch::Tensor int8_rows_in_model_basis(const torch::Tensor& rows, const torch::Tensor& scales);

/// [B, H, T, d] rows of `dtype` (random normal) in each layout a cache's append may be given: contiguous, a
/// projection's head split (a position H·d apart), strided channels, and one position expanded over T.
std::vector<torch::Tensor> rows_of_every_layout(int64_t B, int64_t H, int64_t T, int64_t d, torch::Dtype dtype);

/// [B, 1, Tq, Tk] bool: query t of row b may attend key j of a KV cache (j < lengths[b] and, when causal,
/// j <= starts[b] + t), written out element by element: the tests' own statement of the cache rule.
torch::Tensor cache_allowed_pairs(const std::vector<int64_t>& starts, const std::vector<int64_t>& lengths, int64_t tq,
                                  int64_t tk, bool causal);

/// Expects `fn` to throw a c10::Error whose message contains `needle`.
#define EXPECT_ERROR_CONTAINS(statement, needle)                                                    \
  do {                                                                                              \
    try {                                                                                           \
      statement;                                                                                    \
      ADD_FAILURE() << "expected an error containing \"" << (needle) << "\" from: " #statement;    \
    } catch (const c10::Error& error) {                                                             \
      const std::string message = error.what_without_backtrace();                                   \
      EXPECT_NE(message.find(needle), std::string::npos) << "message: " << message;                  \
    }                                                                                               \
  } while (false)

}  // namespace attn::test

namespace attn::test {
/// Compares d(sum(fn() * cotangent))/d(t) from autograd with central differences (float64, eps 1e-6), for
/// every tensor in `wrt` (float64 leaves that fn reads).
void expect_gradients_match_finite_differences(const std::function<torch::Tensor()>& fn,
                                               const std::vector<torch::Tensor>& wrt, const std::string& what);

/// Readable test parameters in gtest's output ("cpu_Float" rather than a byte dump).
inline void PrintTo(const DeviceDtype& p, std::ostream* os) { *os << param_name(p); }
}  // namespace attn::test
