// attn::resolve_device: the strings apps accept, and a clear error when CUDA is asked for but absent.

#include "support.h"

namespace attn::test {
namespace {

TEST(Device, CpuAndAuto) {
  EXPECT_EQ(resolve_device("cpu"), torch::Device(torch::kCPU));
  EXPECT_EQ(resolve_device("auto"), cuda_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU));
}

TEST(Device, CudaIsResolvedOrRefusedClearly) {
  if (cuda_available()) {
    EXPECT_EQ(resolve_device("cuda"), torch::Device(torch::kCUDA, 0));
    EXPECT_EQ(resolve_device("cuda:0"), torch::Device(torch::kCUDA, 0));
    EXPECT_ERROR_CONTAINS(resolve_device("cuda:99"), "CUDA device(s) are visible");
  } else {
    EXPECT_ERROR_CONTAINS(resolve_device("cuda"), "CUDA is not available");
    EXPECT_ERROR_CONTAINS(resolve_device("cuda:1"), "CUDA is not available");
  }
}

TEST(Device, MalformedNamesAreRejected) {
  for (const char* bad : {"gpu", "CPU", "", "cuda:", "cuda:x", "cuda0", "cuda:-1", "cuda:123456789"}) {
    SCOPED_TRACE(bad);
    EXPECT_ERROR_CONTAINS(resolve_device(bad), "expected auto, cpu, cuda or cuda:N");
  }
}

}  // namespace
}  // namespace attn::test
