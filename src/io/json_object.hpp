// SPDX-License-Identifier: Apache-2.0
#pragma once
// Filling a JSON object key by key in time linear in its keys. An
// nlohmann::ordered_json finds a key by scanning its items, so `object[key]
// = value` for each of n keys costs n^2 / 2 comparisons: a model's million
// metadata keys took hours. ObjectFiller gives the same object as those
// assignments (a key keeps the place of its first setting and the value of
// its last) with one hash lookup a key.
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>

#include <nlohmann/json.hpp>

namespace modelfs {

template <typename Json>
class ObjectFiller {
 public:
  // `object` becomes an object if it is null; it must not be otherwise
  // changed while the filler lives.
  explicit ObjectFiller(Json& object)
      : items_((object.is_null() ? object = Json::object() : object)
                   .template get_ref<typename Json::object_t&>()),
        places_(0, Hash{&items_}, Equal{&items_}) {
    places_.reserve(items_.size());
    for (size_t i = 0; i < items_.size(); ++i) places_.insert(i);
  }

  // Room for `count` keys in all: without it, each time the items' vector
  // grows it copies them (their keys are const, so not moved).
  void reserve(size_t count) {
    items_.reserve(count);
    places_.reserve(count);
  }

  // As `object[key] = value`.
  void set(std::string key, Json value) {
    // The new item goes last, and is taken back if its key was there.
    items_.emplace_back(std::move(key), std::move(value));
    const auto [at, fresh] = places_.insert(items_.size() - 1);
    if (fresh) return;
    items_[*at].second = std::move(items_.back().second);
    items_.pop_back();
  }

 private:
  // The object's items as the vector they are (ordered_map's own operator[]
  // takes a key).
  using Items = typename Json::object_t::Container;
  // Places are hashed and compared by the key they hold.
  struct Hash {
    const Items* items;
    size_t operator()(size_t place) const { return std::hash<std::string_view>{}((*items)[place].first); }
  };
  struct Equal {
    const Items* items;
    bool operator()(size_t a, size_t b) const { return (*items)[a].first == (*items)[b].first; }
  };

  Items& items_;
  std::unordered_set<size_t, Hash, Equal> places_;
};

}  // namespace modelfs
