// A user-defined torch::nn::Module holding an attn::MultiHeadAttention and a torch::nn::Linear, built against the
// installed attn package. Exits 0 when its forward pass gives the expected shape and finite values.

#include <attn/attn.h>
#include <attn/jit/export.h>

#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <sstream>
#include <string>

struct TinyBlockImpl : torch::nn::Module {
  TinyBlockImpl(int64_t dim, int64_t heads, int64_t classes)
      : attention(register_module("attention", attn::MultiHeadAttention(attn::MultiHeadAttentionOptions(dim, heads)
                                                                             .causal(true)))),
        head(register_module("head", torch::nn::Linear(dim, classes))) {}

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& padding) {
    const torch::Tensor mixed = attention->forward(x, x, x, attn::AttentionMasks().key_padding_mask(padding));
    return head->forward(x + mixed);
  }

  attn::MultiHeadAttention attention;
  torch::nn::Linear head;
};
TORCH_MODULE(TinyBlock);

int main() {
  try {
    // The library that the loader found is the one these headers describe.
    if (std::string(attn::version()) != ATTN_VERSION) {
      std::fprintf(stderr, "consumer: headers of attn %s, but libattn %s was loaded\n", ATTN_VERSION, attn::version());
      return 1;
    }
    torch::manual_seed(0);
    const int64_t batch = 3, length = 7, dim = 16, heads = 4, classes = 5;
    TinyBlock block(dim, heads, classes);
    block->eval();
    const torch::Tensor x = torch::randn({batch, length, dim});
    torch::Tensor padding = torch::zeros({batch, length}, torch::kBool);
    padding[2].slice(0, 4) = true;
    torch::NoGradGuard no_grad;
    const torch::Tensor y = block->forward(x, padding);
    if (y.sizes() != torch::IntArrayRef({batch, length, classes})) {
      std::ostringstream shape;
      shape << y.sizes();
      std::fprintf(stderr, "consumer: unexpected output shape %s\n", shape.str().c_str());
      return 1;
    }
    if (!y.isfinite().all().item<bool>()) {
      std::fprintf(stderr, "consumer: the output is not finite\n");
      return 1;
    }
    // The installed headers include the TorchScript export; its forward must agree with the module's.
    torch::jit::Module exported = attn::jit::to_torchscript(*block->attention);
    const torch::Tensor direct = block->attention->forward(x, x, x);
    const double difference = (exported.forward({x, x, x}).toTensor() - direct).abs().max().item<double>();
    if (!(difference <= 1e-5)) {
      std::fprintf(stderr, "consumer: the TorchScript export differs from the module by %g\n", difference);
      return 1;
    }
    // A decoding step's product through attn::linear (the attn::linear_rows op, registered by the installed
    // library) against the stock Linear's own forward on the same row.
    const torch::Tensor row = x[0][0].unsqueeze(0);
    const torch::Tensor step = attn::linear(row, block->head->weight, block->head->bias);
    const double step_difference = (step - block->head->forward(row)).abs().max().item<double>();
    if (!(step_difference <= 1e-5)) {
      std::fprintf(stderr, "consumer: attn::linear differs from torch::nn::Linear by %g\n", step_difference);
      return 1;
    }
    std::printf("consumer: attn %s (headers and library) from the installed package, %zu parameters, "
                "output [%ld, %ld, %ld] finite, TorchScript export and attn::linear agree\n",
                ATTN_VERSION, block->parameters().size(), static_cast<long>(batch), static_cast<long>(length),
                static_cast<long>(classes));
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "consumer: %s\n", error.what());
    return 1;
  }
}
