#pragma once
// One rank of a multi-process ring attention test: the same executable, started by the test with
// --ring-worker. Prints what it found and exits 0 (all within tolerance), 1 (a mismatch), 3 (an error it
// reported cleanly, which the failure tests expect) or 4 (setup failed).

namespace attn::test::ring {

constexpr int kExitPass = 0;
constexpr int kExitMismatch = 1;
constexpr int kExitCleanError = 3;
constexpr int kExitSetupFailed = 4;

/// argv: --ring-worker CASE RANK WORLD STORE_PATH TIMEOUT_MS
int worker_main(int argc, char** argv);

}  // namespace attn::test::ring
