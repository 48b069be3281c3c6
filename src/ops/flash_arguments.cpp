#include <attn/ops/flash_arguments.h>

namespace attn::ops {

bool FlashArguments::has_masks() const {
  return (key_padding_mask && key_padding_mask->defined()) || (attend_mask && attend_mask->defined()) ||
         (additive_mask && additive_mask->defined());
}
bool FlashArguments::has_alibi() const { return alibi_slopes && alibi_slopes->defined(); }
bool FlashArguments::has_sinks() const { return sinks && sinks->defined(); }
bool FlashArguments::packed() const { return cu_seqlens_q && cu_seqlens_q->defined(); }

}  // namespace attn::ops
