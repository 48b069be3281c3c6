#pragma once
// Which attention module wrote each layer of a cache, one rule for KVCache and PagedKVCache: two modules given the
// same layer index would interleave their keys in one layer and decode wrong tokens without an error.

#include <cstdint>
#include <vector>

namespace attn {

/// Throws, naming `caller`, where writers[layer] is a module other than `module` (nullptr: none yet). `since` says
/// since when the cache remembers its writers, `or_else` how to hand it to other modules.
void check_layer_writer(const std::vector<const void*>& writers, int64_t layer, const void* module, const char* caller,
                        const char* since, const char* or_else);

}  // namespace attn
