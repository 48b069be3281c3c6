// Packed variable-length batches: pack a right-padded batch, unpack it again, and the positions within each
// sequence.

#include <attn/varlen.h>

#include <ATen/ATen.h>

#include <vector>

namespace attn {
namespace {

/// cu_seqlens as host integers, checked: [N + 1], 0 first, non-decreasing.
std::vector<int64_t> boundaries(const char* fn, const torch::Tensor& cu_seqlens) {
  TORCH_CHECK(cu_seqlens.defined() && cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 1, fn,
              ": cu_seqlens must be [N + 1], got ", cu_seqlens.defined() ? cu_seqlens.sizes() : at::IntArrayRef{});
  TORCH_CHECK(at::isIntegralType(cu_seqlens.scalar_type(), /*includeBool=*/false), fn,
              ": cu_seqlens must hold integers, got ", cu_seqlens.scalar_type());
  const torch::Tensor c = cu_seqlens.to(torch::kCPU, torch::kLong).contiguous();
  std::vector<int64_t> v(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
  TORCH_CHECK(v[0] == 0, fn, ": cu_seqlens[0] must be 0, got ", v[0]);
  for (size_t i = 1; i < v.size(); ++i) {
    TORCH_CHECK(v[i] >= v[i - 1], fn, ": cu_seqlens must be non-decreasing, got cu_seqlens[", i, "] = ", v[i],
                " < cu_seqlens[", i - 1, "] = ", v[i - 1]);
  }
  return v;
}

}  // namespace

PackedBatch pack_padded(const torch::Tensor& padded, const torch::Tensor& lengths) {
  constexpr const char* fn = "attn::pack_padded";
  TORCH_CHECK(padded.defined() && padded.dim() >= 2, fn, ": padded must be [B, T, ...], got ",
              padded.defined() ? padded.sizes() : at::IntArrayRef{});
  TORCH_CHECK(lengths.defined() && lengths.dim() == 1 && lengths.size(0) == padded.size(0), fn,
              ": lengths must be [B] = [", padded.size(0), "], got ", lengths.defined() ? lengths.sizes() : at::IntArrayRef{});
  TORCH_CHECK(at::isIntegralType(lengths.scalar_type(), /*includeBool=*/false), fn, ": lengths must hold integers, got ",
              lengths.scalar_type());
  const torch::Tensor host = lengths.to(torch::kCPU, torch::kLong).contiguous();
  const int64_t* len = host.data_ptr<int64_t>();
  std::vector<int64_t> cu{0};
  std::vector<torch::Tensor> parts;
  int64_t longest = 0;
  for (int64_t b = 0; b < padded.size(0); ++b) {
    TORCH_CHECK(len[b] >= 0 && len[b] <= padded.size(1), fn, ": lengths[", b, "] = ", len[b], " must be in [0, T = ",
                padded.size(1), "]");
    parts.push_back(padded[b].narrow(0, 0, len[b]));
    cu.push_back(cu.back() + len[b]);
    longest = std::max(longest, len[b]);
  }
  PackedBatch out;
  std::vector<int64_t> row_shape(padded.sizes().begin() + 2, padded.sizes().end());
  row_shape.insert(row_shape.begin(), 0);
  out.data = parts.empty() ? padded.new_empty(row_shape) : at::cat(parts, 0);
  out.cu_seqlens = torch::tensor(cu, torch::kLong);
  out.max_seqlen = longest;
  return out;
}

torch::Tensor unpack_padded(const torch::Tensor& packed, const torch::Tensor& cu_seqlens, int64_t max_len) {
  constexpr const char* fn = "attn::unpack_padded";
  const std::vector<int64_t> cu = boundaries(fn, cu_seqlens);
  TORCH_CHECK(packed.defined() && packed.dim() >= 1 && packed.size(0) == cu.back(), fn,
              ": packed must be [total, ...] with total = cu_seqlens[-1] = ", cu.back(), ", got ",
              packed.defined() ? packed.sizes() : at::IntArrayRef{});
  int64_t longest = 0;
  for (size_t s = 0; s + 1 < cu.size(); ++s) longest = std::max(longest, cu[s + 1] - cu[s]);
  if (max_len < 0) max_len = longest;
  TORCH_CHECK(max_len >= longest, fn, ": max_len = ", max_len, " is shorter than the longest sequence, ", longest);
  std::vector<int64_t> shape(packed.sizes().begin(), packed.sizes().end());
  shape[0] = max_len;
  shape.insert(shape.begin(), static_cast<int64_t>(cu.size()) - 1);
  torch::Tensor out = packed.new_zeros(shape);
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    out[s].narrow(0, 0, cu[s + 1] - cu[s]).copy_(packed.narrow(0, cu[s], cu[s + 1] - cu[s]));
  }
  return out;
}

torch::Tensor packed_positions(const torch::Tensor& cu_seqlens, const torch::Device& device) {
  const std::vector<int64_t> cu = boundaries("attn::packed_positions", cu_seqlens);
  // A tensor, not a std::vector first: a length too large to allocate is LibTorch's c10::Error, not bad_alloc.
  torch::Tensor positions = torch::empty({cu.back()}, torch::kLong);
  int64_t* out = positions.data_ptr<int64_t>();
  for (size_t s = 0; s + 1 < cu.size(); ++s) {
    for (int64_t i = 0; i < cu[s + 1] - cu[s]; ++i) *out++ = i;
  }
  return positions.to(device);
}

}  // namespace attn
