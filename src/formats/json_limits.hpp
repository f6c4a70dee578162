#pragma once
// JSON read from a model file is hostile input: bounded nesting, no
// duplicate keys (a second value would silently shadow the first), and
// parse errors reported at their byte offset in the file.
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "modelfs/error.hpp"

namespace modelfs {

// `base` is the file offset of text[0].
inline nlohmann::json parse_json_limited(std::string_view text, const std::string& file,
                                         std::string_view format, uint64_t base, int max_depth) {
  std::vector<std::unordered_set<std::string>> keys;  // one set per open object
  auto fail = [&](const std::string& why) {
    return ModelError(file, std::string(format), base, why);
  };
  auto callback = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        if (depth >= max_depth)
          throw fail("JSON nests deeper than " + std::to_string(max_depth) + " levels");
        if (event == Event::object_start) keys.emplace_back();
        break;
      case Event::object_end:
        if (!keys.empty()) keys.pop_back();
        break;
      case Event::key:
        if (!keys.empty() && !keys.back().insert(parsed.get<std::string>()).second)
          throw fail("duplicate JSON key \"" + parsed.get<std::string>() + "\"");
        break;
      default:
        break;
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text.begin(), text.end(), callback);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts from 1; the message after "parse error at ...: " says why.
    std::string what = e.what();
    auto colon = what.find(": ", what.find("parse error"));
    std::string why = colon == std::string::npos ? what : what.substr(colon + 2);
    uint64_t at = base + (e.byte > 0 ? e.byte - 1 : 0);
    throw ModelError(file, std::string(format), at, "invalid JSON: " + why);
  }
}

}  // namespace modelfs
