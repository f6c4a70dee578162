// SPDX-License-Identifier: Apache-2.0
// The global allocation operators, charging the thread's current budget
// (budget.hpp): every allocation made while a model is read is paid for
// before it is made, whoever makes it (our containers, nlohmann::json, the
// standard library's own), and every free gives its bytes back. Outside a
// budget they are malloc and free.
//
// Compiled into each of this project's programs (the modelfs executable,
// the unit tests, the fuzzers), never into libmodelfs.so: a library must
// not replace a host program's allocator. A program's own definition is
// the one the dynamic linker binds for the whole process, ahead of a
// sanitizer runtime's.
#include <malloc.h>

#include <cstdlib>
#include <new>

#include "io/budget_charge.hpp"

namespace {

// The bytes malloc really set aside for `p`, what is charged and given
// back: the usable bytes and the size word before them (glibc's chunk
// header). Left out, the header was a third of a 24-byte allocation, and a
// model of a million small values held a sixth more than its budget said.
constexpr std::size_t kChunkHeader = sizeof(std::size_t);
inline std::size_t usable(void* p) noexcept { return p ? malloc_usable_size(p) + kChunkHeader : 0; }

void* take(std::size_t n, std::size_t alignment) {
  modelfs::Budget* budget = modelfs::current_budget();
  if (n == 0) n = 1;
  if (budget) budget->allocate(n);  // BudgetExceeded before anything is taken
  void* p = nullptr;
  if (alignment <= alignof(std::max_align_t))
    p = std::malloc(n);
  else if (posix_memalign(&p, alignment, n) != 0)
    p = nullptr;
  if (!p) {
    if (budget) budget->release(n);
    throw std::bad_alloc();
  }
  // A free gives back what malloc set aside, a few bytes more than asked.
  if (budget) budget->settle(n, usable(p));
  return p;
}

void* take_nothrow(std::size_t n, std::size_t alignment) noexcept {
  try {
    return take(n, alignment);
  } catch (...) {
    return nullptr;
  }
}

void give(void* p) noexcept {
  if (!p) return;
  if (modelfs::Budget* budget = modelfs::current_budget()) budget->release(usable(p));
  std::free(p);
}

}  // namespace

// Exported whatever the build's default, so that the shared libraries of
// the process (libstdc++'s own allocations among them) bind these too.
#pragma GCC visibility push(default)

void* operator new(std::size_t n) { return take(n, 0); }
void* operator new[](std::size_t n) { return take(n, 0); }
void* operator new(std::size_t n, std::align_val_t a) { return take(n, static_cast<std::size_t>(a)); }
void* operator new[](std::size_t n, std::align_val_t a) { return take(n, static_cast<std::size_t>(a)); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return take_nothrow(n, 0); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return take_nothrow(n, 0); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return take_nothrow(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return take_nothrow(n, static_cast<std::size_t>(a));
}

void operator delete(void* p) noexcept { give(p); }
void operator delete[](void* p) noexcept { give(p); }
void operator delete(void* p, std::size_t) noexcept { give(p); }
void operator delete[](void* p, std::size_t) noexcept { give(p); }
void operator delete(void* p, std::align_val_t) noexcept { give(p); }
void operator delete[](void* p, std::align_val_t) noexcept { give(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { give(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { give(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { give(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { give(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { give(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { give(p); }

#pragma GCC visibility pop
