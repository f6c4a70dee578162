// SPDX-License-Identifier: Apache-2.0
#include "io/mapped_bytes.hpp"

#include <sys/stat.h>

#include <algorithm>
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
