// SPDX-License-Identifier: Apache-2.0
#include "io/json_text.hpp"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "io/utf8.hpp"

namespace modelfs {
namespace {

// The pieces of append_json_bytes's text, handed to `emit` in order.
template <typename Emit>
void json_bytes_pieces(std::string_view bytes, Emit&& emit) {
  static constexpr char kHex[] = "0123456789abcdef";
  auto plain = [](unsigned char c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; };
  emit(std::string_view("\""));
  size_t i = 0;
  while (i < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (plain(c)) {
      // A run of plain ASCII, as one piece.
      const size_t run = std::find_if_not(bytes.begin() + i, bytes.end(), plain) - bytes.begin();
      emit(bytes.substr(i, run - i));
      i = run;
      continue;
    }
    if (c < 0x80) {
      switch (c) {
        case '"':
          emit(std::string_view("\\\""));
          break;
        case '\\':
          emit(std::string_view("\\\\"));
          break;
        case '\b':
          emit(std::string_view("\\b"));
          break;
        case '\f':
          emit(std::string_view("\\f"));
          break;
        case '\n':
          emit(std::string_view("\\n"));
          break;
        case '\r':
          emit(std::string_view("\\r"));
          break;
        case '\t':
          emit(std::string_view("\\t"));
          break;
        default: {
          const char escape[] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 15]};
          emit(std::string_view(escape, sizeof escape));
        }
      }
      ++i;
      continue;
    }
    if (const auto decoded = decode_utf8(bytes.substr(i))) {
      emit(bytes.substr(i, decoded->length));
      i += decoded->length;
      continue;
    }
    const char escape[] = {'\\', 'u', 'd', 'c', kHex[c >> 4], kHex[c & 15]};
    emit(std::string_view(escape, sizeof escape));
    ++i;
  }
  emit(std::string_view("\""));
}

std::string compact(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// compact(value) appended to `out` where it is printed: a value of a
// million keys printed to a text of its own first was held twice.
template <typename Json>
void append_compact(std::string& out, const Json& value) {
  nlohmann::detail::serializer<Json> printer(nlohmann::detail::output_adapter<char, std::string>(out), ' ',
                                             nlohmann::json::error_handler_t::replace);
  printer.dump(value, false, false, 0);
}

// One top-level key and its value, as readable_json prints them.
template <typename Json>
void add_member(std::string& out, std::string_view key, const Json& item) {
  append_member(out, out.empty(), key, item, is_list_of_containers(item),
                [](std::string& text, const auto& value) { append_compact(text, value); });
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  // Plain printable ASCII needs no escaping; anything else (quotes,
  // control characters, UTF-8, invalid bytes) goes through nlohmann so the
  // result is byte-identical to readable_json's.
  auto needs_escape = [](unsigned char c) { return c < 0x20 || c >= 0x7F || c == '"' || c == '\\'; };
  if (std::ranges::any_of(text, needs_escape)) {
    out += compact(nlohmann::ordered_json(std::string(text)));
    return;
  }
  out += '"';
  out += text;
  out += '"';
}

void append_json_bytes(std::string& out, std::string_view bytes) {
  json_bytes_pieces(bytes, [&](std::string_view piece) { out += piece; });
}

size_t json_bytes_length(std::string_view bytes) {
  size_t length = 0;
  json_bytes_pieces(bytes, [&](std::string_view piece) { length += piece.size(); });
  return length;
}

std::string readable_json(const nlohmann::ordered_json& value) {
  if (!value.is_object() || value.empty()) return compact(value) + "\n";
  std::string out;
  for (const auto& [key, item] : value.items()) add_member(out, key, item);
  out += "\n}\n";
  return out;
}

std::string readable_metadata(const std::string& format, const std::vector<std::string>& files,
                              const nlohmann::json& metadata) {
  std::string out;
  // The metadata's own "format" or "files", where it has them, in their place.
  const auto first = [&](const std::string& key, const nlohmann::ordered_json& own) {
    if (const auto it = metadata.find(key); it != metadata.end())
      add_member(out, key, *it);
    else
      add_member(out, key, own);
  };
  first("format", format);
  first("files", files);
  for (const auto& [key, item] : metadata.items())
    if (key != "format" && key != "files") add_member(out, key, item);
  out += "\n}\n";
  return out;
}

}  // namespace modelfs
