#pragma once
// A decoding step's serial work with the memory kept busy: the other threads read the next product's weights
// meanwhile.

#include <torch/types.h>

#include <functional>
#include <vector>

namespace attn::models {

/// Rows of an input from which read_ahead_while() runs `work` alone: a decoding step's few rows stream the
/// weights (attn::linear), where a prompt's many rows multiply them from the caches.
inline constexpr int64_t kReadAheadMaxRows = 4;

/// Runs `work` on the calling thread while LibTorch's other threads read `next` (the weights that the next
/// product multiplies, in its order) until `work` returns, when `rows` (the step's input rows) is at most
/// kReadAheadMaxRows and there are other threads; otherwise runs `work` alone, as in a build whose own parallel
/// loops have no OpenMP (clang: cmake/parallel_loops.cmake, cpu_kernel_info().parallel_loops). Between a
/// decoding step's products, the serial work (a residual add, a norm, an activation) leaves the memory idle
/// while the other threads wait; read ahead, the next product finds the start of its weights in the caches
/// instead (bench/RESULTS.md). LibTorch's parallel loops inside `work` run on the calling thread. `work`'s
/// exception reaches the caller once the readers have stopped.
void read_ahead_while(const std::vector<torch::Tensor>& next, int64_t rows, const std::function<void()>& work);

}  // namespace attn::models
