# TorchScript methods, not a Python module: src/jit/export.cpp compiles this file into each exported module
# with torch::jit::Module::define (the build embeds it; see cmake/embed_torchscript.cmake). The native resolver
# knows `torch` (ATen ops) but not dtype names, so a dtype is spelled as its ScalarType number, as saved
# TorchScript code spells it (11 = torch.bool), and failed checks use `assert` (RuntimeError is not in scope).
#
# torch::nn::Linear's forward (torch::nn::functional::linear), op for op, so that the export rounds exactly
# as the C++ module does. `bias` is a Tensor parameter or a None attribute.

def forward(self, input: Tensor) -> Tensor:
    bias = self.bias
    if input.dim() == 2 and bias is not None:
        return torch.addmm(bias, input, self.weight.t())
    output = torch.matmul(input, self.weight.t())
    if bias is not None:
        output += bias
    return output
