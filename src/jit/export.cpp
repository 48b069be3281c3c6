#include <attn/jit/export.h>

#include "common/alibi_slopes.h"

#include "jit/torchscript_sources.h"  // generated from src/jit/torchscript/*.py

#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <string>

namespace attn::jit {
namespace {

using torch::jit::Module;

void add_int(Module& m, const char* name, int64_t value) { m.register_attribute(name, c10::IntType::get(), value); }
void add_bool(Module& m, const char* name, bool value) { m.register_attribute(name, c10::BoolType::get(), value); }
void add_float(Module& m, const char* name, double value) {
  m.register_attribute(name, c10::FloatType::get(), value);
}

/// A parameter's value, detached and copied, keeping requires_grad.
at::Tensor snapshot(const at::Tensor& t) { return t.detach().clone().requires_grad_(t.requires_grad()); }

/// Builds the exported Linear submodules: one class, __torch__.attn.Linear, shared by all the projections of a
/// module (they agree on whether there is a bias), with torch::nn::Linear's forward.
class LinearExporter {
 public:
  explicit LinearExporter(std::shared_ptr<torch::jit::CompilationUnit> cu) : cu_(std::move(cu)) {}

  Module operator()(const torch::nn::Linear& linear, bool training) {
    Module m = type_ ? Module(cu_, type_) : Module(c10::QualifiedName("__torch__.attn.Linear"), cu_, true);
    add_bool(m, "training", training);
    m.register_parameter("weight", snapshot(linear->weight), /*is_buffer=*/false);
    if (linear->bias.defined()) {
      m.register_parameter("bias", snapshot(linear->bias), /*is_buffer=*/false);
    } else {
      m.register_attribute("bias", c10::OptionalType::create(c10::TensorType::get()), c10::IValue());
    }
    if (!type_) {
      m.define(torchscript::kLinear);
      type_ = m.type();
    }
    return m;
  }

 private:
  std::shared_ptr<torch::jit::CompilationUnit> cu_;
  c10::ClassTypePtr type_;
};

/// The module's class with the training flag and the attributes the shared core reads, then its submodules.
struct Exporter {
  std::shared_ptr<torch::jit::CompilationUnit> cu = std::make_shared<torch::jit::CompilationUnit>();
  Module m;
  LinearExporter linear{cu};
  bool training;

  Exporter(const char* class_name, const torch::nn::Module& module, int64_t num_heads, int64_t query_width,
           int64_t key_width, int64_t value_width, const AttentionOptions& attention, bool alibi = false,
           const torch::Tensor& sinks = {})
      : m(c10::QualifiedName(class_name), cu, true), training(module.is_training()) {
    add_bool(m, "training", training);
    add_int(m, "num_heads", num_heads);
    add_int(m, "query_width", query_width);
    add_int(m, "key_width", key_width);
    add_int(m, "value_width", value_width);
    add_bool(m, "causal", attention.causal());
    add_bool(m, "bottom_right", attention.causal_alignment() == CausalAlignment::BottomRight);
    m.register_attribute("scale", c10::OptionalType::create(c10::FloatType::get()),
                         attention.scale() ? c10::IValue(*attention.scale()) : c10::IValue());
    add_float(m, "dropout", attention.dropout());
    add_int(m, "window_left", attention.window_left());
    add_int(m, "window_right", attention.window_right());
    add_float(m, "softcap", attention.softcap());
    // The slopes are a plain attribute (saved with the module, not in its state_dict, as in the C++ module);
    // the sinks a parameter, or None.
    const auto optional_tensor = c10::OptionalType::create(c10::TensorType::get());
    m.register_attribute("alibi_slopes", optional_tensor,
                         alibi ? c10::IValue(common::standard_alibi_slopes("attn::jit::to_torchscript", num_heads,
                                                                           torch::kCPU))
                               : c10::IValue());
    if (sinks.defined()) {
      m.register_parameter("sinks", snapshot(sinks), /*is_buffer=*/false);
    } else {
      m.register_attribute("sinks", optional_tensor, c10::IValue());
    }
  }

  void add_linear(const char* name, const torch::nn::Linear& l) { m.register_module(name, linear(l, training)); }

  Module finish(const char* forward) {
    m.define(torchscript::kAttention);
    m.define(forward);
    return m;
  }
};

}  // namespace

torch::jit::Module to_torchscript(const MultiHeadAttentionImpl& module) {
  const auto& o = module.options;
  // The exported forward is the cache-less forward; rotary embeddings are not in the TorchScript core.
  TORCH_CHECK(!o.rotary(), "attn::jit::to_torchscript: the export does not cover MultiHeadAttention's rotary "
              "option; export the module without it (and rotate q and k outside), or use torch.export on the "
              "Python side");
  Exporter e("__torch__.attn.MultiHeadAttention", module, o.num_heads(), o.embed_dim(), o.kdim(), o.vdim(),
             o.attention(), o.alibi(), module.sinks);
  add_int(e.m, "num_kv_heads", module.num_kv_heads());
  add_int(e.m, "embed_dim", o.embed_dim());
  add_int(e.m, "head_dim", module.head_dim());
  add_int(e.m, "kdim", o.kdim());
  add_int(e.m, "vdim", o.vdim());
  add_bool(e.m, "bias", o.bias());
  add_bool(e.m, "output_projection", static_cast<bool>(module.out_proj));
  e.add_linear("q_proj", module.q_proj);
  e.add_linear("k_proj", module.k_proj);
  e.add_linear("v_proj", module.v_proj);
  if (module.out_proj) e.add_linear("out_proj", module.out_proj);
  return e.finish(torchscript::kMultiHeadAttention);
}

torch::jit::Module to_torchscript(const AttentionHeadImpl& module) {
  const auto& o = module.options;
  Exporter e("__torch__.attn.AttentionHead", module, /*num_heads=*/1, o.d_in(), o.d_in(), o.d_in(),
             o.attention());
  add_int(e.m, "num_kv_heads", 1);
  add_int(e.m, "d_in", o.d_in());
  add_int(e.m, "d_k", o.d_k());
  add_int(e.m, "d_v", o.d_v());
  add_bool(e.m, "bias", o.bias());
  e.add_linear("q_proj", module.q_proj);
  e.add_linear("k_proj", module.k_proj);
  e.add_linear("v_proj", module.v_proj);
  return e.finish(torchscript::kAttentionHead);
}

torch::jit::Module to_torchscript(const CrossAttentionImpl& module) {
  const auto& o = module.options;
  Exporter e("__torch__.attn.CrossAttention", module, o.num_heads(), o.d_query_in(), o.d_context_in(),
             o.d_context_in(), o.attention(), o.alibi(), module.sinks);
  add_int(e.m, "num_kv_heads", o.num_heads());
  add_int(e.m, "d_query_in", o.d_query_in());
  add_int(e.m, "d_context_in", o.d_context_in());
  add_int(e.m, "d_k", o.d_k());
  add_int(e.m, "d_v", o.d_v());
  add_bool(e.m, "bias", o.bias());
  e.add_linear("q_proj", module.q_proj);
  e.add_linear("k_proj", module.k_proj);
  e.add_linear("v_proj", module.v_proj);
  return e.finish(torchscript::kCrossAttention);
}

}  // namespace attn::jit
