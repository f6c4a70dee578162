// SPDX-License-Identifier: Apache-2.0
#include "cli/sigbus_guard.hpp"

#include <setjmp.h>
#include <signal.h>

#include <atomic>
#include <optional>

#include "io/mapped_bytes.hpp"
#include "modelfs/error.hpp"

namespace modelfs::cli {
namespace {

// The innermost guard of this thread, or null. Read by the signal handler:
// initial-exec, so reaching it there calls nothing.
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

void run_under_guard(void (*body)(void*), void* context) {
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

}  // namespace

void install_sigbus_guard() {
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
  // A refusal leaves faults to the handler there was, and reads unguarded.
  if (installed) set_mapped_read_guard(run_under_guard);
}

}  // namespace modelfs::cli
