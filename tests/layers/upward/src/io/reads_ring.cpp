// Fixture for the layers.rejects_upward_includes test: io/ reaching up into distributed/. Never compiled;
// cmake/check_layers.cmake must refuse it.
#include "distributed/ring_plan.h"
#include "modules/shared/settings.h"
