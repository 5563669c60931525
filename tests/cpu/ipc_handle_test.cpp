// The IPC handle's passage between processes without a GPU: descriptors of ordinary memory files
// (memfd) sent with SCM_RIGHTS over a socketpair arrive as descriptors of the same files, in
// order, across batches and across a fork; malformed handles, wrong sockets and broken streams are
// refused with the reason; no descriptor is left open on any path.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <thread>

#include "gpumem/ipc_handle.hpp"

namespace {

using namespace gpumem;

int open_fds() {
  int n = 0;
  if (DIR* d = ::opendir("/proc/self/fd")) {
    while (::readdir(d)) ++n;
    ::closedir(d);
  }
  return n;
}

struct socket_pair {
  int a = -1, b = -1;
  socket_pair() {
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0) {
      a = sv[0];
      b = sv[1];
    }
  }
  ~socket_pair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
};

// A memory file holding `tag` in its first bytes, standing in for an exported physical piece.
unique_fd piece(std::uint64_t tag) {
  unique_fd fd(::memfd_create("gpumem-ipc-test", MFD_CLOEXEC));
  EXPECT_GE(fd.get(), 0);
  EXPECT_EQ(::pwrite(fd.get(), &tag, sizeof(tag), 0), static_cast<ssize_t>(sizeof(tag)));
  return fd;
}

std::uint64_t tag_of(int fd) {
  std::uint64_t tag = 0;
  EXPECT_EQ(::pread(fd, &tag, sizeof(tag), 0), static_cast<ssize_t>(sizeof(tag)));
  return tag;
}

ipc_handle vmm_handle(std::size_t pieces, std::uint64_t first_tag = 100) {
  ipc_handle h;
  h.kind = ipc_kind::vmm;
  h.device = 0;
  h.exporter_pid = static_cast<std::uint32_t>(::getpid());
  h.bytes = 3000;
  h.offset = 4096;
  for (std::size_t i = 0; i < pieces; ++i) {
    h.piece_bytes.push_back(2u << 20);
    h.piece_ids.push_back(0x1000 + i);
    h.fds.push_back(piece(first_tag + i));
  }
  return h;
}

void expect_invalid(const ipc_handle& h, const std::string& words) {
  try {
    validate(h, "test");
    FAIL() << "accepted a handle that should be refused for: " << words;
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("gpumem ipc: test:"), std::string::npos) << what;
    EXPECT_NE(what.find(words), std::string::npos) << what;
  }
}

TEST(IpcHandle, DescriptorsArriveAsTheSameFilesInOrder) {
  const int before = open_fds();
  {
    socket_pair sp;
    ASSERT_GE(sp.a, 0);
    // 300 pieces: two batches of descriptors (a message carries at most 250), and few enough that
    // both ends' descriptors stay under the usual limit of 1024 open files.
    const ipc_handle sent = vmm_handle(300);
    std::thread sender([&] { send_handle(sp.a, sent); });
    const ipc_handle got = receive_handle(sp.b);
    sender.join();
    EXPECT_EQ(got.kind, ipc_kind::vmm);
    EXPECT_EQ(got.bytes, sent.bytes);
    EXPECT_EQ(got.offset, sent.offset);
    EXPECT_EQ(got.exporter_pid, sent.exporter_pid);
    EXPECT_EQ(got.piece_bytes, sent.piece_bytes);
    EXPECT_EQ(got.piece_ids, sent.piece_ids);
    ASSERT_EQ(got.fds.size(), sent.fds.size());
    for (std::size_t i = 0; i < got.fds.size(); ++i) {
      EXPECT_NE(got.fds[i].get(), sent.fds[i].get()) << "the receiver got the sender's own number";
      EXPECT_EQ(tag_of(got.fds[i].get()), 100 + i) << "piece " << i;
      EXPECT_TRUE(::fcntl(got.fds[i].get(), F_GETFD) & FD_CLOEXEC) << "received descriptors must not leak into exec";
    }
  }
  EXPECT_EQ(open_fds(), before) << "descriptors leaked";
}

TEST(IpcHandle, RuntimeHandleKeepsItsBytes) {
  socket_pair sp;
  ipc_handle h;
  h.kind = ipc_kind::runtime;
  h.bytes = 1000;
  h.offset = 512;
  h.runtime_bytes = 2u << 20;
  h.segment_address = 0x7f0000200000;
  for (std::size_t i = 0; i < h.runtime.size(); ++i) h.runtime[i] = static_cast<std::uint8_t>(i * 7);
  send_handle(sp.a, h);
  const ipc_handle got = receive_handle(sp.b);
  EXPECT_EQ(got.kind, ipc_kind::runtime);
  EXPECT_EQ(got.runtime, h.runtime);
  EXPECT_EQ(got.segment_address, h.segment_address);
  EXPECT_EQ(got.runtime_bytes, h.runtime_bytes);
  EXPECT_TRUE(got.fds.empty());
}

