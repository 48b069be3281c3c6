#include <attn/version.h>

namespace attn {

// Compiled into the library: the headers' ATTN_VERSION as they were when libattn itself was built.
const char* version() noexcept { return ATTN_VERSION; }

}  // namespace attn
