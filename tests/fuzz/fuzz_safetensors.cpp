// libFuzzer target: attn::io::detail::read_safetensors on arbitrary bytes, then the name mapping and the load
// into a small MultiHeadAttention (fuzz_load.h). The format: an 8-byte little-endian header length, a JSON
// header (nlohmann::json), then the raw data.
// Seed corpus: tests/fuzz/make_corpus.py. Run by scripts/sanitize-and-fuzz.sh.

#include "fuzz_load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return attn::fuzz::run_one(&attn::io::detail::read_safetensors, data, size);
}
