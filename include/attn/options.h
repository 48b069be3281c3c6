#pragma once
// Options for the functional core and the three modules, in the PyTorch C++ frontend style: plain structs
// with chainable TORCH_ARG setters, validated when a module is built (reset()) or a function is called.

#include <attn/rotary.h>

#include <torch/arg.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>

namespace attn {

/// How a causal mask lines up queries with keys when Tq != Tk.
enum class CausalAlignment {
  /// Query i sees keys j <= i + (Tk - Tq): the last query sees every key. This is what incremental decoding
  /// with a KV cache needs (queries are the newest Tq of Tk positions); FlashAttention >= 2.1 does the same.
  /// When Tq > Tk the first Tq - Tk queries see no key at all and their output is zero.
  BottomRight,
  /// Query i sees keys j <= i, as `torch.nn.functional.scaled_dot_product_attention(is_causal=True)`.
  TopLeft,
};

/// Which implementation computes the attention. Math and Fused give the same results within floating-point
/// rounding, masks and edge cases included; the backends differ in speed, memory and what they support.
enum class Backend {
  /// The fastest correct choice: the fused kernel on the CPU unless the weights are asked for, dropout is on,
  /// or the additive mask needs a gradient. On CUDA (LibTorch >= 2): LibTorch's SDPA for plain attention and
  /// masks, and the `attn::flash_attention` op for the variants it takes there (window, soft-capping, ALiBi,
  /// sinks, packed sequences; ops::flash_attention_support), else Math. describe_route() says which.
  Auto,
  /// Materialises the [Tq, Tk] scores. Supports everything, including returning the weights.
  Math,
  /// attn's fused kernels (the `attn::flash_attention` op): tiles with an online softmax, O(T) memory. On the
  /// CPU, forward and backward, every mask and variant; no weights, no dropout, and no gradient for the additive
  /// mask. On CUDA, the variants ops::flash_attention_support takes (no masks, float16 or bfloat16; some forward
  /// only); for a KV cache, attn's decode kernel.
  Fused,
  /// LibTorch's scaled_dot_product_attention (at::_scaled_dot_product_attention on 1.13). attn's masks are
  /// combined into its one mask, keys that are padding for every query are zeroed first (a NaN or Inf there
  /// stays out), and fully masked rows are zeroed afterwards; otherwise LibTorch's semantics hold (a NaN or Inf
  /// at a key masked for some queries only, causally or by attend_mask or additive_mask, may reach them, and
  /// fully masked rows may get NaN gradients). No weights. Its precision is LibTorch's: 1.13's bfloat16 CPU
  /// products accumulate in bfloat16 without AVX-512, about 10 % of the largest output off over 2048 keys.
  Torch,
};

/// Which attention weights `forward_with_weights` returns.
enum class HeadWeights {
  Averaged,  ///< mean over heads: [B, Tq, Tk] (what torch.nn.MultiheadAttention returns by default)
  PerHead,   ///< one map per head: [B, H, Tq, Tk]
};

/// Masks that restrict which keys each query may attend to. Each one's name says what `true` means, so a
/// call site reads unambiguously (PyTorch itself uses both bool conventions in different places):
///
///   key_padding_mask  bool, true  = this key is padding: nobody attends to it   (nn.MultiheadAttention's)
///   attend_mask       bool, true  = this query may attend to this key             (F.scaled_dot_product_attention's)
///   additive_mask     float, added to the scaled scores; -inf blocks a pair
///
/// A key blocked for a query contributes exactly nothing to that query's output, even if its key or value
/// holds NaN or Inf. A query that may attend to no key gets an all-zero output row (and zero weights),
/// never NaN. The masks combine: a pair is used only if every mask allows it.
///
/// Shapes. Functional API, inputs [..., Tq, d]: key_padding_mask broadcasts to [..., Tk]; the other two
/// broadcast to [..., Tq, Tk]. Modules, inputs [B, T, E] (or unbatched [T, E]): key_padding_mask is [B, Tk]
/// ([Tk]); attend/additive masks are [Tq, Tk] or [B|1, H|1, Tq, Tk] (unbatched: [Tq, Tk] or [H|1, Tq, Tk]).
/// A torch.nn.MultiheadAttention bool attn_mask (true = blocked) becomes `attend_mask(mask.logical_not())`.
struct AttentionMasks {
  TORCH_ARG(torch::Tensor, key_padding_mask) = {};
  TORCH_ARG(torch::Tensor, attend_mask) = {};
  TORCH_ARG(torch::Tensor, additive_mask) = {};

