// SPDX-License-Identifier: Apache-2.0
#pragma once
// String tensors (DType::String) as the text modelfs serves for them: JSON
// Lines, one JSON string per element (json_text.hpp, kJsonLinesText). The
// readers of formats that store strings (ONNX, OpenVINO IR, TensorFlow
// checkpoints, TensorFlow.js, TensorFlow Lite) make that text at open and
// hold it, and an element's text may take six times its bytes (\udcXX),
// so a hostile model could make many GiB of it: each reader keeps one
// StringLines for the model it opens, and all its string tensors share the
// one cap. Private to the library.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace modelfs {

// What a model's string tensors may take as JSON Lines, in all.
inline constexpr uint64_t kMaxStringTextBytes = uint64_t{1} << 30;

class StringLines {
 public:
  explicit StringLines(uint64_t cap = kMaxStringTextBytes) noexcept : cap_(cap) {}

  // Element i of a tensor, asked for once each, in order; the view is used
  // before the next is asked for. It may throw (the reader's own checks of
  // its layout).
  using Element = std::function<std::string_view(uint64_t)>;

  struct Text {
    std::optional<std::string> lines;  // none: over what is left of the cap
    uint64_t length = 0;               // bytes all the elements take as text
  };

  // The `count` elements as JSON Lines, counted against the cap. Over it,
  // the elements are still all asked for (so that a fault of the layout
  // is told first, and the length told is the whole), but no text is kept.
  Text write(uint64_t count, const Element& element);

  // Why a tensor of `length` bytes of text is refused, for the reader's
  // message (after its own words naming the tensor).
  std::string over_cap(uint64_t length) const;

  uint64_t used() const noexcept { return used_; }
  uint64_t cap() const noexcept { return cap_; }

 private:
  uint64_t cap_;
  uint64_t used_ = 0;
};

}  // namespace modelfs
