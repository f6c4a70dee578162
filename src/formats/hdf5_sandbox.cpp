// SPDX-License-Identifier: Apache-2.0
#include "formats/hdf5_sandbox.hpp"

#include <fcntl.h>
#include <linux/filter.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <vector>

#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/terminal_text.hpp"
#include "modelfs/error.hpp"

namespace modelfs::hdf5 {
namespace {

constexpr std::string_view kFormat = "hdf5";
// The child's socket, at a fixed number so the seccomp filter, built in
// the parent, can name it.
constexpr int kChildSocket = 3;
// Address space the child may reserve beyond what it may use (a malloc
// arena reserves 64 MiB at a time, twice that while aligning it).
constexpr uint64_t kReservedBytes = uint64_t{512} << 20;
// (gcc says AddressSanitizer is on with __SANITIZE_ADDRESS__, older clang
// only through __has_feature.)
#if defined(__SANITIZE_ADDRESS__)
#define MODELFS_HDF5_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MODELFS_HDF5_ASAN 1
#endif
#endif
#if defined(MODELFS_HDF5_ASAN)
// AddressSanitizer keeps freed memory in a quarantine (256 MiB by default)
// and pads every allocation with redzones: a walk of 20 000 datasets that
// takes 35 MiB needs some 400 MiB under it, so a sanitized build gives the
// child 1 GiB more (its allocator then ends the child where malloc would
// fail).
constexpr uint64_t kSanitizerBytes = uint64_t{1} << 30;
#else
constexpr uint64_t kSanitizerBytes = 0;
#endif

[[noreturn]] void fail(const std::string& display, const std::string& reason) {
  throw ModelError(display, std::string(kFormat), std::nullopt, reason);
}

// The seccomp program as BPF, built in the parent (libseccomp allocates),
// so the child only hands it to the kernel.
struct Filter {
  std::vector<sock_filter> code;
  sock_fprog program() { return {static_cast<unsigned short>(code.size()), code.data()}; }
};

Filter build_filter(const std::string& display) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_KILL_PROCESS);
  if (ctx == nullptr) fail(display, "cannot build the sandbox's seccomp filter");
  std::unique_ptr<void, void (*)(void*)> guard(ctx, [](void* c) { seccomp_release(c); });
  bool ok = true;
  // Its socket only: every other descriptor is closed anyway.
  for (const int call : {SCMP_SYS(read), SCMP_SYS(write), SCMP_SYS(recvfrom), SCMP_SYS(sendto),
                         SCMP_SYS(recvmsg), SCMP_SYS(sendmsg)})
    ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ALLOW, call, 1, SCMP_A0(SCMP_CMP_EQ, kChildSocket)) == 0;
  // Memory, waiting on its own futexes, time, and ending.
  for (const int call : {SCMP_SYS(brk), SCMP_SYS(mmap), SCMP_SYS(munmap), SCMP_SYS(mremap), SCMP_SYS(madvise),
                         SCMP_SYS(mprotect), SCMP_SYS(futex), SCMP_SYS(clock_gettime), SCMP_SYS(gettimeofday),
                         SCMP_SYS(getpid), SCMP_SYS(rt_sigreturn), SCMP_SYS(exit), SCMP_SYS(exit_group)})
    ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ALLOW, call, 0) == 0;
  // libhdf5 sleeps between its tries at reading metadata whose checksum
  // does not match (then says so): sleeping is harmless, the deadline
  // bounds it.
  for (const int call : {SCMP_SYS(nanosleep), SCMP_SYS(clock_nanosleep)})
    ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ALLOW, call, 0) == 0;
  // libhdf5 asks for the working directory when it opens a file (to
  // resolve external links later, which the walk never follows): it is
  // told there is none to see, rather than killed for asking.
  ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EACCES), SCMP_SYS(getcwd), 0) == 0;
  // glibc's qsort asks how much memory the machine has before sorting a
  // large array (libhdf5 sorts a group's links): it copes with not knowing.
  ok = ok && seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(sysinfo), 0) == 0;
  if (!ok) fail(display, "cannot build the sandbox's seccomp filter");
  const int fd = memfd_create("modelfs-seccomp", MFD_CLOEXEC);
  if (fd < 0)
    fail(display, std::string("cannot build the sandbox's seccomp filter: ") + std::strerror(errno));
  Filter filter;
  const bool exported = seccomp_export_bpf(ctx, fd) == 0;
  const off_t size = lseek(fd, 0, SEEK_END);
  if (exported && size > 0 && size % sizeof(sock_filter) == 0) {
    filter.code.resize(static_cast<size_t>(size) / sizeof(sock_filter));
    if (pread(fd, filter.code.data(), static_cast<size_t>(size), 0) != size) filter.code.clear();
  }
  close(fd);
  if (filter.code.empty()) fail(display, "cannot build the sandbox's seccomp filter");
  return filter;
}

