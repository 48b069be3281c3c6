// The names of the rotary enumerators, in one place for error messages and pretty_print.

#include <attn/rotary.h>

namespace attn {

const char* to_string(RotaryPairing pairing) {
  switch (pairing) {
    case RotaryPairing::HalfSplit: return "HalfSplit";
    case RotaryPairing::Interleaved: return "Interleaved";
  }
  return "?";
}

const char* to_string(RotaryScaling scaling) {
  switch (scaling) {
    case RotaryScaling::None: return "None";
    case RotaryScaling::Linear: return "Linear";
    case RotaryScaling::DynamicNTK: return "DynamicNTK";
    case RotaryScaling::YaRN: return "YaRN";
    case RotaryScaling::Llama3: return "Llama3";
  }
  return "?";
}

}  // namespace attn
