// SPDX-License-Identifier: Apache-2.0
// A host program of libmodelfs.so (tests/mount/test_library_host.py): it
// has its own global operator new and delete, which count their calls, and
// installs nothing for SIGBUS. It opens a model through the public API,
// prints its tensors' bytes as the catalog maps them and each .npy as the
// tree serves it, then what the library left of the process: whether its
// operator new was the one called, SIGBUS's disposition, a read of the model
// after it was cut to nothing, and how a fork() went.
//   host MODEL [URL]
// With URL (a remote model behind a slow server), a second thread reads
// the remote model's bytes while the main thread forks.
#include <signal.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>
#include <thread>

#include <modelfs/catalog.hpp>
#include <modelfs/error.hpp>
#include <modelfs/formats.hpp>
#include <modelfs/tree.hpp>

namespace {
std::atomic<unsigned long> host_news{0};

void* take(std::size_t n, std::size_t alignment) {
  ++host_news;
  void* p = nullptr;
  if (n == 0) n = 1;
  if (alignment <= alignof(std::max_align_t))
    p = std::malloc(n);
  else if (posix_memalign(&p, alignment, n) != 0)
    p = nullptr;
  return p;
}
}  // namespace

void* operator new(std::size_t n) {
  if (void* p = take(n, 0)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void* operator new(std::size_t n, std::align_val_t a) {
  if (void* p = take(n, static_cast<std::size_t>(a))) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n, std::align_val_t a) { return ::operator new(n, a); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return take(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return take(n, 0); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

namespace {

std::string hex(const void* data, std::size_t size) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

// Every .npy of the tree, read with one iovec: the library copies what
// does not fit (its guarded copy of mapped bytes).
void print_npys(const modelfs::Tree& tree) {
  std::string path;
  for (uint64_t ino = modelfs::Tree::kRootIno; ino <= tree.node_count(); ++ino) {
    const modelfs::Node* node = tree.node(ino);
    if (node == nullptr || node->role != modelfs::FileRole::NpyView) continue;
    std::array<iovec, 1> iov{};
    std::string scratch;
    const std::size_t count = tree.read(*node, 0, node->size, iov, scratch);
    std::string bytes;
    for (std::size_t i = 0; i < count; ++i)
      bytes.append(static_cast<const char*>(iov[i].iov_base), iov[i].iov_len);
    path.clear();
    tree.path(ino, path);
    std::printf("npy %s %s\n", path.c_str(), hex(bytes.data(), bytes.size()).c_str());
  }
}

// A read of the first tensor file after the model was cut to nothing.
void print_read_after_truncation(const modelfs::Tree& tree, const char* model) {
  if (::truncate(model, 0) != 0) {
    std::printf("truncate failed\n");
    return;
  }
  for (uint64_t ino = modelfs::Tree::kRootIno; ino <= tree.node_count(); ++ino) {
    const modelfs::Node* node = tree.node(ino);
    if (node == nullptr || node->role != modelfs::FileRole::TensorData || node->size == 0) continue;
    try {
      (void)tree.content(*node);
      std::printf("truncated read served\n");
    } catch (const modelfs::ModelError& e) {
      std::printf("truncated read refused: %s\n", e.what());
    }
    return;
  }
}

// fork() while whatever the library runs goes on: how long it took, and
// how the child, which exits through exit() (the library's exit-time work,
// if any, runs there), ended.
void print_fork() {
  std::fflush(stdout);  // or the child's exit() prints it again
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) std::exit(0);
  const auto took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int status = 0;
  bool ended = false;
  for (int i = 0; i < 1000 && !ended; ++i) {
    ended = ::waitpid(pid, &status, WNOHANG) == pid;
    if (!ended) ::usleep(10000);
  }
  if (!ended) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  std::printf("fork seconds %.3f child %s %d\n", took,
              !ended              ? "hung"
              : WIFEXITED(status) ? "exited"
                                  : "signalled",
              !ended              ? 0
              : WIFEXITED(status) ? WEXITSTATUS(status)
                                  : WTERMSIG(status));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::fprintf(stderr, "usage: host MODEL [URL]\n");
    return 1;
  }
  try {
    const unsigned long before = host_news.load();
    modelfs::Catalog catalog = modelfs::open_model(argv[1]);
    for (const modelfs::Tensor& tensor : catalog.tensors()) {
      const auto bytes = tensor.bytes.span();
      std::printf("tensor %s %s\n", std::string(tensor.name).c_str(),
                  hex(bytes.data(), bytes.size()).c_str());
    }
    const auto tree = modelfs::Tree::build(std::move(catalog), modelfs::TreeOptions{});
    print_npys(*tree);
    std::printf("host operator new calls %lu\n", host_news.load() - before);
    print_read_after_truncation(*tree, argv[1]);

    std::thread reader;
    std::atomic<bool> reading{false};
    std::unique_ptr<const modelfs::Tree> remote;
    if (argc == 3) {
      remote = modelfs::Tree::build(modelfs::open_model(argv[2]), modelfs::TreeOptions{});
      // Reads every tensor's bytes, each a fetch from the slow server.
      reader = std::thread([&] {
        reading = true;
        unsigned long sum = 0;
        for (const modelfs::Tensor& tensor : remote->tensors())
          for (std::byte b : tensor.bytes.span()) sum += static_cast<unsigned char>(b);
        std::printf("remote bytes sum %lu\n", sum);
      });
      while (!reading) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its fetch under way
    }
    print_fork();
    if (reader.joinable()) reader.join();

    struct sigaction action {};
    sigaction(SIGBUS, nullptr, &action);
    const bool untouched = (action.sa_flags & SA_SIGINFO) == 0 && action.sa_handler == SIG_DFL;
    std::printf("SIGBUS %s\n", untouched ? "SIG_DFL" : "changed");
  } catch (const modelfs::ModelError& e) {
    std::fprintf(stderr, "host: %s\n", e.what());
    return 2;
  }
  std::fflush(stdout);
  return 0;
}
