// Fixture for the layers.rejects_upward_includes test: an op kernel that reaches up into the backends.
// Never compiled; cmake/check_layers.cmake must refuse it.
#include "backends/dispatch.h"
#include "common/checks.h"
