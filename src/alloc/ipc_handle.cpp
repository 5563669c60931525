// The wire format of an exported block and its passage over a Unix-domain socket (SCM_RIGHTS).
//
// A handle goes as: a fixed header, the pieces' sizes, then the descriptors in batches of at most
// fd_batch, each batch attached to one byte of its own. Every read asks for exactly the bytes of
// its part, so a stream socket never hands one part's descriptors to another's read.
#include "gpumem/ipc_handle.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include <fmt/format.h>

namespace gpumem {

void unique_fd::reset(int fd) noexcept {
  if (fd_ >= 0) (void)::close(fd_);
  fd_ = fd;
}

namespace {

constexpr char wire_magic[8] = {'g', 'p', 'u', 'm', 'i', 'p', 'c', '1'};
constexpr std::uint32_t wire_version = 1;
// Descriptors per message: under the kernel's SCM_MAX_FD (253).
constexpr std::size_t fd_batch = 250;

struct wire_header {
  char magic[8];
  std::uint32_t version;
  std::uint8_t kind;
  std::uint8_t pad[3];
  std::int32_t device;
  std::uint32_t exporter_pid;
  std::uint64_t bytes;
  std::uint64_t offset;
  std::uint64_t pieces;
  std::uint64_t runtime_bytes;
  std::uint64_t segment_address;
  std::uint8_t runtime[64];
};

[[noreturn]] void invalid(const char* where, const std::string& what) {
  throw std::invalid_argument(fmt::format("gpumem ipc: {}: {}", where, what));
}

[[noreturn]] void sys_fail(const char* what) {
  const int e = errno;
  throw std::system_error(e, std::generic_category(), fmt::format("gpumem ipc: {}", what));
}

void check_socket(int fd, const char* where) {
  int domain = 0, type = 0;
  socklen_t len = sizeof(domain);
  if (::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0)
    invalid(where, fmt::format("descriptor {} is not a socket ({}; blocks travel only over a "
                               "connected Unix-domain socket)", fd, std::strerror(errno)));
  len = sizeof(type);
  if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) sys_fail("getsockopt(SO_TYPE)");
  if (domain != AF_UNIX || type != SOCK_STREAM)
    invalid(where, fmt::format("socket {} is not an AF_UNIX stream socket (domain {}, type {}; "
                               "descriptors pass only between processes on one host, as SCM_RIGHTS)",
                               fd, domain, type));
}

void send_all(int socket_fd, const void* data, std::size_t n, const int* fds, std::size_t nfds) {
  const auto* p = static_cast<const char*>(data);
  std::vector<char> control(nfds ? CMSG_SPACE(nfds * sizeof(int)) : 0);
  while (n > 0) {
    iovec iov{const_cast<char*>(p), n};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (nfds) {  // the descriptors ride on the first byte sent
      msg.msg_control = control.data();
      msg.msg_controllen = control.size();
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
      std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    const ssize_t sent = ::sendmsg(socket_fd, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      sys_fail("sendmsg on the handle's socket");
    }
    p += sent;
    n -= static_cast<std::size_t>(sent);
    nfds = 0;
  }
}

// Reads exactly n bytes; collects any descriptors that arrive into `fds` (close-on-exec).
void receive_all(int socket_fd, void* data, std::size_t n, std::vector<unique_fd>& fds,
                 std::size_t fds_expected) {
  auto* p = static_cast<char*>(data);
  std::vector<char> control(CMSG_SPACE((fds_expected ? fds_expected : 1) * sizeof(int)));
  const std::size_t total = n;
  while (n > 0) {
    iovec iov{p, n};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    const ssize_t got = ::recvmsg(socket_fd, &msg, MSG_CMSG_CLOEXEC);
    if (got < 0) {
      if (errno == EINTR) continue;
      sys_fail("recvmsg on the handle's socket");
    }
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < k; ++i) {
        int fd = -1;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        fds.emplace_back(fd);  // owned at once: closed if anything below refuses the message
      }
    }
    if (msg.msg_flags & MSG_CTRUNC)
      throw std::runtime_error(fmt::format(
          "gpumem ipc: receive_handle: more descriptors arrived than the handle announced ({}); "
          "the sender is not send_handle or the stream is out of step", fds_expected));
    if (got == 0)
      throw std::runtime_error(fmt::format(
          "gpumem ipc: receive_handle: the peer closed the socket after {} of {} bytes of a handle",
          total - n, total));
    p += got;
    n -= static_cast<std::size_t>(got);
  }
}

}  // namespace

