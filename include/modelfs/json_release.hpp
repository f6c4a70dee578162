// SPDX-License-Identifier: Apache-2.0
#pragma once
// Emptying a JSON document without the memory nlohmann's destructor takes.
// That destructor first moves a container's children into a vector of its
// own (so that a deep document does not overflow the stack), grown by
// doubling while the container still holds its storage: destroying an
// array of four million numbers (64 MiB) took 144 MiB more, so a model
// refused at its budget passed it by twice that while it was unwound.
// release_json empties containers child by child from the last, allocating
// nothing; a subtree deeper than kReleaseDepth is left to the destructor,
// whose scratch is then that subtree's width.
#include <nlohmann/json.hpp>

namespace modelfs {

inline constexpr int kReleaseDepth = 1024;

template <typename Json>
void release_json(Json& value, int depth = 0) noexcept {
  if (depth >= kReleaseDepth) return;
  if (value.is_array()) {
    auto& items = value.template get_ref<typename Json::array_t&>();
    while (!items.empty()) {
      release_json(items.back(), depth + 1);
      items.pop_back();
    }
  } else if (value.is_object()) {
    auto& items = value.template get_ref<typename Json::object_t&>();
    while (!items.empty()) {
      auto last = std::prev(items.end());
      release_json(last->second, depth + 1);
      if constexpr (requires { items.pop_back(); })
        items.pop_back();  // ordered_json: a vector of its items
      else
        items.erase(last);
    }
  }
}

// Releases `value` when the scope ends, by return or by exception.
template <typename Json>
class JsonReleaser {
 public:
  explicit JsonReleaser(Json& value) noexcept : value_(value) {}
  JsonReleaser(const JsonReleaser&) = delete;
  JsonReleaser& operator=(const JsonReleaser&) = delete;
  ~JsonReleaser() { release_json(value_); }

 private:
  Json& value_;
};

}  // namespace modelfs