// The process's memory now, which the child inherits: its whole address
// space, and its data (what RLIMIT_DATA counts: heap and private writable
// mappings; statm's "data" adds the stack, a few pages).
struct Footprint {
  uint64_t address_space = uint64_t{64} << 30;
  uint64_t data = uint64_t{64} << 30;
};
Footprint footprint() {
  Footprint out;
  const int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  char text[256] = {};
  const ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n <= 0) return out;
  // size resident shared text lib data dt, in pages
  // Parsed by hand: the child calls this before its filter, where only
  // async-signal-safe calls are made.
  uint64_t fields[7] = {};
  const char* at = text;
  for (uint64_t& field : fields) {
    while (*at == ' ') ++at;
    for (; *at >= '0' && *at <= '9'; ++at) field = field * 10 + static_cast<uint64_t>(*at - '0');
  }
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (fields[0] == 0 || fields[5] == 0) return out;
  return {fields[0] * page, fields[5] * page};
}

// Only async-signal-safe calls until the filter is in place (the header
// says why).
[[noreturn]] void child_main(int socket, pid_t parent, sock_fprog program, const SandboxLimits& limits,
                             ChildBody body, uint64_t length) {
  // Measured here, not in the parent before the fork: another thread of
  // the parent may unmap memory in between (a freed buffer), and the limits
  // below would then allow the child that much more.
  const Footprint inherited = footprint();
  if (socket != kChildSocket && dup2(socket, kChildSocket) != kChildSocket) _exit(120);
  for (int fd = 0; fd < kChildSocket; ++fd) close(fd);
  if (close_range(kChildSocket + 1, ~0U, 0) != 0) _exit(121);
  // Never above a limit the parent was given (raising a hard limit needs
  // privileges the child must not rely on).
  const auto limit = [](int resource, rlim_t soft, rlim_t hard) {
    rlimit value{};
    if (getrlimit(resource, &value) != 0) _exit(122);
    if (value.rlim_max != RLIM_INFINITY) {
      hard = hard < value.rlim_max ? hard : value.rlim_max;
      soft = soft < hard ? soft : hard;
    }
    value = {soft, hard};
    if (setrlimit(resource, &value) != 0) _exit(122);
  };
  // What it may allocate is counted as data; its address space may pass
  // that by what malloc reserves and never touches.
  const rlim_t data = inherited.data + limits.memory_bytes + kSanitizerBytes;
  const rlim_t address_space =
      inherited.address_space + limits.memory_bytes + kSanitizerBytes + kReservedBytes;
  limit(RLIMIT_DATA, data, data);
  limit(RLIMIT_AS, address_space, address_space);
  limit(RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1);
  limit(RLIMIT_FSIZE, 0, 0);
  limit(RLIMIT_CORE, 0, 0);
  limit(RLIMIT_NOFILE, kChildSocket + 1, kChildSocket + 1);
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(123);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(124);
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) _exit(125);
  _exit(body(kChildSocket, length));
}

// Kills and reaps the child unless it was reaped.
struct Child {
  pid_t pid = -1;
  int status = 0;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      reap();
    }
  }
  void reap() {
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    pid = -1;
  }
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

std::string ended(int status, const SandboxLimits& limits) {
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGXCPU)
    return "the HDF5 library failed on it: it took more than its " + std::to_string(limits.cpu_seconds) +
           " s of CPU time";
  if (WIFSIGNALED(status) && WTERMSIG(status) == SIGSYS)
    return "the HDF5 library failed on it: it made a system call its sandbox forbids (killed by signal " +
           std::to_string(SIGSYS) + ")";
  if (WIFSIGNALED(status))
    return "the HDF5 library failed on it (killed by signal " + std::to_string(WTERMSIG(status)) + ")";
  return "the HDF5 library failed on it (its process ended with status " +
         std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
}

}  // namespace

bool send_packet(int socket, Packet kind, const void* payload, uint64_t size) {
  if (size + 1 > kMaxPacket) return false;
  unsigned char head = static_cast<unsigned char>(kind);
  iovec parts[2] = {{&head, 1}, {const_cast<void*>(payload), static_cast<size_t>(size)}};
  msghdr message{};
  message.msg_iov = parts;
  message.msg_iovlen = size == 0 ? 1 : 2;
  for (;;) {
    const ssize_t sent = sendmsg(socket, &message, MSG_NOSIGNAL);
    if (sent >= 0) return static_cast<uint64_t>(sent) == size + 1;
    if (errno != EINTR) return false;
  }
}

