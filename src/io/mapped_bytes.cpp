// SPDX-License-Identifier: Apache-2.0
#include "modelfs/mapped_bytes.hpp"

#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>

#include "modelfs/error.hpp"

namespace modelfs {
namespace {

// The innermost guard of this thread, or null. Read by the signal handler:
// initial-exec, so reaching it there calls nothing (a shared library's
// thread-locals are otherwise found through a call that may allocate).
[[gnu::tls_model("initial-exec")]] thread_local sigjmp_buf* current_guard = nullptr;

// The SIGBUS action before ours, for faults outside a guard. Written once,
// before our handler can run.
struct sigaction previous_action {};

void on_sigbus(int signal, siginfo_t* info, void* context) {
  if (sigjmp_buf* guard = current_guard; guard != nullptr) siglongjmp(*guard, 1);
  const auto handler = previous_action.sa_handler;
  if (handler != SIG_DFL && handler != SIG_IGN) {
    if (previous_action.sa_flags & SA_SIGINFO)
      previous_action.sa_sigaction(signal, info, context);
    else
      handler(signal);
    return;
  }
  // The default action: a fault returns to its instruction, faults again
  // and kills the process; a signal sent with kill() is sent again.
  struct sigaction fallback {};
  fallback.sa_handler = SIG_DFL;
  sigemptyset(&fallback.sa_mask);
  sigaction(SIGBUS, &fallback, nullptr);
  if (info->si_code <= 0) raise(signal);
}

void install_handler() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    // SA_NODEFER: the handler leaves by a jump, and SIGBUS must not stay
    // blocked after it; with it, the guard need not save and restore the
    // signal mask (a system call per guard).
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    return sigaction(SIGBUS, &action, &previous_action) == 0;
  }();
  (void)installed;  // a refusal leaves faults to the handler there was
}

}  // namespace

void run_guarded(void (*body)(void*), void* context) {
  install_handler();
  sigjmp_buf guard;
  sigjmp_buf* const outer = current_guard;
  if (sigsetjmp(guard, 0) != 0) {
    current_guard = outer;
    throw ModelError(
        "the model's mapping", "file", std::nullopt,
        "a read of it faulted (SIGBUS): the model file shrank, or its storage failed, under the mount");
  }
  current_guard = &guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  try {
    body(context);
  } catch (...) {
    current_guard = outer;
    throw;
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  current_guard = outer;
}

void copy_mapped(void* to, const void* from, size_t size) {
  read_mapped([&] { std::memcpy(to, from, size); });
}

namespace {
// This thread's ServedRead scopes, and the file last sized in them.
thread_local int served_reads = 0;
thread_local const void* sized_file = nullptr;
thread_local uint64_t sized_bytes = 0;
}  // namespace

ServedRead::ServedRead() { ++served_reads; }

ServedRead::~ServedRead() {
  if (--served_reads == 0) sized_file = nullptr;  // the next read sizes afresh
}

uint64_t served_size(const void* file, int fd, uint64_t mapped) {
  if (served_reads == 0 || fd < 0) return mapped;
  if (file != sized_file) {
    struct stat st {};
    sized_bytes = ::fstat(fd, &st) == 0 ? std::min<uint64_t>(static_cast<uint64_t>(st.st_size), mapped) : 0;
    sized_file = file;
  }
  return sized_bytes;
}

}  // namespace modelfs
