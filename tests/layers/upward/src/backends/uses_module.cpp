// Fixture for the layers.rejects_upward_includes test: a backend that reaches up into the modules.
#include "modules/shared/heads.h"
#include <attn/ops/flash_attention.h>
