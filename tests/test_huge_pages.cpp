// attn::place_on_huge_pages: the weights keep their values, layouts and sharing in one block of memory.

#include <attn/attn.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

/// Whether Linux may back an madvised block with huge pages here (the setting place_on_huge_pages reads).
bool transparent_huge_pages_on() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string setting;
  return in && std::getline(in, setting) && setting.find("[never]") == std::string::npos;
}

/// Whether a mapping of this process holds `address` (/proc/self/maps).
bool mapped(const void* address) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<uintptr_t>(address);
  for (std::string line; std::getline(maps, line);) {
    unsigned long from = 0, to = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &from, &to) == 2 && from <= at && at < to) return true;
  }
  return false;
}

/// Weights in the shapes a model gives them: an attention module's parameters and buffers, a weight registered
/// twice (tied), two parameters that are views of one storage, a transposed buffer, and a frozen parameter.
struct Model : torch::nn::Module {
  attn::MultiHeadAttention attention{nullptr};
  torch::Tensor embedding, head, first_half, second_half, transposed, frozen;
  Model() {
    attention = register_module("attention", attn::MultiHeadAttention(
                                                 attn::MultiHeadAttentionOptions(32, 4).num_kv_heads(2).rotary(
                                                     attn::RotaryEmbeddingOptions(8))));
    embedding = register_parameter("embedding", torch::randn({50, 32}));
    head = register_parameter("head", embedding);  // tied, as a language model's head and embedding
    const torch::Tensor both = torch::randn({2, 16});
    first_half = register_parameter("first_half", both[0]);
    second_half = register_parameter("second_half", both[1]);
    transposed = register_buffer("transposed", torch::randn({6, 4}).t());
    frozen = register_parameter("frozen", torch::randn({3, 5}), /*requires_grad=*/false);
  }
};

struct Recorded {
  torch::Tensor values;
  const void* data = nullptr;
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
  bool requires_grad = false;
  const c10::StorageImpl* storage = nullptr;
};

std::map<std::string, Recorded> record(Model& model) {
  std::map<std::string, Recorded> out;
  const auto add = [&](const std::string& name, const torch::Tensor& t) {
    out[name] = {t.detach().clone(), t.data_ptr(), t.sizes().vec(), t.strides().vec(), t.storage_offset(),
                 t.requires_grad(), t.storage().unsafeGetStorageImpl()};
  };
  for (const auto& item : model.named_parameters()) add(item.key(), item.value());
  for (const auto& item : model.named_buffers()) add(item.key(), item.value());
  return out;
}

