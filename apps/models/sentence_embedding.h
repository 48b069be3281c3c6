#pragma once
// Sentence embeddings as sentence-transformers computes them for all-MiniLM-L6-v2 and its kin: WordPiece ids
// truncated to max_length, batches padded to their longest sentence (sentences sorted by length first, as
// sentence-transformers does, so that little padding is computed), a BERT encoder, mean pooling over the real
// tokens and unit length.

#include "bert.h"
#include "word_piece.h"

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace attn::models {

struct SentenceEmbeddingOptions {
  int64_t batch_size = 32;
  /// Tokens per sentence, [CLS] and [SEP] included; longer sentences are cut (sentence_bert_config's
  /// max_seq_length).
  int64_t max_length = 256;
  /// Called after each batch with (sentences done, sentences in all).
  std::function<void(int64_t done, int64_t total)> on_progress;
};

/// Embeddings [sentences, hidden] (float32, unit rows), in the order of `sentences`.
torch::Tensor embed_sentences(Bert& model, const text::WordPiece& tokenizer, const std::vector<std::string>& sentences,
                              const SentenceEmbeddingOptions& options = {});

}  // namespace attn::models
