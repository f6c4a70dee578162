// SPDX-License-Identifier: Apache-2.0
#pragma once
// The budget of one model: how much memory reading it may take, whatever
// its bytes say. A small file must not make modelfs allocate gigabytes (a
// deflated member of zeros, a pickle copying one value into another, a
// metadata array of a billion one-byte items), so what reading a model
// and building its tree hold at once is bounded.
//
// The limit follows the model's metadata: 64 MiB plus 8 bytes per byte of
// metadata the readers have seen (headers, pickles, directories, key-value
// sections), so a real model's budget grows with what it describes, and a
// crafted one cannot buy memory with a few bytes. -o max_parse_mb=N fixes
// the limit instead. Exceeding it is a ModelError naming the file and the
// limit.
//
// What is charged depends on the program. In the modelfs executable (and
// its unit tests and fuzzers), what is charged is what is allocated: while
// a budget is current on a thread, every operator new on that thread is
// charged to it, and every delete gives its bytes back (budget_new.cpp,
// compiled into those programs, replaces the global operators). No reader,
// view or container has to remember to charge there: a parser that copies
// a memoized string a million times pays for a million copies, whatever
// container holds them.
//
// libmodelfs.so replaces no allocator: a program that links it keeps its
// own operator new. There the budget counts only what the library charges
// explicitly: memory taken outside operator new (an inflated member's
// memory file, libzip's copy of a ZIP directory, pugixml's parse of an
// OpenVINO .xml, bounded from counts in its text before it is parsed) and
// what the tree will hold. Whatever else a reader allocates in a host
// program is bounded by the checks each reader makes before allocating
// (counts and lengths read from the file compared with the file's size and
// the reader's fixed limits), not by the budget: only the modelfs
// executable bounds everything a model's reading allocates. charge() is
// how memory that does not come from operator new is charged, in both.
//
// An allocation cannot always be refused where it is made: destructors
// allocate too (nlohmann::json's flattens its children into a vector), and
// an exception thrown from one ends the program. So an allocation that
// takes the budget past its limit is recorded, and refused at the next
// checkpoint (check_budget(): every ByteReader read, every JSON event,
// every pickle value walked, every tensor catalogued or given files),
// which throws BudgetExceeded from ordinary code; only a single request
// larger than the whole limit and than twice the bytes in use is refused
// at once, by operator new, since no destructor asks for that much (a
// destructor's scratch holds at most what it destroys, grown by doubling).
//
// A caller hands its budget to the calls that read a model
// (OpenOptions::budget, TreeOptions::budget); without one, each call makes
// its own of the default limit. Inside the library the call binds it to
// its thread for its duration (io/budget_charge.hpp), because that is the
// only place the modelfs program's operator new can find it; nothing a
// caller has on its stack changes what a call does.
#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <string>
#include <string_view>

#include "modelfs/api.hpp"

namespace modelfs {

class MODELFS_API Budget {
 public:
  static constexpr uint64_t kFloorBytes = uint64_t{64} << 20;
  static constexpr uint64_t kBytesPerMetadataByte = 8;

  // `fixed`: a limit in bytes that metadata does not raise.
  explicit Budget(std::optional<uint64_t> fixed = std::nullopt)
      : fixed_(fixed.has_value()), limit_(fixed.value_or(kFloorBytes)) {}

  // Metadata read (a header, a pickle, a directory): raises the limit.
  void add_metadata(uint64_t bytes) noexcept;
  // Charges `bytes` allocated for `what`; ModelError (file, format) when the
  // total would pass the limit.
  void charge(uint64_t bytes, std::string_view file, std::string_view format, std::string_view what);

  uint64_t used() const noexcept { return used_; }
  uint64_t limit() const noexcept { return limit_; }
  // The most used at once (heap and charges), for tests and benchmarks.
  uint64_t peak() const noexcept { return peak_; }

  // The allocator's side (budget_new.cpp, in modelfs's own programs):
  // `bytes` about to be taken from the heap, BudgetExceeded when they would
  // pass the limit; `bytes` given back. Never allocate.
  void allocate(uint64_t bytes);
  void release(uint64_t bytes) noexcept { used_ = bytes < used_ ? used_ - bytes : 0; }
  // `asked` was allocated as `got` bytes (got >= asked, by a few bytes).
  void settle(uint64_t asked, uint64_t got) noexcept { note(got - asked); }
  // True once an allocation took the budget past its limit: the next
  // checkpoint refuses the model.
  bool passed() const noexcept { return passed_; }
  // The refusal of the allocation that passed the limit.
  [[noreturn]] void refuse_passed() const;

 private:
  void note(uint64_t bytes) noexcept;
  bool fixed_;
  uint64_t limit_;
  uint64_t used_ = 0;
  uint64_t peak_ = 0;
  bool passed_ = false;
  uint64_t passed_by_ = 0,
           passed_at_ = 0;  // the allocation that passed the limit, and what was used before it
};

// An allocation refused by the current budget. A std::bad_alloc, so every
// container unwinds as it would when memory runs out; open_model and
// Tree::build turn it into a ModelError naming the file. It holds numbers
// only: building a message here would allocate.
class MODELFS_API BudgetExceeded : public std::bad_alloc {
 public:
  BudgetExceeded(uint64_t bytes, uint64_t used, uint64_t limit, bool fixed) noexcept
      : bytes_(bytes), used_(used), limit_(limit), fixed_(fixed) {}
  const char* what() const noexcept override { return "past the model's memory budget"; }
  // "WHAT needs N MiB, past the model's memory budget of ..." (allocates:
  // call it once the allocation has unwound).
  std::string reason(std::string_view what) const;

 private:
  uint64_t bytes_, used_, limit_;
  bool fixed_;
};

}  // namespace modelfs
