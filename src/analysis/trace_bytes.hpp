#pragma once
// Loading a trace's bytes: plain or gzip, told apart by the gzip magic bytes (1f 8b), never by the
// file's extension, so `trace.csv` that is really compressed (or `x.gz` that is not) still reads.
#include <filesystem>
#include <iosfwd>
#include <string>

namespace gpumem::detail {

// The whole file, decompressed when it starts with the gzip magic. Throws trace_error (line 0)
// when the file cannot be opened or read, or the gzip stream is corrupt or cut short.
std::string load_trace_bytes(const std::filesystem::path& path);

// The same for a stream's remaining bytes; `name` is only for messages.
std::string load_trace_bytes(std::istream& in, const std::string& name);

// Inflates `bytes` in place when they start with the gzip magic (every member of a multi-member
// file); leaves them as they are otherwise.
void gunzip_if_compressed(std::string& bytes, const std::string& name);

}  // namespace gpumem::detail
