#include "sentence_embedding.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace attn::models {

torch::Tensor embed_sentences(Bert& model, const text::WordPiece& tokenizer, const std::vector<std::string>& sentences,
                              const SentenceEmbeddingOptions& options) {
  if (options.batch_size < 1) throw std::invalid_argument("embed_sentences: batch_size must be >= 1");
  if (options.max_length < 2 || options.max_length > model->config.max_position_embeddings) {
    throw std::invalid_argument("embed_sentences: max_length must be in 2.." +
                                std::to_string(model->config.max_position_embeddings) + ", got " +
                                std::to_string(options.max_length));
  }
  const auto total = static_cast<int64_t>(sentences.size());
  std::vector<std::vector<int64_t>> ids(sentences.size());
  for (size_t i = 0; i < sentences.size(); ++i) ids[i] = tokenizer.encode_truncated(sentences[i], static_cast<size_t>(options.max_length));

  // Longest first, as sentence-transformers orders them; results go back to the caller's order.
  std::vector<int64_t> order(sentences.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[a].size() > ids[b].size(); });

  torch::NoGradGuard no_grad;
  const torch::Device device = model->word_embeddings->weight.device();
  torch::Tensor out = torch::empty({total, model->config.hidden_size}, torch::kFloat32);
  for (int64_t start = 0; start < total; start += options.batch_size) {
    const int64_t count = std::min(options.batch_size, total - start);
    int64_t longest = 0;
    for (int64_t i = 0; i < count; ++i) longest = std::max<int64_t>(longest, ids[order[start + i]].size());
    torch::Tensor batch = torch::full({count, longest}, tokenizer.pad_id(), torch::kLong);
    torch::Tensor mask = torch::zeros({count, longest}, torch::kLong);
    for (int64_t i = 0; i < count; ++i) {
      const auto& row = ids[order[start + i]];
      const auto length = static_cast<int64_t>(row.size());
      batch[i].narrow(0, 0, length).copy_(torch::tensor(row, torch::kLong));
      mask[i].narrow(0, 0, length).fill_(1);
    }
    batch = batch.to(device);
    mask = mask.to(device);
    const torch::Tensor embeddings = mean_pooled_unit_embeddings(model(batch, mask), mask).to(torch::kCPU);
    for (int64_t i = 0; i < count; ++i) out[order[start + i]].copy_(embeddings[i]);
    if (options.on_progress) options.on_progress(start + count, total);
  }
  return out;
}

}  // namespace attn::models