 public:
  bool empty() const {
    return !key_padding_mask_.defined() && !attend_mask_.defined() && !additive_mask_.defined();
  }
};

/// The attention settings that the functional core and every module share. The modules and SdpaOptions hold
/// one of these and expose its setters as their own (`MultiHeadAttentionOptions(512, 8).causal(true)`), so a
/// setting is declared, defaulted and documented here only.
struct AttentionOptions {
  /// Block keys after the query's position (see CausalAlignment). Combines with the masks.
  TORCH_ARG(bool, causal) = false;
  /// Which keys a causal query sees when Tq != Tk (see CausalAlignment). torch.nn.MultiheadAttention's
  /// is_causal hint and F.scaled_dot_product_attention(is_causal=True) correspond to TopLeft.
  TORCH_ARG(CausalAlignment, causal_alignment) = CausalAlignment::BottomRight;
  /// Multiplies q·k. Default: 1 / sqrt(d_k).
  TORCH_ARG(std::optional<double>, scale) = std::nullopt;
  /// Dropout probability on the attention weights. The functional form applies it whenever it is > 0 (as
  /// torch.nn.functional does); the modules apply theirs only in training mode.
  TORCH_ARG(double, dropout) = 0.0;
  /// Which implementation computes the attention (see Backend).
  TORCH_ARG(Backend, backend) = Backend::Auto;
  /// Sliding window, as FlashAttention's window_size=(left, right): query i sees key j only if
  /// i + o - left <= j <= i + o + right, where o is the diagonal's offset (Tk - Tq bottom-right, 0 top-left; see
  /// CausalAlignment). -1 leaves that side unbounded. With causal, the right side is min(right, 0).
  /// Mistral's sliding_window = W is window(W - 1, 0) with causal.
  TORCH_ARG(int64_t, window_left) = -1;
  TORCH_ARG(int64_t, window_right) = -1;
  /// Logit soft-capping (Gemma 2, Grok): the scaled scores s become softcap · tanh(s / softcap) before the
  /// ALiBi bias and the masks. 0 turns it off.
  TORCH_ARG(double, softcap) = 0.0;

 public:
  /// Both window sides at once: window(left, right).
  AttentionOptions& window(int64_t left, int64_t right) {
    window_left_ = left;
    window_right_ = right;
    return *this;
  }
  /// Whether window_left or window_right bounds the keys.
  bool has_window() const noexcept { return window_left_ >= 0 || window_right_ >= 0; }
};

/// "Auto", "Math", "Fused" or "Torch".
const char* to_string(Backend backend);

/// Gives an options struct the setters and getters of the AttentionOptions it holds, returning the struct
/// itself so that chains keep their type: `CrossAttentionOptions(8, 6, 4).causal(true).num_heads(2)`.
template <typename Derived>
class WithAttentionOptions {
 public:
  Derived& attention(const AttentionOptions& attention) {
    attention_ = attention;
    return self();
  }
  const AttentionOptions& attention() const noexcept { return attention_; }

  Derived& causal(bool causal) {
    attention_.causal(causal);
    return self();
  }
  bool causal() const noexcept { return attention_.causal(); }
  Derived& causal_alignment(CausalAlignment alignment) {
    attention_.causal_alignment(alignment);
    return self();
  }
  CausalAlignment causal_alignment() const noexcept { return attention_.causal_alignment(); }
  Derived& scale(std::optional<double> scale) {
    attention_.scale(scale);
    return self();
  }
  std::optional<double> scale() const noexcept { return attention_.scale(); }
  Derived& dropout(double dropout) {
    attention_.dropout(dropout);
    return self();
  }
  double dropout() const noexcept { return attention_.dropout(); }
  Derived& backend(Backend backend) {
    attention_.backend(backend);
    return self();
  }
  Backend backend() const noexcept { return attention_.backend(); }
  Derived& window(int64_t left, int64_t right) {
    attention_.window(left, right);
    return self();
  }
  Derived& window_left(int64_t left) {
    attention_.window_left(left);
    return self();
  }
  int64_t window_left() const noexcept { return attention_.window_left(); }
  Derived& window_right(int64_t right) {
    attention_.window_right(right);
    return self();
  }
  int64_t window_right() const noexcept { return attention_.window_right(); }
  Derived& softcap(double softcap) {
    attention_.softcap(softcap);
    return self();
  }
  double softcap() const noexcept { return attention_.softcap(); }

 private:
  Derived& self() { return static_cast<Derived&>(*this); }