TEST(HugePages, MovesWeightsKeepingValuesLayoutsAndSharing) {
  torch::manual_seed(0);
  Model model;
  const std::map<std::string, Recorded> before = record(model);
  int64_t distinct_tensors = 0, storage_bytes = 0;
  {
    std::set<const c10::TensorImpl*> tensors;
    std::set<const c10::StorageImpl*> storages;
    for (const torch::Tensor& t : model.parameters()) tensors.insert(t.unsafeGetTensorImpl());
    for (const torch::Tensor& t : model.buffers()) tensors.insert(t.unsafeGetTensorImpl());
    for (const torch::Tensor& t : model.parameters()) {
      if (storages.insert(t.storage().unsafeGetStorageImpl()).second) storage_bytes += t.storage().nbytes();
    }
    for (const torch::Tensor& t : model.buffers()) {
      if (storages.insert(t.storage().unsafeGetStorageImpl()).second) storage_bytes += t.storage().nbytes();
    }
    distinct_tensors = static_cast<int64_t>(tensors.size());
  }

  const attn::HugePagePlacement placement = attn::place_on_huge_pages(model);
  const std::map<std::string, Recorded> after = record(model);
  ASSERT_EQ(after.size(), before.size());
  EXPECT_EQ(placement.skipped, 0);
  if (!transparent_huge_pages_on()) {
    // Nothing to gain: nothing moves, and the reason is given.
    EXPECT_FALSE(placement.unavailable.empty());
    EXPECT_EQ(placement.tensors, 0);
    for (const auto& [name, r] : before) EXPECT_EQ(after.at(name).data, r.data) << name;
    return;
  }
  ASSERT_TRUE(placement.unavailable.empty()) << placement.unavailable;
  EXPECT_EQ(placement.tensors, distinct_tensors);
  EXPECT_EQ(placement.bytes, storage_bytes);
  EXPECT_GE(placement.huge_page_bytes, 0);
  EXPECT_LE(placement.huge_page_bytes, placement.bytes);

  // Every tensor in one block of placement.bytes (plus alignment), with its values and layout.
  uintptr_t lowest = UINTPTR_MAX, highest = 0;
  for (const auto& [name, r] : before) {
    const Recorded& now = after.at(name);
    EXPECT_NE(now.data, r.data) << name;
    lowest = std::min(lowest, reinterpret_cast<uintptr_t>(now.data));
    highest = std::max(highest, reinterpret_cast<uintptr_t>(now.data));
    EXPECT_TRUE(torch::equal(now.values, r.values)) << name;
    EXPECT_EQ(now.values.dtype(), r.values.dtype()) << name;
    EXPECT_EQ(now.sizes, r.sizes) << name;
    EXPECT_EQ(now.strides, r.strides) << name;
    EXPECT_EQ(now.offset, r.offset) << name;
    EXPECT_EQ(now.requires_grad, r.requires_grad) << name;
  }
  EXPECT_LT(highest - lowest, static_cast<uintptr_t>(placement.bytes + 64 * after.size()));

  // Sharing kept: the tied weight is one tensor, the two halves one storage at the same distance apart.
  EXPECT_TRUE(model.head.is_same(model.embedding));
  EXPECT_EQ(after.at("head").data, after.at("embedding").data);
  EXPECT_EQ(after.at("first_half").storage, after.at("second_half").storage);
  EXPECT_NE(after.at("first_half").storage, before.at("first_half").storage);
  const auto address = [&](const char* name) { return static_cast<const char*>(after.at(name).data); };
  EXPECT_EQ(address("second_half") - address("first_half"), 16 * static_cast<int64_t>(sizeof(float)));

  // The moved weights train: gradients reach them, and an optimizer's step updates them where they now are.
  const torch::Tensor x = torch::randn({2, 5, 32});
  const torch::Tensor loss = model.attention->forward(x, x, x).square().sum() + model.embedding.sum() * 0.5;
  loss.backward();
  const torch::Tensor q_weight = model.attention->named_parameters()["q_proj.weight"];
  ASSERT_TRUE(q_weight.grad().defined());
  EXPECT_GT(q_weight.grad().abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(torch::equal(model.embedding.grad(), torch::full({50, 32}, 0.5)));
  torch::optim::SGD sgd(std::vector<torch::Tensor>{model.embedding}, torch::optim::SGDOptions(0.1));
  const torch::Tensor expected = model.embedding.detach() - 0.1 * model.embedding.grad();
  sgd.step();
  EXPECT_EQ(model.embedding.data_ptr(), after.at("embedding").data);
  EXPECT_TRUE(torch::allclose(model.embedding.detach(), expected));
  EXPECT_FALSE(model.frozen.grad().defined());
}

TEST(HugePages, LeavesOtherDevicesAndLayoutsWhereTheyAre) {
  torch::nn::Module module;
  const torch::Tensor meta = module.register_parameter("meta", torch::empty({4, 4}, torch::Device(torch::kMeta)));
  const torch::Tensor sparse = module.register_buffer("sparse", torch::eye(3).to_sparse());
  const torch::Tensor dense = module.register_parameter("dense", torch::ones({8}));
  const void* dense_data = dense.data_ptr();
  const attn::HugePagePlacement placement = attn::place_on_huge_pages(module);
  EXPECT_EQ(placement.skipped, 2);
  EXPECT_TRUE(module.named_parameters()["meta"].is_meta());
  EXPECT_TRUE(module.named_buffers()["sparse"].is_sparse());
  EXPECT_TRUE(torch::equal(module.named_buffers()["sparse"].to_dense(), torch::eye(3)));
  if (transparent_huge_pages_on()) {
    EXPECT_EQ(placement.tensors, 1);
    EXPECT_NE(module.named_parameters()["dense"].data_ptr(), dense_data);
  } else {
    EXPECT_EQ(placement.tensors, 0);
    EXPECT_EQ(module.named_parameters()["dense"].data_ptr(), dense_data);
  }
  EXPECT_TRUE(torch::equal(module.named_parameters()["dense"], torch::ones({8})));
}

TEST(HugePages, AModuleWithoutWeightsMovesNothing) {
  torch::nn::Module module;
  const attn::HugePagePlacement placement = attn::place_on_huge_pages(module);
  EXPECT_EQ(placement.tensors, 0);
  EXPECT_EQ(placement.bytes, 0);
  EXPECT_EQ(placement.skipped, 0);
  EXPECT_TRUE(placement.unavailable.empty());
}

TEST(HugePages, TheBlockIsUnmappedWithItsLastTensor) {
  const void* data = nullptr;
  torch::Tensor kept;
  {
    torch::nn::Module module;
    module.register_parameter("a", torch::randn({1024, 256}));
    module.register_parameter("b", torch::randn({256}));
    const attn::HugePagePlacement placement = attn::place_on_huge_pages(module);
    if (!transparent_huge_pages_on()) {  // nothing placed, so no block to unmap
      EXPECT_EQ(placement.tensors, 0);
      EXPECT_FALSE(placement.unavailable.empty());
      return;
    }
    ASSERT_EQ(placement.tensors, 2);
    data = module.named_parameters()["a"].data_ptr();
    kept = module.named_parameters()["b"];
  }
  EXPECT_TRUE(mapped(data)) << "a tensor of the block is still alive";
  kept = torch::Tensor();
  EXPECT_FALSE(mapped(data)) << "the block outlived its last tensor";
}

}  // namespace
