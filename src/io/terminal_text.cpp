// SPDX-License-Identifier: Apache-2.0
#include "io/terminal_text.hpp"

#include <locale.h>

#include <algorithm>
#include <cstdio>
#include <cwchar>
#include <optional>

#include "io/utf8.hpp"

namespace modelfs {
namespace {

// Characters that change how a terminal shows what follows them.
bool is_control(char32_t c) {
  return c < 0x20 || c == 0x7F || (c >= 0x80 && c <= 0x9F) ||  // C0, DEL, C1
         c == 0x061C || c == 0x200E || c == 0x200F ||          // bidi marks
         (c >= 0x202A && c <= 0x202E) ||                       // embeddings, overrides
         (c >= 0x2066 && c <= 0x2069);                         // isolates
}

void append_escape(std::string& out, const char* format, unsigned value) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, format, value);
  out += buffer;
}

// glibc's C.UTF-8 locale carries the Unicode width tables; it is built into
// glibc since 2.35, and absent elsewhere (every character then counts one).
locale_t utf8_locale() {
  static const locale_t locale = ::newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return locale;
}

// Calls `each(length, columns)` for every character of `text` in order,
// until it returns false.
template <typename Each>
void for_each_width(std::string_view text, Each&& each) {
  const locale_t locale = utf8_locale();
  const locale_t previous = locale ? ::uselocale(locale) : static_cast<locale_t>(0);
  size_t i = 0;
  while (i < text.size()) {
    const auto decoded = decode_utf8(text.substr(i));
    const size_t length = decoded ? decoded->length : 1;
    int columns = 1;
    if (decoded && locale) columns = ::wcwidth(static_cast<wchar_t>(decoded->code_point));
    if (!each(length, columns < 0 ? size_t{1} : static_cast<size_t>(columns))) break;
    i += length;
  }
  if (locale) ::uselocale(previous);
}

}  // namespace

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto decoded = decode_utf8(text.substr(i));
    if (!decoded)
      append_escape(out, "\\x%02x", static_cast<unsigned char>(text[i]));
    else if (is_control(decoded->code_point))
      append_escape(out, decoded->code_point < 0x80 ? "\\x%02x" : "\\u{%04x}",
                    static_cast<unsigned>(decoded->code_point));
    else
      out.append(text.substr(i, decoded->length));
    i += decoded ? decoded->length : 1;
  }
  return out;
}

std::string json_for_terminal(std::string_view json_text) {
  std::string out;
  out.reserve(json_text.size());
  for (size_t i = 0; i < json_text.size();) {
    const auto decoded = decode_utf8(json_text.substr(i));
    const size_t length = decoded ? decoded->length : 1;
    // Below DEL, JSON has escaped what is in strings, and the rest is the
    // text's own layout (newlines, indents).
    if (decoded && decoded->code_point >= 0x7F && is_control(decoded->code_point))
      append_escape(out, "\\u%04x", static_cast<unsigned>(decoded->code_point));
    else
      out.append(json_text.substr(i, length));
    i += length;
  }
  return out;
}

size_t display_width(std::string_view text) {
  size_t width = 0;
  for_each_width(text, [&](size_t, size_t columns) {
    width += columns;
    return true;
  });
  return width;
}

std::string fit_width(std::string_view text, size_t columns) {
  if (columns == 0) return {};
  size_t width = 0;
  size_t kept = 0;  // bytes of the prefix that fits in columns - 1
  for_each_width(text, [&](size_t length, size_t wide) {
    width += wide;
    if (width <= columns - 1) kept += length;
    return width <= columns;
  });
  // The walk stops at the first character past `columns`, or fits to the end.
  if (width <= columns) return std::string(text);
  return std::string(text.substr(0, kept)) + "\u2026";
}

std::string elided(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  // The marker with the most digits a size_t has, so the result fits.
  constexpr size_t kMarkerRoom = sizeof("\u2026[ bytes cut]\u2026") - 1 + 20;
  const size_t room = limit > kMarkerRoom ? limit - kMarkerRoom : 0;
  auto continuation = [&](size_t at) { return (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80; };
  size_t head = room - room / 2;
  while (head > 0 && continuation(head)) --head;
  size_t tail_start = text.size() - room / 2;
  while (tail_start < text.size() && continuation(tail_start)) ++tail_start;
  std::string out(text.substr(0, head));
  out += "\u2026[" + std::to_string(tail_start - head) + " bytes cut]\u2026";
  out += text.substr(tail_start);
  return out;
}

std::string bounded_message(std::string_view text) {
  if (text.size() <= std::min(kLongestMessage, kLongestQuotedName)) return std::string(text);
  std::string out;
  out.reserve(std::min(text.size(), 2 * kLongestMessage));
  bool quoted = false;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find('"', start), text.size());
    const std::string_view piece = text.substr(start, end - start);
    // Only the whole is bounded past this size: a message's own words are
    // not quoted and stay as they are.
    if (quoted)
      out += elided(piece, kLongestQuotedName);
    else
      out += piece;
    if (end == text.size()) break;
    out += '"';
    quoted = !quoted;
    start = end + 1;
    // A message of thousands of quotes is cut as a whole below; the pieces
    // past what can be kept need no look.
    if (out.size() > 4 * kLongestMessage) {
      out += text.substr(start);
      break;
    }
  }
  return elided(out, kLongestMessage);
}

}  // namespace modelfs
