# TorchScript methods, not a Python module: src/jit/export.cpp compiles this file into each exported module
# with torch::jit::Module::define (the build embeds it; see cmake/embed_torchscript.cmake). The native resolver
# knows `torch` (ATen ops) but not dtype names, so a dtype is spelled as its ScalarType number, as saved
# TorchScript code spells it (11 = torch.bool), and failed checks use `assert` (RuntimeError is not in scope).
#
# forward of the exported attn::AttentionHead: key_input defaults to query_input, value_input to key_input.

def forward(self, query_input: Tensor, key_input: Optional[Tensor] = None, value_input: Optional[Tensor] = None,
            key_padding_mask: Optional[Tensor] = None, attend_mask: Optional[Tensor] = None,
            additive_mask: Optional[Tensor] = None) -> Tensor:
    key = query_input
    if key_input is not None:
        key = key_input
    value = key
    if value_input is not None:
        value = value_input
    return self._project_and_attend(query_input, key, value, key_padding_mask, attend_mask, additive_mask)
