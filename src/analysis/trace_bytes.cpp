// Reads a trace file in big chunks and inflates it in memory with zlib. One buffer for the whole
// text costs memory (about 50 B a row: ~32 MB for the largest shared trace) but lets the parser run
// over contiguous bytes with memchr and from_chars, with no per-field stream I/O.
#include "trace_bytes.hpp"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <istream>
#include <limits>
#include <memory>

#include "gpumem/trace.hpp"

namespace gpumem::detail {
namespace {

constexpr std::size_t chunk_bytes = std::size_t{1} << 20;

bool has_gzip_magic(const std::string& b) {
  return b.size() >= 2 && static_cast<unsigned char>(b[0]) == 0x1f &&
         static_cast<unsigned char>(b[1]) == 0x8b;
}

struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

}  // namespace

void gunzip_if_compressed(std::string& bytes, const std::string& name) {
  if (!has_gzip_magic(bytes)) return;
  std::string out;
  out.reserve(bytes.size() * 6);  // CSV of hex and digits compresses about 5-8x
  z_stream zs{};
  // 16 + MAX_WBITS: expect a gzip header and trailer (not raw zlib).
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw trace_error(name, 0, "zlib could not start");
  if (bytes.size() > std::numeric_limits<uInt>::max()) {
    inflateEnd(&zs);
    throw trace_error(name, 0, "compressed file over 4 GiB is not supported");
  }
  zs.next_in = reinterpret_cast<Bytef*>(bytes.data());
  zs.avail_in = static_cast<uInt>(bytes.size());
  std::size_t used = 0;
  for (;;) {
    if (out.size() - used < chunk_bytes) out.resize(used + 4 * chunk_bytes);
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + used);
    zs.avail_out = static_cast<uInt>(out.size() - used);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    used = out.size() - zs.avail_out;
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;
      // A multi-member gzip file (e.g. appended logs): go on with the next member, unless what
      // follows is trailing padding of zeros, which gzip itself ignores.
      if (!has_gzip_magic(std::string(reinterpret_cast<const char*>(zs.next_in),
                                      std::min<std::size_t>(zs.avail_in, 2)))) {
        break;
      }
      inflateReset(&zs);
      continue;
    }
    if (rc == Z_OK) continue;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      throw trace_error(name, 0, "gzip data is cut short (the file ends inside the stream)");
    }
    const std::string why = zs.msg ? zs.msg : "error " + std::to_string(rc);
    inflateEnd(&zs);
    throw trace_error(name, 0, "gzip data is corrupt: " + why);
  }
  inflateEnd(&zs);
  out.resize(used);
  bytes = std::move(out);
}

std::string load_trace_bytes(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::unique_ptr<std::FILE, file_closer> f(std::fopen(name.c_str(), "rb"));
  if (!f) throw trace_error(name, 0, std::string("cannot open: ") + std::strerror(errno));
  std::string bytes;
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec) bytes.reserve(static_cast<std::size_t>(size));
  std::size_t used = 0;
  for (;;) {
    bytes.resize(used + chunk_bytes);
    const std::size_t n = std::fread(bytes.data() + used, 1, chunk_bytes, f.get());
    used += n;
    if (n < chunk_bytes) break;
  }
  if (std::ferror(f.get())) throw trace_error(name, 0, std::string("read failed: ") + std::strerror(errno));
  bytes.resize(used);
  gunzip_if_compressed(bytes, name);
  return bytes;
}

std::string load_trace_bytes(std::istream& in, const std::string& name) {
  std::string bytes;
  std::size_t used = 0;
  for (;;) {
    bytes.resize(used + chunk_bytes);
    in.read(bytes.data() + used, static_cast<std::streamsize>(chunk_bytes));
    const auto n = static_cast<std::size_t>(in.gcount());
    used += n;
    if (n < chunk_bytes) break;
  }
  if (in.bad()) throw trace_error(name, 0, "read failed");
  bytes.resize(used);
  gunzip_if_compressed(bytes, name);
  return bytes;
}

}  // namespace gpumem::detail
