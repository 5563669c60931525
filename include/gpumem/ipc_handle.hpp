#pragma once
// A block exported to another process, in the form it travels in, and the two calls that carry it
// over a Unix-domain socket. CUDA-free: the CUDA layer fills and reads it (gpumem/cuda/ipc.hpp);
// the wire format and its checks are tested without a GPU.
//
// A virtual-memory block travels as one POSIX file descriptor per physical piece under it (the
// pieces laid end to end cover the block; `offset` is where the block starts in the first) — the
// descriptors go only to the process at the other end of the socket, as SCM_RIGHTS ancillary data,
// never through a path another user could open. A block of plain segments travels as the 64 bytes
// of a cudaIpcMemHandle_t of the segment and the block's offset in it.
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpumem {

// An owned file descriptor, closed when destroyed or reset.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) noexcept : fd_(fd) {}
  ~unique_fd() { reset(); }
  unique_fd(unique_fd&& o) noexcept : fd_(o.release()) {}
  unique_fd& operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;

  int get() const noexcept { return fd_; }
  int release() noexcept {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) noexcept;
  explicit operator bool() const noexcept { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

enum class ipc_kind : std::uint8_t {
  none = 0,
  vmm = 1,      // physical pieces as POSIX file descriptors (cuMemExportToShareableHandle)
  runtime = 2,  // a cudaIpcMemHandle_t of a plain segment (cudaIpcGetMemHandle)
};

struct ipc_handle {
  ipc_kind kind = ipc_kind::none;
  int device = -1;                 // the exporter's device ordinal (informational)
  std::uint32_t exporter_pid = 0;
  std::uint64_t bytes = 0;         // the block's size
  std::uint64_t offset = 0;        // vmm: from the first piece's start; runtime: from the segment's base
  std::vector<std::uint64_t> piece_bytes;  // vmm: each piece's size, in address order
  // vmm: each piece's handle value in the exporter. With exporter_pid it names the piece, so an
  // importer holding several blocks of one piece imports it once.
  std::vector<std::uint64_t> piece_ids;
  std::vector<unique_fd> fds;              // vmm: one descriptor per piece, owned
  std::array<std::uint8_t, 64> runtime{};  // runtime: the cudaIpcMemHandle_t's bytes
  std::uint64_t runtime_bytes = 0;         // runtime: the segment's size
  std::uint64_t segment_address = 0;       // runtime: the segment's base in the exporter
};

// The most pieces one handle may carry (a block of 2 TiB in 2 MiB granules).
inline constexpr std::size_t ipc_max_pieces = std::size_t{1} << 20;

// Throws std::invalid_argument "gpumem ipc: <where>: <what is wrong> (<why it cannot be used>)"
// unless `h` is well formed: a known kind, a block of at least one byte inside its pieces (or its
// segment), every piece a positive size with an id, and one open descriptor per piece.
void validate(const ipc_handle& h, const char* where);

// Sends `h` over `socket_fd`, a connected AF_UNIX stream socket (socketpair(AF_UNIX, SOCK_STREAM)
// or one accepted from a listening socket in a directory only its user can reach). The receiver
// gets descriptors of its own; `h` keeps its. Throws std::invalid_argument for a malformed handle
// or a socket that is not AF_UNIX stream, std::system_error when sending fails.
void send_handle(int socket_fd, const ipc_handle& h);

// Receives one handle sent by send_handle; its descriptors are close-on-exec. Throws
// std::runtime_error when the peer closed the socket or sent something that is not a handle,
// std::invalid_argument for a malformed one, std::system_error when receiving fails. Whatever
// descriptors arrived with a refused message are closed.
ipc_handle receive_handle(int socket_fd);

}  // namespace gpumem
