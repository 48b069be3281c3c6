# TorchScript methods, not a Python module: src/jit/export.cpp compiles this file into each exported module
# with torch::jit::Module::define (the build embeds it; see cmake/embed_torchscript.cmake). The native resolver
# knows `torch` (ATen ops) but not dtype names, so a dtype is spelled as its ScalarType number, as saved
# TorchScript code spells it (11 = torch.bool), and failed checks use `assert` (RuntimeError is not in scope).
#
# forward of the exported attn::MultiHeadAttention.

def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Optional[Tensor] = None,
            attend_mask: Optional[Tensor] = None, additive_mask: Optional[Tensor] = None) -> Tensor:
    out = self._project_and_attend(query, key, value, key_padding_mask, attend_mask, additive_mask)
    if hasattr(self, "out_proj"):
        out = self.out_proj.forward(out)
    return out
