// SPDX-License-Identifier: Apache-2.0
#include "formats/safetensors_header.hpp"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_set>
#include <utility>
#include <vector>

#include "formats/json_limits.hpp"
#include "formats/safetensors.hpp"
#include "io/budget_charge.hpp"
#include "io/safetensors_dtype.hpp"
#include "modelfs/error.hpp"
#include "modelfs/json_release.hpp"

namespace modelfs::safetensors {
namespace {

constexpr std::string_view kFormat = "safetensors";
constexpr uint64_t kHeaderStart = 8;  // the header's first byte in the file
constexpr std::string_view kMetadataKey = "__metadata__";

// A JSON value as it arrives from the parser; shown in full only in
// messages, so the common case formats nothing.
struct Value {
  enum Kind : uint8_t { Null, Boolean, Integer, Unsigned, Float, String, Binary, Array, Object };
  Kind kind;
  bool boolean = false;
  int64_t integer = 0;
  uint64_t unsigned_value = 0;
  std::string* text = nullptr;  // a string's value, or a float as written

  // nlohmann's type_name(), as DOM-based messages said it.
  const char* type_name() const {
    switch (kind) {
      case Null:
        return "null";
      case Boolean:
        return "boolean";
      case String:
        return "string";
      case Binary:
        return "binary";
      case Array:
        return "array";
      case Object:
        return "object";
      default:
        return "number";
    }
  }
  // Numbers and strings as written, containers by kind (not kept).
  std::string shown() const {
    switch (kind) {
      case Null:
        return "null";
      case Boolean:
        return boolean ? "true" : "false";
      case Integer:
        return std::to_string(integer);
      case Unsigned:
        return std::to_string(unsigned_value);
      case Float:
        return *text;
      case String:
        return nlohmann::json(*text).dump();
      case Binary:
        return "binary data";
      case Array:
        return "an array";
      case Object:
        return "an object";
    }
    return "?";
  }
};

// Where the next value goes: what the innermost open container is.
enum class Slot : uint8_t {
  Document,  // the top-level value
  Top,       // a value of the header object: an entry or __metadata__
  Entry,     // a field of a tensor entry
  Metadata,  // a value of __metadata__
  Shape,     // an element of "shape"
  Offsets,   // an element of "data_offsets"
  Ignored,   // inside a value nobody reads (unknown fields, bad entries)
};

// An entry while its fields arrive, in any order.
struct EntryDraft {
  enum Field : uint8_t { None, DTypeField, ShapeField, OffsetsField, Other };

  HeaderEntry entry;
  bool dtype_seen = false, dtype_is_string = false;
  std::string dtype_code;
  bool shape_seen = false, shape_is_array = false;
  std::optional<std::string> bad_dim;  // the first dimension that is not a u64
  bool offsets_seen = false, offsets_is_array = false;
  size_t offsets_count = 0;
  std::optional<std::string> bad_offset;  // the first of the two that is not a u64
  Field field = None;                     // the field whose value comes next
  std::unordered_set<std::string> other_keys;

  // The checks of a DOM read, in its order; the reason of the first that
  // fails, or nothing.
  std::optional<std::string> problem() {
    // Built only on the way to a message: this runs for every entry.
    auto quote = [&] { return "tensor \"" + entry.name + "\": "; };
    if (!dtype_seen || !dtype_is_string) return quote() + "missing or non-string \"dtype\"";
    if (!shape_seen || !shape_is_array) return quote() + "missing or non-array \"shape\"";
    if (!offsets_seen || !offsets_is_array || offsets_count != 2)
      return quote() + "\"data_offsets\" must be an array of two integers";
    const auto dtype = dtype_from_safetensors(dtype_code);
    if (!dtype) return quote() + "unknown dtype \"" + dtype_code + "\"";
    entry.dtype = *dtype;
    if (bad_dim) return quote() + "shape holds " + *bad_dim + ", not a non-negative integer";
    if (bad_offset) return quote() + "data_offsets holds " + *bad_offset + ", not a non-negative integer";
    return std::nullopt;
  }
};

class HeaderReader {
 public:
  explicit HeaderReader(const std::string& file) : file_(file) {}

  Header finish(std::string_view text) {
    if (!top_is_object_) fail(kHeaderStart, "header is not a JSON object");
    reject_duplicate_names();
    if (first_problem_) fail(key_position(text, first_problem_->first), first_problem_->second);
    return std::move(header_);
  }

  // ------------------------------------------------------ nlohmann's SAX
  bool null() { return scalar({Value::Null}); }
  bool boolean(bool value) { return scalar({Value::Boolean, value}); }
  bool number_integer(int64_t value) { return scalar({Value::Integer, false, value}); }
  bool number_unsigned(uint64_t value) { return scalar({Value::Unsigned, false, 0, value}); }
  bool number_float(double, const std::string& written) {
    std::string copy = written;
    return scalar({Value::Float, false, 0, 0, &copy});
  }
  bool string(std::string& value) { return scalar({Value::String, false, 0, 0, &value}); }
  bool binary(nlohmann::json::binary_t&) { return scalar({Value::Binary}); }