void validate(const ipc_handle& h, const char* where) {
  switch (h.kind) {
    case ipc_kind::vmm: {
      if (h.bytes == 0) invalid(where, "the block is 0 bytes (an export covers a live block of at least 1 byte)");
      if (h.piece_bytes.empty() || h.piece_bytes.size() > ipc_max_pieces)
        invalid(where, fmt::format("{} physical pieces (a block needs 1 to {})", h.piece_bytes.size(), ipc_max_pieces));
      if (h.fds.size() != h.piece_bytes.size())
        invalid(where, fmt::format("{} descriptors for {} pieces (one descriptor per piece)", h.fds.size(),
                                   h.piece_bytes.size()));
      if (h.piece_ids.size() != h.piece_bytes.size())
        invalid(where, fmt::format("{} piece ids for {} pieces (one id per piece)", h.piece_ids.size(),
                                   h.piece_bytes.size()));
      std::uint64_t total = 0;
      for (std::size_t i = 0; i < h.piece_bytes.size(); ++i) {
        if (h.piece_bytes[i] == 0) invalid(where, fmt::format("piece {} is 0 bytes", i));
        if (total + h.piece_bytes[i] < total) invalid(where, "the pieces' sizes overflow");
        total += h.piece_bytes[i];
        if (h.fds[i].get() < 0 || ::fcntl(h.fds[i].get(), F_GETFD) < 0)
          invalid(where, fmt::format("descriptor {} of piece {} is not open (closed already, or "
                                     "never received)", h.fds[i].get(), i));
      }
      if (h.offset >= total || h.bytes > total - h.offset)
        invalid(where, fmt::format("block of {} B at offset {} does not lie inside its {} B of pieces",
                                   h.bytes, h.offset, total));
      return;
    }
    case ipc_kind::runtime:
      if (h.bytes == 0) invalid(where, "the block is 0 bytes (an export covers a live block of at least 1 byte)");
      if (!h.piece_bytes.empty() || !h.piece_ids.empty() || !h.fds.empty())
        invalid(where, "a cudaIpcMemHandle_t handle carries no pieces or descriptors");
      if (h.offset >= h.runtime_bytes || h.bytes > h.runtime_bytes - h.offset)
        invalid(where, fmt::format("block of {} B at offset {} does not lie inside its {} B segment",
                                   h.bytes, h.offset, h.runtime_bytes));
      return;
    case ipc_kind::none: break;
  }
  invalid(where, fmt::format("kind {} is not an exported block (a default-made or moved-from handle?)",
                             static_cast<int>(h.kind)));
}

void send_handle(int socket_fd, const ipc_handle& h) {
  validate(h, "send_handle");
  check_socket(socket_fd, "send_handle");
  wire_header w{};
  std::memcpy(w.magic, wire_magic, sizeof(w.magic));
  w.version = wire_version;
  w.kind = static_cast<std::uint8_t>(h.kind);
  w.device = h.device;
  w.exporter_pid = h.exporter_pid;
  w.bytes = h.bytes;
  w.offset = h.offset;
  w.pieces = h.piece_bytes.size();
  w.runtime_bytes = h.runtime_bytes;
  w.segment_address = h.segment_address;
  std::memcpy(w.runtime, h.runtime.data(), sizeof(w.runtime));
  send_all(socket_fd, &w, sizeof(w), nullptr, 0);
  if (!h.piece_bytes.empty()) {
    send_all(socket_fd, h.piece_bytes.data(), h.piece_bytes.size() * sizeof(std::uint64_t), nullptr, 0);
    send_all(socket_fd, h.piece_ids.data(), h.piece_ids.size() * sizeof(std::uint64_t), nullptr, 0);
  }
  std::vector<int> raw(fd_batch);
  for (std::size_t at = 0; at < h.fds.size(); at += fd_batch) {
    const std::size_t k = std::min(fd_batch, h.fds.size() - at);
    for (std::size_t i = 0; i < k; ++i) raw[i] = h.fds[at + i].get();
    const char mark = 'F';
    send_all(socket_fd, &mark, 1, raw.data(), k);
  }
}

ipc_handle receive_handle(int socket_fd) {
  check_socket(socket_fd, "receive_handle");
  ipc_handle h;
  std::vector<unique_fd> stray;
  wire_header w{};
  receive_all(socket_fd, &w, sizeof(w), stray, 0);
  if (!stray.empty())
    throw std::runtime_error("gpumem ipc: receive_handle: descriptors arrived with the header "
                             "(the sender is not send_handle); they were closed");
  if (std::memcmp(w.magic, wire_magic, sizeof(w.magic)) != 0 || w.version != wire_version)
    throw std::runtime_error(fmt::format(
        "gpumem ipc: receive_handle: the message is not a gpumem handle of version {} (the peer "
        "sent something else, or the stream is out of step)", wire_version));
  if (w.pieces > ipc_max_pieces)
    invalid("receive_handle", fmt::format("{} pieces announced (at most {})", w.pieces, ipc_max_pieces));
  h.kind = static_cast<ipc_kind>(w.kind);
  h.device = w.device;
  h.exporter_pid = w.exporter_pid;
  h.bytes = w.bytes;
  h.offset = w.offset;
  h.runtime_bytes = w.runtime_bytes;
  h.segment_address = w.segment_address;
  std::memcpy(h.runtime.data(), w.runtime, sizeof(w.runtime));
  h.piece_bytes.resize(w.pieces);
  h.piece_ids.resize(w.pieces);
  if (w.pieces) {
    receive_all(socket_fd, h.piece_bytes.data(), w.pieces * sizeof(std::uint64_t), stray, 0);
    receive_all(socket_fd, h.piece_ids.data(), w.pieces * sizeof(std::uint64_t), stray, 0);
    if (!stray.empty())
      throw std::runtime_error("gpumem ipc: receive_handle: descriptors arrived with the pieces' "
                               "sizes (the sender is not send_handle); they were closed");
  }
  if (h.kind == ipc_kind::vmm) {
    h.fds.reserve(w.pieces);
    for (std::size_t at = 0; at < w.pieces; at += fd_batch) {
      const std::size_t k = std::min<std::size_t>(fd_batch, w.pieces - at);
      const std::size_t before = h.fds.size();
      char mark = 0;
      receive_all(socket_fd, &mark, 1, h.fds, k);
      if (mark != 'F' || h.fds.size() - before != k)
        throw std::runtime_error(fmt::format(
            "gpumem ipc: receive_handle: {} descriptors arrived where {} were announced (pieces "
            "{} to {}); the ones that came were closed", h.fds.size() - before, k, at, at + k - 1));
    }
  }
  validate(h, "receive_handle");
  return h;
}

}  // namespace gpumem