  AttentionOptions attention_;
};

/// Options of `attn::scaled_dot_product_attention`: masks, per-head score terms, and the shared attention
/// settings (causal, causal_alignment, scale, dropout, backend, window, softcap; see AttentionOptions).
struct SdpaOptions : WithAttentionOptions<SdpaOptions> {
  TORCH_ARG(AttentionMasks, masks) = {};
  /// ALiBi (BLOOM, MPT): [H] or [B, H] slopes (H the query's heads, dimension -3); query i and key j get the
  /// bias -slope · |i + o - j| (o as in window), added after softcap. Causal, it equals BLOOM's slope · j up
  /// to a per-row constant, which the softmax ignores. attn::alibi_slopes(H) gives the standard slopes.
  /// Slopes that require grad get their gradient from Backend::Math and Backend::Torch (Auto takes Math for
  /// them); Backend::Fused refuses them in grad mode.
  TORCH_ARG(torch::Tensor, alibi_slopes) = {};
  /// Attention sinks (GPT-OSS): [H] logits, one per query head, that join every row's softmax denominator
  /// and attend to nothing: p_ij = exp(s_ij) / (exp(sink_h) + sum_j exp(s_ij)). Differentiable.
  TORCH_ARG(torch::Tensor, sinks) = {};
};

// The modules' options. Widths keep the names of what each module mirrors (torch.nn.MultiheadAttention's
// embed_dim/kdim/vdim, the notebooks' d_in/d_k/d_v); docs/options.md lines them up in one table.

/// attn::AttentionHead: one head, x [.., d_in] -> q, k [.., d_k] and v [.., d_v].
struct AttentionHeadOptions : WithAttentionOptions<AttentionHeadOptions> {
  AttentionHeadOptions(int64_t d_in, int64_t d_k) : d_in_(d_in), d_k_(d_k), d_v_(d_k) {}
  TORCH_ARG(int64_t, d_in);
  TORCH_ARG(int64_t, d_k);
  /// Width of the values and of the output. Default: d_k.
  TORCH_ARG(int64_t, d_v);
  /// Bias in the q/k/v projections. Default false, like the notebooks' W_q/W_k/W_v.
  TORCH_ARG(bool, bias) = false;
};

/// attn::MultiHeadAttention: q/k/v projections to num_heads heads of head_dim, attention, then out_proj.
struct MultiHeadAttentionOptions : WithAttentionOptions<MultiHeadAttentionOptions> {
  MultiHeadAttentionOptions(int64_t embed_dim, int64_t num_heads)
      : embed_dim_(embed_dim), num_heads_(num_heads), kdim_(embed_dim), vdim_(embed_dim) {}
  TORCH_ARG(int64_t, embed_dim);
  TORCH_ARG(int64_t, num_heads);
  /// Width of each head. Default: embed_dim / num_heads, which must then divide evenly.
  TORCH_ARG(std::optional<int64_t>, head_dim) = std::nullopt;
  /// Key/value heads (grouped-query attention; 1 is multi-query). Must divide num_heads; k_proj and v_proj
  /// then project to num_kv_heads * head_dim, and query head h attends with K/V head h / (num_heads /
  /// num_kv_heads). Default: num_heads.
  TORCH_ARG(std::optional<int64_t>, num_kv_heads) = std::nullopt;
  /// Rotary position embeddings applied to q and k after the projections (rotary_dim <= head_dim). Positions
  /// are 0..T-1 in forward(query, key, value), and each row's cache positions in forward_with_cache(x, cache, layer).
  TORCH_ARG(std::optional<RotaryEmbeddingOptions>, rotary) = std::nullopt;
  /// Width of the key and value inputs (cross-attention from another sequence). Default: embed_dim.
  TORCH_ARG(int64_t, kdim);
  TORCH_ARG(int64_t, vdim);
  TORCH_ARG(bool, bias) = true;
  /// With false there is no out_proj and the output is the heads concatenated, [.., num_heads * head_dim]
  /// (notebook 001's MultiHeadedAttention: independent full-width heads, concatenated).
  TORCH_ARG(bool, output_projection) = true;
  /// ALiBi (BLOOM, MPT) with the standard slopes attn::alibi_slopes(num_heads): query i and key j get the bias
  /// -slope_h · |i + o - j| (SdpaOptions::alibi_slopes). The slopes follow from num_heads, so they are not
  /// parameters and stay out of the state_dict, as in BLOOM's checkpoints.
  TORCH_ARG(bool, alibi) = false;
  /// Learned attention sinks (GPT-OSS): a parameter `sinks` [num_heads], zeros at first, whose logits join every
  /// row's softmax denominator (SdpaOptions::sinks). GPT-OSS checkpoints name it `self_attn.sinks` too.
  TORCH_ARG(bool, sinks) = false;
};

/// attn::CrossAttention: queries from x [.., d_query_in], keys and values from context [.., d_context_in].
struct CrossAttentionOptions : WithAttentionOptions<CrossAttentionOptions> {
  CrossAttentionOptions(int64_t d_query_in, int64_t d_context_in, int64_t d_k)
      : d_query_in_(d_query_in), d_context_in_(d_context_in), d_k_(d_k), d_v_(d_k) {}
  TORCH_ARG(int64_t, d_query_in);
  TORCH_ARG(int64_t, d_context_in);
  /// Width of queries and keys per head.
  TORCH_ARG(int64_t, d_k);
  /// Width of values per head. Default: d_k. The output is [.., num_heads * d_v].
  TORCH_ARG(int64_t, d_v);
  TORCH_ARG(int64_t, num_heads) = 1;
  TORCH_ARG(bool, bias) = false;
  /// ALiBi with the standard slopes for num_heads heads, and learned sinks: as MultiHeadAttentionOptions'.
  TORCH_ARG(bool, alibi) = false;
  TORCH_ARG(bool, sinks) = false;
};

}  // namespace attn
