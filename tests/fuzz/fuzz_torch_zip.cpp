// libFuzzer target: attn::io::detail::read_torch_zip on arbitrary bytes, then the name mapping and the load
// into a small MultiHeadAttention (fuzz_load.h). The format: torch.save's zip archive (data.pkl and the
// data/<key> records), checked by attn, then read by LibTorch's zip reader and attn's restricted unpickler.
// Seed corpus: tests/fuzz/make_corpus.py. Run by scripts/sanitize-and-fuzz.sh.

#include "fuzz_load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return attn::fuzz::run_one(&attn::io::detail::read_torch_zip, data, size);
}
