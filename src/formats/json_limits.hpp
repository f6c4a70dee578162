// SPDX-License-Identifier: Apache-2.0
#pragma once
// JSON read from a model file is hostile input: bounded nesting, no
// duplicate keys (a second value would silently shadow the first), and
// parse errors reported at their byte offset in the file.
#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/budget_charge.hpp"
#include "modelfs/budget.hpp"
#include "modelfs/error.hpp"

namespace modelfs {

namespace detail {

// Every parse failure, the number that overflows a double (an out_of_range,
// not a parse_error) included, becomes a ModelError at the byte where the
// lexer stopped; `base` is the file offset of the text's first byte.
[[noreturn]] inline void throw_json_parse_error(const std::string& file, std::string_view format,
                                                uint64_t base, std::size_t position,
                                                const std::exception& ex) {
  std::string what = ex.what();
  const auto bracket = what.find("] ");
  std::string why = bracket == std::string::npos ? what : what.substr(bracket + 2);
  if (why.rfind("parse error", 0) == 0) {
    const auto colon = why.find(": ");
    if (colon != std::string::npos) why = why.substr(colon + 2);
  }
  if (why.size() > 200) why = why.substr(0, 200) + "...";
  throw ModelError(file, std::string(format), base + (position > 0 ? position - 1 : 0),
                   "invalid JSON: " + why);
}

// nlohmann's DOM builder plus the two checks. A SAX handler rather than a
// parse callback: with a callback, nlohmann scans the whole parent object at
// the end of every child object, so a header of many tensors took time
// quadratic in their number; this stays linear.
class LimitedJsonSax : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
  using Base = nlohmann::detail::json_sax_dom_parser<nlohmann::json>;

 public:
  LimitedJsonSax(nlohmann::json& result, const std::string& file, std::string_view format, uint64_t base,
                 int max_depth)
      : Base(result, true), file_(file), format_(format), base_(base), max_depth_(max_depth) {}

  bool start_object(std::size_t n) {
    enter();
    keys_.emplace_back();
    return Base::start_object(n);
  }
  bool end_object() {
    keys_.pop_back();
    --open_;
    return Base::end_object();
  }
  bool start_array(std::size_t n) {
    enter();
    return Base::start_array(n);
  }
  bool end_array() {
    --open_;
    return Base::end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string&, const Exception& ex) {
    throw_json_parse_error(file_, format_, base_, position, ex);
  }
  bool key(std::string& name) {
    if (!keys_.back().insert(name).second) throw fail("duplicate JSON key \"" + name + "\"");
    return Base::key(name);
  }

  // Every value passes here or through enter(): the budget's checkpoints.
  bool null() { return checked(Base::null()); }
  bool boolean(bool v) { return checked(Base::boolean(v)); }
  bool number_integer(nlohmann::json::number_integer_t v) { return checked(Base::number_integer(v)); }
  bool number_unsigned(nlohmann::json::number_unsigned_t v) { return checked(Base::number_unsigned(v)); }
  bool number_float(nlohmann::json::number_float_t v, const std::string& s) {
    return checked(Base::number_float(v, s));
  }
  bool string(std::string& v) { return checked(Base::string(v)); }
  bool binary(nlohmann::json::binary_t& v) { return checked(Base::binary(v)); }

 private:
  static bool checked(bool result) {
    check_budget();
    return result;
  }
  void enter() {
    check_budget();
    if (open_ >= max_depth_) throw fail("JSON nests deeper than " + std::to_string(max_depth_) + " levels");
    ++open_;
  }
  ModelError fail(const std::string& why) const {
    return ModelError(file_, std::string(format_), base_, why);
  }

  const std::string& file_;
  std::string_view format_;
  uint64_t base_;
  int max_depth_;
  int open_ = 0;
  std::vector<std::unordered_set<std::string>> keys_;  // one set per open object
};

}  // namespace detail

// The longest string or number in `text`, in bytes as written.
inline uint64_t longest_json_token(std::string_view text) {
  const auto in_number = [](char c) {
    return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
  };
  uint64_t longest = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t start = i;
    if (text[i] == '"') {
      for (++i; i < text.size() && text[i] != '"';) i += text[i] == '\\' ? 2 : 1;
      ++i;
    } else if (in_number(text[i])) {
      while (i < text.size() && in_number(text[i])) ++i;
    } else {
      ++i;
      continue;
    }
    longest = std::max<uint64_t>(longest, std::min(i, text.size()) - start);
  }
  return longest;
}

// nlohmann's lexer gathers a token in two buffers that grow by doubling
// (up to three times the token each while one is moved), and the budget
// refuses what they take only at the next JSON event, after the token: a
// 30 MB string of a 30 KB deflated member took 100 MB past a budget of
// 64 MiB. So a text whose longest token could not be lexed within what
// the budget has left is refused before it is parsed.
inline constexpr uint64_t kLexerBytesPerTokenByte = 5;

inline void refuse_unlexable(std::string_view text, const std::string& file, std::string_view format) {
  const uint64_t scratch = longest_json_token(text) * kLexerBytesPerTokenByte;
  charge_budget(scratch, file, format, "lexing its longest JSON token");
  release_budget(scratch);  // a test of room, not a reservation: the lexer's own allocations are charged
}

namespace detail {

// Appends what nlohmann's serializer writes to a string, first testing that
// the budget has room each time the string must grow: a string grown by
// doubling is otherwise refused only at the next checkpoint, after the
// doubling that passed the limit (a printed ONNX graph of four million
// numbers reached 200 MiB under a budget of 95).
class BudgetedText : public nlohmann::detail::output_adapter_protocol<char> {
 public:
  BudgetedText(std::string& out, const std::string& file, std::string_view format)
      : out_(out), file_(file), format_(format) {}
  void write_character(char c) override {
    room(1);
    out_.push_back(c);
  }
  void write_characters(const char* s, std::size_t length) override {
    room(length);
    out_.append(s, length);
  }

 private:
  void room(std::size_t more) {
    if (out_.capacity() - out_.size() >= more) return;
    const std::size_t want = std::max(out_.capacity() * 2, out_.size() + more);
    charge_budget(want, file_, format_, "printing a JSON document");
    release_budget(want);  // a test of room: the string's own allocation is charged
    out_.reserve(want);
  }
  std::string& out_;
  const std::string& file_;
  std::string_view format_;
};

}  // namespace detail

// value.dump(indent) and a newline, refused (ModelError) before the text
// outgrows what the budget has left.
template <typename Json>
std::string printed_within_budget(const Json& value, int indent, const std::string& file,
                                  std::string_view format) {
  std::string out;
  nlohmann::detail::serializer<Json> printer(std::make_shared<detail::BudgetedText>(out, file, format), ' ',
                                             nlohmann::json::error_handler_t::replace);
  printer.dump(value, indent >= 0, false, indent >= 0 ? static_cast<unsigned>(indent) : 0);
  detail::BudgetedText(out, file, format).write_character('\n');
  return out;
}

// `base` is the file offset of text[0].
inline nlohmann::json parse_json_limited(std::string_view text, const std::string& file,
                                         std::string_view format, uint64_t base, int max_depth) {
  refuse_unlexable(text, file, format);
  nlohmann::json result;
  detail::LimitedJsonSax sax(result, file, format, base, max_depth);
  try {
    nlohmann::json::sax_parse(text.begin(), text.end(), &sax);
    return result;
  } catch (const nlohmann::json::exception& e) {
    // Anything the SAX handler did not turn into a ModelError itself.
    throw ModelError(file, std::string(format), base, std::string("invalid JSON: ") + e.what());
  }
}

}  // namespace modelfs
