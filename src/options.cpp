#include <attn/options.h>

namespace attn {

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::Auto: return "Auto";
    case Backend::Math: return "Math";
    case Backend::Fused: return "Fused";
    case Backend::Torch: return "Torch";
  }
  return "unknown";
}

}  // namespace attn