  bool start_object(std::size_t) { return open(true); }
  bool start_array(std::size_t) { return open(false); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& name) {
    Frame& frame = frames_.back();
    switch (frame.slot) {
      case Slot::Top:
        // Duplicate tensor names are found once, by sorting, at the end; a
        // hash set of every name would cost more than the entries.
        if (name == kMetadataKey && std::exchange(metadata_seen_, true)) duplicate(name);
        key_ = name;
        break;
      case Slot::Entry: {
        auto& draft = *draft_;
        using F = EntryDraft::Field;
        const F field = name == "dtype"          ? F::DTypeField
                        : name == "shape"        ? F::ShapeField
                        : name == "data_offsets" ? F::OffsetsField
                                                 : F::Other;
        const bool again = field == F::DTypeField     ? std::exchange(draft.dtype_seen, true)
                           : field == F::ShapeField   ? std::exchange(draft.shape_seen, true)
                           : field == F::OffsetsField ? std::exchange(draft.offsets_seen, true)
                                                      : !draft.other_keys.insert(name).second;
        if (again) duplicate(name);
        draft.field = field;
        break;
      }
      case Slot::Metadata:
        // The metadata object is its own key set (every key is placed in
        // it, see place()): a set beside it doubled the memory of a
        // million keys.
        if (header_.metadata.contains(name)) duplicate(name);
        key_ = name;
        break;
      default:
        if (!frame.keys->insert(name).second) duplicate(name);
        key_ = name;
        break;
    }
    return true;
  }

  template <class Exception>
  bool parse_error(std::size_t position, const std::string&, const Exception& ex) {
    detail::throw_json_parse_error(file_, kFormat, kHeaderStart, position, ex);
  }

 private:
  struct Frame {
    Slot slot;
    // Objects other than the header and entries: their keys, for the
    // duplicate check (those two check theirs more cheaply).
    std::unique_ptr<std::unordered_set<std::string>> keys;
  };

  [[noreturn]] void fail(uint64_t offset, const std::string& reason) const {
    throw ModelError(file_, std::string(kFormat), offset, reason);
  }
  [[noreturn]] void duplicate(const std::string& name) const {
    fail(kHeaderStart, "duplicate JSON key \"" + name + "\"");
  }

  // Problems are kept, not thrown, until the whole header has parsed: a
  // syntax error anywhere wins, then the problem of the smallest key (a DOM
  // read visits keys in that order).
  void problem(const std::string& key, std::string reason) {
    if (!first_problem_ || key < first_problem_->first) first_problem_.emplace(key, std::move(reason));
  }

  Slot slot() const { return frames_.empty() ? Slot::Document : frames_.back().slot; }

  // A value arrives where `slot()` says (a string's text may be moved
  // from). Returns the slot its contents take, if it is a container
  // (Ignored: nobody reads them).
  Slot place(const Value& value) {
    const bool object = value.kind == Value::Object;
    switch (slot()) {
      case Slot::Document:
        top_is_object_ = object;
        return object ? Slot::Top : Slot::Ignored;
      case Slot::Top:
        if (key_ == kMetadataKey) {
          if (object) return Slot::Metadata;
          // The reference crate reads the field as an Option, so `null`
          // means no metadata (MLX writes that); nothing else does.
          if (value.kind == Value::Null) return Slot::Ignored;
          problem(key_, "__metadata__ is not an object of strings");
          return Slot::Ignored;
        }
        if (!object) {
          problem(key_, "tensor \"" + key_ + "\": entry is not an object");
          return Slot::Ignored;
        }
        draft_.emplace();
        draft_->entry.name = key_;
        return Slot::Entry;
      case Slot::Entry: {
        auto& draft = *draft_;
        switch (draft.field) {
          case EntryDraft::DTypeField:
            draft.dtype_is_string = value.kind == Value::String;
            if (draft.dtype_is_string) draft.dtype_code = std::move(*value.text);
            return Slot::Ignored;
          case EntryDraft::ShapeField:
            draft.shape_is_array = value.kind == Value::Array;
            return draft.shape_is_array ? Slot::Shape : Slot::Ignored;
          case EntryDraft::OffsetsField:
            draft.offsets_is_array = value.kind == Value::Array;
            return draft.offsets_is_array ? Slot::Offsets : Slot::Ignored;
          default:
            return Slot::Ignored;
        }
      }
      case Slot::Metadata:
        if (value.kind == Value::String) {
          header_.metadata[key_] = std::move(*value.text);
        } else {
          // Kept as null for the duplicate check; the header is refused.
          header_.metadata[key_] = nullptr;
          problem(std::string(kMetadataKey),
                  "__metadata__ value of \"" + key_ + "\" is a " + value.type_name() + ", not a string");
        }
        return Slot::Ignored;
      case Slot::Shape:
        if (value.kind == Value::Unsigned)
          draft_->entry.shape.push_back(value.unsigned_value);
        else if (!draft_->bad_dim)
          draft_->bad_dim = value.shown();
        return Slot::Ignored;
      case Slot::Offsets: {
        auto& draft = *draft_;
        const size_t index = draft.offsets_count++;
        if (index < 2) {
          if (value.kind == Value::Unsigned)
            (index == 0 ? draft.entry.begin : draft.entry.end) = value.unsigned_value;
          else if (!draft.bad_offset)
            draft.bad_offset = value.shown();
        }
        return Slot::Ignored;
      }
      case Slot::Ignored:
        return Slot::Ignored;
    }
    return Slot::Ignored;
  }