bool read_through_parent(int socket, uint64_t offset, uint64_t size, void* out) {
  auto* to = static_cast<unsigned char*>(out);
  while (size > 0) {
    const uint64_t n = size < kMaxReadChunk ? size : kMaxReadChunk;
    const uint64_t request[2] = {offset, n};
    if (!send_packet(socket, Packet::Read, request, sizeof request)) return false;
    unsigned char status = 1;
    iovec parts[2] = {{&status, 1}, {to, static_cast<size_t>(n)}};
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = 2;
    ssize_t got;
    do {
      got = recvmsg(socket, &message, 0);
    } while (got < 0 && errno == EINTR);
    if (got != static_cast<ssize_t>(n + 1) || status != 0) return false;
    to += n;
    offset += n;
    size -= n;
  }
  return true;
}

std::string run_sandboxed(const MappedFile& file, uint64_t base, uint64_t length, const std::string& display,
                          ChildBody body, const SandboxLimits& limits) {
  if (base > file.size() || length > file.size() - base) fail(display, "the HDF5 bytes run past the file");
  Filter filter = build_filter(display);
  const sock_fprog program = filter.program();
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    fail(display, std::string("cannot start the HDF5 process: ") + std::strerror(errno));
  Fd parent_end{pair[0]};
  Child child;
  const pid_t parent = getpid();
  child.pid = fork();
  if (child.pid < 0) {
    close(pair[1]);
    fail(display, std::string("cannot start the HDF5 process: ") + std::strerror(errno));
  }
  if (child.pid == 0) child_main(pair[1], parent, program, limits, body, length);
  close(pair[1]);

  using Clock = std::chrono::steady_clock;
  auto deadline = Clock::now() + std::chrono::milliseconds(limits.deadline_ms);
  std::string records;
  uint64_t record_bytes = 0;
  std::string packet(kMaxPacket + 1, '\0');
  std::string reply;
  for (;;) {
    check_budget();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0)
      fail(display, "the HDF5 library took more than " + std::to_string(limits.deadline_ms / 1000) +
                        " s on it (its process was killed)");
    pollfd waiting{parent_end.fd, POLLIN, 0};
    const int ready = poll(&waiting, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t got = recv(parent_end.fd, packet.data(), packet.size(), MSG_TRUNC);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      kill(child.pid, SIGKILL);  // it closed its socket: it is ending, or made to
      child.reap();
      fail(display, ended(child.status, limits));
    }
    if (static_cast<uint64_t>(got) > kMaxPacket) fail(display, "the HDF5 process sent an oversized packet");
    const auto kind = static_cast<Packet>(packet[0]);
    const std::string_view payload(packet.data() + 1, static_cast<size_t>(got) - 1);
    switch (kind) {
      case Packet::Read: {
        if (payload.size() != 16) fail(display, "the HDF5 process sent a malformed read request");
        const auto request = std::as_bytes(std::span(packet));
        const auto offset = load_le<uint64_t>(request, 1), size = load_le<uint64_t>(request, 9);
        reply.assign(1, '\1');
        if (size <= kMaxReadChunk && offset <= length && size <= length - offset) {
          const auto started = Clock::now();
          const auto bytes = file.read(base + offset, size);  // fetches a remote model's blocks
          deadline += Clock::now() - started;
          reply[0] = '\0';
          reply.append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        }
        if (send(parent_end.fd, reply.data(), reply.size(), MSG_NOSIGNAL) !=
            static_cast<ssize_t>(reply.size())) {
          kill(child.pid, SIGKILL);
          child.reap();
          fail(display, ended(child.status, limits));
        }
        break;
      }
      case Packet::Record:
        record_bytes += payload.size();
        if (record_bytes > limits.max_record_bytes)
          fail(display, "the HDF5 file describes more than " + std::to_string(limits.max_record_bytes >> 20) +
                            " MiB of datasets");
        records.append(payload);
        break;
      case Packet::End:
        return records;  // the child is killed and reaped on the way out
      case Packet::Failure:
        fail(display, "libhdf5 refused it: " + printable(payload.substr(0, 512)));
      case Packet::OutOfMemory:
        fail(display, "libhdf5 needed more than the " + std::to_string(limits.memory_bytes >> 20) +
                          " MiB it may use (what the model's memory budget has left, and a margin for the "
                          "library; raise the budget with -o max_parse_mb=N): " +
                          printable(payload.substr(0, 512)));
      default:
        fail(display, "the HDF5 process sent an unknown packet");
    }
  }
}

}  // namespace modelfs::hdf5
