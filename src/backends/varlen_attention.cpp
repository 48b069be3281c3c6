#include "backends/varlen_attention.h"

#include "backends/dispatch.h"
#include "backends/implementations.h"
#include "backends/op_arguments.h"
#include "backends/validate.h"
#include "common/checks.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <vector>

namespace attn::backends {
void check_varlen_inputs(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                         const torch::Tensor& value, const torch::Tensor& cu_seqlens_q,
                         const torch::Tensor& cu_seqlens_k, int64_t max_seqlen_q, int64_t max_seqlen_k,
                         const SdpaOptions& options) {
  TORCH_CHECK(query.defined() && key.defined() && value.defined(), fn, ": query, key and value must be defined");
  TORCH_CHECK(query.dim() == 3, fn, ": query must be packed [total_q, H, d_k], got shape ", query.sizes());
  TORCH_CHECK(key.dim() == 3, fn, ": key must be packed [total_k, H_kv, d_k], got shape ", key.sizes());
  TORCH_CHECK(value.dim() == 3, fn, ": value must be packed [total_k, H_kv, d_v], got shape ", value.sizes());
  TORCH_CHECK(options.masks().empty(), fn,
              ": takes no masks; each sequence attends to its own keys (cu_seqlens), with causal and window "
              "per sequence");
  // The dense checks on the [1, H, total, d] views: dtypes, devices, heads, widths, scale, dropout, score terms.
  SdpaOptions dense = options;
  dense.alibi_slopes({});
  check_sdpa_inputs(fn, packed_heads_first(query), packed_heads_first(key), packed_heads_first(value), dense);

  for (const auto& [arg, t] : {std::pair<const char*, const torch::Tensor&>{"cu_seqlens_q", cu_seqlens_q},
                               std::pair<const char*, const torch::Tensor&>{"cu_seqlens_k", cu_seqlens_k}}) {
    TORCH_CHECK(t.defined() && t.dim() == 1 && t.size(0) >= 1, fn, ": ", arg, " must be [N + 1], got ",
                t.defined() ? t.sizes() : at::IntArrayRef{});
    TORCH_CHECK(at::isIntegralType(t.scalar_type(), /*includeBool=*/false), fn, ": ", arg, " must hold integers, got ",
                common::dtype_name(t));
  }
  TORCH_CHECK(cu_seqlens_q.size(0) == cu_seqlens_k.size(0), fn,
              ": cu_seqlens_q and cu_seqlens_k must both be [N + 1], got ", cu_seqlens_q.sizes(), " and ",
              cu_seqlens_k.sizes());
  const std::vector<int64_t> cq = host_values(cu_seqlens_q), ck = host_values(cu_seqlens_k);
  const auto check_cu = [&](const char* arg, const std::vector<int64_t>& cu, int64_t total, int64_t max_len,
                            const char* max_arg) {
    TORCH_CHECK(cu[0] == 0, fn, ": ", arg, "[0] must be 0, got ", cu[0]);
    int64_t longest = 0;
    for (size_t i = 1; i < cu.size(); ++i) {
      TORCH_CHECK(cu[i] >= cu[i - 1], fn, ": ", arg, " must be non-decreasing, got ", arg, "[", i, "] = ", cu[i],
                  " < ", arg, "[", i - 1, "] = ", cu[i - 1]);
      longest = std::max(longest, cu[i] - cu[i - 1]);
    }
    TORCH_CHECK(cu.back() == total, fn, ": ", arg, " must end at the packed length ", total, ", got ", cu.back());
    TORCH_CHECK(max_len >= longest, fn, ": ", max_arg, " = ", max_len, " is shorter than the longest sequence, ",
                longest);
  };
  check_cu("cu_seqlens_q", cq, query.size(0), max_seqlen_q, "max_seqlen_q");
  check_cu("cu_seqlens_k", ck, key.size(0), max_seqlen_k, "max_seqlen_k");

  const int64_t sequences = static_cast<int64_t>(cq.size()) - 1;
  check_score_options(fn, query, options, query.size(1), sequences);
  const bool diagonal_matters =
      options.causal() || options.attention().has_window() || options.alibi_slopes().defined();
  if (diagonal_matters && options.causal_alignment() == CausalAlignment::TopLeft) {
    for (int64_t s = 0; s < sequences; ++s) {
      TORCH_CHECK(cq[s + 1] - cq[s] == ck[s + 1] - ck[s], fn,
                  ": packed sequences align their diagonals bottom-right (as flash_attn_varlen_func); "
                  "CausalAlignment::TopLeft is only the same when every sequence has as many queries as keys, "
                  "but sequence ", s, " has ", cq[s + 1] - cq[s], " queries and ", ck[s + 1] - ck[s], " keys");
    }
  }
}

torch::Tensor varlen_attention(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                               const torch::Tensor& value, const torch::Tensor& cu_seqlens_q,
                               const torch::Tensor& cu_seqlens_k, const SdpaOptions& options) {
  if (resolve(fn, packed_heads_first(query), packed_heads_first(key), packed_heads_first(value), options,
              /*need_weights=*/false, /*packed=*/true) == Backend::Fused) {
    return fused_varlen_attention(query, key, value, cu_seqlens_q, cu_seqlens_k, options);
  }
  // The general backends: one sequence at a time, as [H, len, d], each with its own diagonal.
  const std::vector<int64_t> cq = host_values(cu_seqlens_q), ck = host_values(cu_seqlens_k);
  std::vector<torch::Tensor> outputs;
  for (size_t s = 0; s + 1 < cq.size(); ++s) {
    const int64_t lq = cq[s + 1] - cq[s], lk = ck[s + 1] - ck[s];
    if (lq == 0) continue;
    SdpaOptions one = options;
    if (options.alibi_slopes().defined() && options.alibi_slopes().dim() == 2) {
      const torch::Tensor& slopes = options.alibi_slopes();
      one.alibi_slopes(slopes.size(0) == 1 ? slopes[0] : slopes[static_cast<int64_t>(s)]);
    }
    const torch::Tensor q = query.narrow(0, cq[s], lq).transpose(0, 1);
    const torch::Tensor k = key.narrow(0, ck[s], lk).transpose(0, 1), v = value.narrow(0, ck[s], lk).transpose(0, 1);
    outputs.push_back(std::get<0>(attention(fn, q, k, v, one, /*need_weights=*/false)).transpose(0, 1));
  }
  if (outputs.empty()) return query.new_empty({0, query.size(1), value.size(2)});
  return at::cat(outputs, 0);
}

std::string varlen_route(const char* fn, const torch::Tensor& query, const torch::Tensor& key,
                         const torch::Tensor& value, const torch::Tensor& cu_seqlens_q,
                         const torch::Tensor& cu_seqlens_k, const SdpaOptions& options) {
  const torch::Tensor pq = packed_heads_first(query), pk = packed_heads_first(key), pv = packed_heads_first(value);
  if (resolve(fn, pq, pk, pv, options, /*need_weights=*/false, /*packed=*/true) == Backend::Fused) {
    return route(fn, pq, pk, pv, options, /*need_weights=*/false, /*packed=*/true);
  }
  // One sequence at a time, as varlen_attention runs them: the first sequence's route stands for all.
  const std::vector<int64_t> cq = host_values(cu_seqlens_q), ck = host_values(cu_seqlens_k);
  SdpaOptions one = options;
  if (options.alibi_slopes().defined() && options.alibi_slopes().dim() == 2) one.alibi_slopes(options.alibi_slopes()[0]);
  const auto first = [](const torch::Tensor& x, const std::vector<int64_t>& cu) {
    return x.narrow(0, cu[0], cu.size() > 1 ? cu[1] - cu[0] : 0).transpose(0, 1);
  };
  return "per sequence: " + route(fn, first(query, cq), first(key, ck), first(value, ck), one, /*need_weights=*/false);
}

}  // namespace attn::backends
