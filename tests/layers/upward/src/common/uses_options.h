// Fixture for the layers.rejects_upward_includes test: common/ is the bottom layer and includes no attn header.
#include <attn/options.h>
