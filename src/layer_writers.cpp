#include "layer_writers.h"

#include <c10/util/Exception.h>

namespace attn {

void check_layer_writer(const std::vector<const void*>& writers, int64_t layer, const void* module, const char* caller,
                        const char* since, const char* or_else) {
  const void* writer = writers[static_cast<size_t>(layer)];
  TORCH_CHECK(writer == nullptr || writer == module, caller, ": cache layer ", layer,
              " was already written by another module ", since, ": give each attention module its own layer index (or ",
              or_else, ")");
}

}  // namespace attn
