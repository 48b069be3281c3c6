// Fixture for the layers.rejects_upward_includes test: a kernel that reaches up into the ops layer's contract.
// Never compiled; cmake/check_layers.cmake must refuse it (and take the room-mate include beside it).
#include "ops/attention_contract.h"
#include "ops/cpu/flash/problem.h"
