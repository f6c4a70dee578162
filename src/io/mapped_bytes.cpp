// SPDX-License-Identifier: Apache-2.0
#include "io/mapped_bytes.hpp"

#include <atomic>
#include <cstring>

namespace modelfs {
namespace {

// Set once by the program before it reads a model; read by every guarded
// copy.
std::atomic<MappedReadGuard> program_guard{nullptr};

}  // namespace

void set_mapped_read_guard(MappedReadGuard guard) noexcept {
  program_guard.store(guard, std::memory_order_release);
}

void run_guarded(void (*body)(void*), void* context) {
  if (const MappedReadGuard guard = program_guard.load(std::memory_order_acquire); guard != nullptr)
    guard(body, context);
  else
    body(context);
}

void copy_mapped(void* to, const void* from, size_t size) {
  read_mapped([&] { std::memcpy(to, from, size); });
}

}  // namespace modelfs
