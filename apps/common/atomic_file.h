#pragma once
// Writing an output file so that a reader never sees it half-written, and a failure leaves any previous
// version of it untouched.

#include <string>

namespace attn_apps {

/// Writes `contents` to a temporary file next to `path` (same file system), then renames it over `path`.
/// Throws std::runtime_error naming the file and the system error; the temporary file is removed on failure.
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace attn_apps
