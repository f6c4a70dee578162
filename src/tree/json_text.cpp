#include "modelfs/json_text.hpp"

namespace modelfs {
namespace {

std::string compact(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool is_list_of_containers(const nlohmann::ordered_json& value) {
  if (!value.is_array() || value.empty()) return false;
  for (const auto& element : value)
    if (!element.is_object() && !element.is_array()) return false;
  return true;
}

}  // namespace

void append_json_string(std::string& out, std::string_view text) {
  // Plain printable ASCII needs no escaping; anything else (quotes,
  // control characters, UTF-8, invalid bytes) goes through nlohmann so the
  // result is byte-identical to readable_json's.
  for (unsigned char c : text) {
    if (c < 0x20 || c >= 0x7F || c == '"' || c == '\\') {
      out += compact(nlohmann::ordered_json(std::string(text)));
      return;
    }
  }
  out += '"';
  out += text;
  out += '"';
}

std::string readable_json(const nlohmann::ordered_json& value) {
  if (!value.is_object() || value.empty()) return compact(value) + "\n";
  std::string out = "{\n";
  bool first = true;
  for (const auto& [key, item] : value.items()) {
    if (!first) out += ",\n";
    first = false;
    out += "  " + compact(nlohmann::ordered_json(key)) + ": ";
    if (is_list_of_containers(item)) {
      out += "[\n";
      for (size_t i = 0; i < item.size(); ++i)
        out += "    " + compact(item[i]) + (i + 1 < item.size() ? ",\n" : "\n");
      out += "  ]";
    } else {
      out += compact(item);
    }
  }
  return out + "\n}\n";
}

}  // namespace modelfs
