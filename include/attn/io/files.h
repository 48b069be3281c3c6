#pragma once
// Writing whole files so that no reader ever sees one half-written: attn's weight files use it, and so do
// the apps for what they save (exports, SVG images, benchmark JSON).

#include <string>

namespace attn::io {

/// Writes `contents` to a temporary file next to `path` (same directory, hence same file system), then renames
/// it over `path`: a reader sees the previous file or the complete new one. A failure leaves the previous file
/// untouched, removes the temporary file, and throws c10::Error naming the file and the system error. The new
/// file keeps the previous one's permissions; where `path` is a symbolic link, its target is replaced and the
/// link stays. Threads may write the same path at once: each write is whole, and the last rename wins. A path
/// that is a device or a FIFO (/dev/null, a pipe) is written where it is, not replaced by a regular file.
void write_file_atomically(const std::string& path, const std::string& contents);

}  // namespace attn::io