  // Every value passes here or through open(): the budget's checkpoints, so
  // a header of a million short keys is refused at its budget, not after.
  bool scalar(const Value& value) {
    check_budget();
    place(value);
    return true;
  }

  bool open(bool is_object) {
    check_budget();
    if (static_cast<int>(frames_.size()) >= kMaxJsonDepth)
      fail(kHeaderStart, "JSON nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    const Slot inner = place({is_object ? Value::Object : Value::Array});
    Frame frame{inner, nullptr};
    if (is_object && inner != Slot::Top && inner != Slot::Entry && inner != Slot::Metadata)
      frame.keys = std::make_unique<std::unordered_set<std::string>>();
    frames_.push_back(std::move(frame));
    return true;
  }

  bool close() {
    const Slot closed = frames_.back().slot;
    frames_.pop_back();
    if (closed == Slot::Entry) finish_entry();
    return true;
  }

  void finish_entry() {
    if (auto why = draft_->problem())
      problem(draft_->entry.name, std::move(*why));
    else
      header_.entries.push_back(std::move(draft_->entry));
    draft_.reset();
  }

  // Names are sorted by hash, and only names of equal hash by their text:
  // names that share long prefixes cost a walk of the prefix per text
  // comparison. A run of equal hashes (a file crafted to collide, say) is
  // sorted by text, so the worst case is that of sorting by text. The name
  // reported is the smallest one repeated, as when all were sorted by text.
  void reject_duplicate_names() {
    std::vector<std::pair<size_t, const std::string*>> keyed;
    keyed.reserve(header_.entries.size());
    for (const auto& entry : header_.entries)
      keyed.emplace_back(std::hash<std::string>{}(entry.name), &entry.name);
    std::sort(keyed.begin(), keyed.end(), [](auto& a, auto& b) { return a.first < b.first; });
    const std::string* repeated = nullptr;
    for (auto run = keyed.begin(); run != keyed.end();) {
      const auto end = std::find_if(run, keyed.end(), [&](auto& k) { return k.first != run->first; });
      if (end - run > 1) {
        std::sort(run, end, [](auto& a, auto& b) { return *a.second < *b.second; });
        const auto same =
            std::adjacent_find(run, end, [](auto& a, auto& b) { return *a.second == *b.second; });
        if (same != end && (repeated == nullptr || *same->second < *repeated)) repeated = same->second;
      }
      run = end;
    }
    if (repeated != nullptr) duplicate(*repeated);
  }

  const std::string& file_;
  Header header_;
  // Refused at its budget, a header of a million metadata keys is let go
  // without the scratch nlohmann's destructor takes (json_release.hpp).
  const JsonReleaser<nlohmann::json> release_metadata_{header_.metadata};
  std::vector<Frame> frames_;
  std::string key_;  // the last key read at the header's level or in __metadata__
  std::optional<EntryDraft> draft_;
  bool top_is_object_ = false;
  bool metadata_seen_ = false;
  std::optional<std::pair<std::string, std::string>> first_problem_;
};

}  // namespace

uint64_t key_position(std::string_view text, const std::string& key) {
  const auto pos = text.find(nlohmann::json(key).dump());
  return pos == std::string_view::npos ? kHeaderStart : kHeaderStart + pos;
}

Header read_header(std::string_view text, const std::string& file) {
  HeaderReader reader(file);
  try {
    nlohmann::json::sax_parse(text.begin(), text.end(), &reader);
  } catch (const nlohmann::json::exception& e) {
    // Anything the reader did not turn into a ModelError itself.
    throw ModelError(file, std::string(kFormat), kHeaderStart, std::string("invalid JSON: ") + e.what());
  }
  return reader.finish(text);
}

}  // namespace modelfs::safetensors
