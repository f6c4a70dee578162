// SPDX-License-Identifier: Apache-2.0
#pragma once
// Overflow-checked arithmetic for sizes read from hostile files. Every
// product or sum of file-provided numbers goes through these: Checked<T>
// (Size for byte counts and offsets) where a size is built up in steps,
// the functions below for one sum or product.
#include <concepts>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace modelfs {

// What Checked::value() throws for a result that did not fit. It carries
// no file or format: the layer that knows them (Tree::build, a reader)
// turns it into a ModelError, or into a refusal of its own.
class SizeOverflow : public std::overflow_error {
 public:
  explicit SizeOverflow(
      const std::string& what = "a size computed from the model's numbers does not fit 64 bits")
      : std::overflow_error(what) {}
};

// A size, offset, stride or count computed from a file's numbers. Its
// arithmetic never wraps: a result that does not fit T (or an operand that
// did not) leaves the value overflowed, and so is every result made from
// it. The number comes out only through value(), which throws SizeOverflow
// when it overflowed, or get(), nullopt then: a caller cannot use a wrapped
// number by forgetting a check, only choose how it is told.
template <std::integral T>
class Checked {
 public:
  constexpr Checked() noexcept = default;
  // Any integer: one outside T's range (a negative stride taken as a size)
  // is overflowed from the start.
  template <std::integral U>
  constexpr Checked(U value) noexcept  // NOLINT(google-explicit-constructor): a number is a checked one
      : value_(static_cast<T>(value)), ok_(std::in_range<T>(value)) {}

  constexpr bool ok() const noexcept { return ok_; }
  constexpr std::optional<T> get() const noexcept { return ok_ ? std::optional<T>(value_) : std::nullopt; }
  constexpr T value() const {
    if (!ok_) throw SizeOverflow();
    return value_;
  }

  constexpr Checked& operator+=(Checked other) noexcept {
    ok_ = ok_ && other.ok_ && !__builtin_add_overflow(value_, other.value_, &value_);
    return *this;
  }
  constexpr Checked& operator-=(Checked other) noexcept {
    ok_ = ok_ && other.ok_ && !__builtin_sub_overflow(value_, other.value_, &value_);
    return *this;
  }
  constexpr Checked& operator*=(Checked other) noexcept {
    ok_ = ok_ && other.ok_ && !__builtin_mul_overflow(value_, other.value_, &value_);
    return *this;
  }
  // Division by zero, and T's minimum over -1, are overflows too.
  constexpr Checked& operator/=(Checked other) noexcept {
    ok_ = ok_ && other.ok_ && other.value_ != 0 &&
          !(std::is_signed_v<T> && value_ == std::numeric_limits<T>::min() &&
            other.value_ == static_cast<T>(-1));
    if (ok_) value_ /= other.value_;
    return *this;
  }
  friend constexpr Checked operator+(Checked a, Checked b) noexcept { return a += b; }
  friend constexpr Checked operator-(Checked a, Checked b) noexcept { return a -= b; }
  friend constexpr Checked operator*(Checked a, Checked b) noexcept { return a *= b; }
  friend constexpr Checked operator/(Checked a, Checked b) noexcept { return a /= b; }

 private:
  T value_ = 0;
  bool ok_ = true;
};

// Bytes and byte offsets.
using Size = Checked<uint64_t>;

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) noexcept {
  uint64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) noexcept {
  uint64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// Number of elements of a shape (1 for a scalar), or nullopt on overflow.
inline std::optional<uint64_t> checked_numel(std::span<const uint64_t> shape) noexcept {
  uint64_t numel = 1;
  for (uint64_t dim : shape)
    if (__builtin_mul_overflow(numel, dim, &numel)) return std::nullopt;
  return numel;
}

// Elements a strided view with non-negative strides reaches from its first
// element: 1 + sum of stride[i] x (shape[i] - 1); 0 for an empty view.
// nullopt on overflow. The torch readers bound a view's storage span by it.
inline std::optional<uint64_t> checked_strided_span(std::span<const uint64_t> shape,
                                                    std::span<const int64_t> strides) noexcept {
  for (uint64_t dim : shape)
    if (dim == 0) return 0;
  uint64_t last = 0;
  for (size_t i = 0; i < shape.size() && i < strides.size(); ++i) {
    auto step = checked_mul(static_cast<uint64_t>(strides[i]), shape[i] - 1);
    auto sum = step ? checked_add(last, *step) : std::nullopt;
    if (!sum) return std::nullopt;
    last = *sum;
  }
  return last + 1;
}

// True when [offset, offset + length) lies inside [0, size).
inline bool range_fits(uint64_t offset, uint64_t length, uint64_t size) noexcept {
  return offset <= size && length <= size - offset;
}

}  // namespace modelfs
