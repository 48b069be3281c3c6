// Fixture for the layers.rejects_upward_includes test: the front door reaching past the ops into a kernel
// header. Never compiled; cmake/check_layers.cmake must refuse it.
#include "ops/cpu/kernels.h"
#include "backends/cache.h"
