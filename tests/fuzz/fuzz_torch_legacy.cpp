// libFuzzer target: attn::io::detail::read_torch_legacy on arbitrary bytes, then the name mapping and the
// load into a small MultiHeadAttention (fuzz_load.h). The format: torch.save(..., _use_new_zipfile_serialization
// =False), a stream of pickles (magic, protocol, sys_info, the object, the storage keys) then the raw storages.
// Seed corpus: tests/fuzz/make_corpus.py. Run by scripts/sanitize-and-fuzz.sh.

#include "fuzz_load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return attn::fuzz::run_one(&attn::io::detail::read_torch_legacy, data, size);
}
