// The wheel's LibTorch from C++ on the CPU: its version, an op, and the CUDA kernel of check.cu where a GPU is.
#include <torch/torch.h>

#include <iostream>

void scale_cuda(at::Tensor& x, float a);

int main() {
  const auto x = torch::randn({2, 3, 5, 8});
  const auto y = at::scaled_dot_product_attention(x, x, x);
  const auto expected = torch::softmax(x.matmul(x.transpose(-2, -1)) / std::sqrt(8.0), -1).matmul(x);
  if (!torch::allclose(y, expected, 1e-5, 1e-6)) {
    std::cerr << "torch_pip_check: scaled_dot_product_attention differs from softmax(QK^T)V\n";
    return 1;
  }
  std::cout << "torch_pip_check: LibTorch " << TORCH_VERSION << " from C++: CPU ok";
  if (torch::cuda::is_available()) {
    auto z = torch::ones({1000}, torch::kCUDA);
    scale_cuda(z, 3);
    if (!torch::equal(z.cpu(), torch::full({1000}, 3.0f))) {
      std::cerr << "\ntorch_pip_check: the CUDA kernel gave wrong values\n";
      return 1;
    }
    std::cout << ", CUDA kernel ok";
  } else {
    std::cout << ", CUDA kernel linked (no GPU to run it)";
  }
  std::cout << "\n";
}
