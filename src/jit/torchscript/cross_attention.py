# TorchScript methods, not a Python module: src/jit/export.cpp compiles this file into each exported module
# with torch::jit::Module::define (the build embeds it; see cmake/embed_torchscript.cmake). The native resolver
# knows `torch` (ATen ops) but not dtype names, so a dtype is spelled as its ScalarType number, as saved
# TorchScript code spells it (11 = torch.bool), and failed checks use `assert` (RuntimeError is not in scope).
#
# forward of the exported attn::CrossAttention: keys and values from the context.

def forward(self, x: Tensor, context: Tensor, key_padding_mask: Optional[Tensor] = None,
            attend_mask: Optional[Tensor] = None, additive_mask: Optional[Tensor] = None) -> Tensor:
    return self._project_and_attend(x, context, context, key_padding_mask, attend_mask, additive_mask)