TEST(IpcHandle, CrossesAForkAndComesBack) {
  socket_pair sp;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child receives, checks the files, writes its answer into each, and sends them back.
    int rc = 0;
    try {
      ipc_handle h = receive_handle(sp.b);
      for (std::size_t i = 0; i < h.fds.size(); ++i) {
        std::uint64_t tag = 0;
        if (::pread(h.fds[i].get(), &tag, sizeof(tag), 0) != sizeof(tag) || tag != 500 + i) rc = 2;
        const std::uint64_t answer = tag * 3;
        if (::pwrite(h.fds[i].get(), &answer, sizeof(answer), 8) != sizeof(answer)) rc = 3;
      }
      send_handle(sp.b, h);
    } catch (...) {
      rc = 4;
    }
    ::_exit(rc);
  }
  const ipc_handle h = vmm_handle(5, 500);
  send_handle(sp.a, h);
  const ipc_handle back = receive_handle(sp.a);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (std::size_t i = 0; i < back.fds.size(); ++i) {
    std::uint64_t answer = 0;
    ASSERT_EQ(::pread(h.fds[i].get(), &answer, sizeof(answer), 8), static_cast<ssize_t>(sizeof(answer)));
    EXPECT_EQ(answer, (500 + i) * 3) << "the child wrote into the same file the parent holds";
  }
}

TEST(IpcHandle, MalformedHandlesAreRefusedWithTheReason) {
  expect_invalid(ipc_handle{}, "not an exported block");
  {
    ipc_handle h = vmm_handle(2);
    h.bytes = 0;
    expect_invalid(h, "0 bytes");
  }
  {
    ipc_handle h = vmm_handle(2);
    h.fds.pop_back();
    expect_invalid(h, "1 descriptors for 2 pieces");
  }
  {
    ipc_handle h = vmm_handle(2);
    h.offset = 4u << 20;
    expect_invalid(h, "does not lie inside");
  }
  {
    ipc_handle h = vmm_handle(2);
    h.piece_ids.pop_back();
    expect_invalid(h, "1 piece ids for 2 pieces");
  }
  {
    ipc_handle h = vmm_handle(2);
    h.piece_bytes[1] = 0;
    expect_invalid(h, "piece 1 is 0 bytes");
  }
  {
    ipc_handle h = vmm_handle(2);
    h.fds[1].reset();
    expect_invalid(h, "not open");
  }
  {
    ipc_handle h;
    h.kind = ipc_kind::vmm;
    h.bytes = 10;
    expect_invalid(h, "0 physical pieces");
  }
  {
    ipc_handle h;
    h.kind = ipc_kind::runtime;
    h.bytes = 10;
    h.offset = 100;
    h.runtime_bytes = 64;
    expect_invalid(h, "does not lie inside its 64 B segment");
  }
  {
    ipc_handle h;
    h.kind = static_cast<ipc_kind>(9);
    h.bytes = 10;
    expect_invalid(h, "kind 9");
  }
  // send_handle checks before anything goes out.
  socket_pair sp;
  ipc_handle bad = vmm_handle(1);
  bad.bytes = 0;
  EXPECT_THROW(send_handle(sp.a, bad), std::invalid_argument);
}

TEST(IpcHandle, OnlyUnixStreamSocketsCarryHandles) {
  const ipc_handle h = vmm_handle(1);
  const unique_fd file = piece(1);
  try {
    send_handle(file.get(), h);
    FAIL() << "a memory file was taken for a socket";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("is not a socket"), std::string::npos) << e.what();
  }
  const unique_fd udp(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ASSERT_GE(udp.get(), 0);
  try {
    send_handle(udp.get(), h);
    FAIL() << "an internet socket was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("not an AF_UNIX stream socket"), std::string::npos) << e.what();
  }
  EXPECT_THROW(receive_handle(udp.get()), std::invalid_argument);
}

TEST(IpcHandle, BrokenStreamsAreRefusedAndLeakNothing) {
  const int before = open_fds();
  {
    // Not a handle at all.
    socket_pair sp;
    const char junk[200] = "hello, not a handle";
    ASSERT_EQ(::write(sp.a, junk, sizeof(junk)), static_cast<ssize_t>(sizeof(junk)));
    try {
      (void)receive_handle(sp.b);
      FAIL() << "junk was taken for a handle";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("not a gpumem handle"), std::string::npos) << e.what();
    }
  }
  {
    // The peer goes away in the middle of a handle.
    socket_pair sp;
    const ipc_handle h = vmm_handle(3);
    send_handle(sp.a, h);
    // Read the header and sizes the way receive_handle would, then drop the rest: simpler, close
    // the sender after a truncated copy of the stream.
    socket_pair relay;
    char buf[4096];
    const ssize_t n = ::read(sp.b, buf, 40);  // part of the header only
    ASSERT_EQ(n, 40);
    ASSERT_EQ(::write(relay.a, buf, static_cast<std::size_t>(n)), n);
    ::close(relay.a);
    relay.a = -1;
    try {
      (void)receive_handle(relay.b);
      FAIL() << "a truncated handle was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("closed the socket after 40 of"), std::string::npos) << e.what();
    }
  }
  {
    // A header that announces descriptors that never come.
    socket_pair sp;
    const ipc_handle h = vmm_handle(2);
    std::thread sender([&] { send_handle(sp.a, h); });
    char header_and_sizes[4096];
    sender.join();
    // Forward everything but the descriptors' messages: the header and the sizes only.
    const ssize_t n = ::recv(sp.b, header_and_sizes, sizeof(header_and_sizes), 0);
    ASSERT_GT(n, 0);
    socket_pair relay;
    ASSERT_EQ(::write(relay.a, header_and_sizes, static_cast<std::size_t>(n)), n);
    const char mark = 'F';
    ASSERT_EQ(::write(relay.a, &mark, 1), 1);  // the batch's byte, without its descriptors
    EXPECT_THROW((void)receive_handle(relay.b), std::runtime_error);
  }
  EXPECT_EQ(open_fds(), before) << "a refused handle left descriptors open";
}

}  // namespace
