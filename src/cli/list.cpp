// SPDX-License-Identifier: Apache-2.0
#include "cli/list.hpp"

#include "io/json_object.hpp"
#include "io/json_text.hpp"
#include "io/pieces.hpp"
#include "io/terminal_text.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace modelfs::cli {
namespace {

// The name column's widest: a longer name is cut with an ellipsis, so that
// one 100 000-byte name does not pad every row of the table to its width
// (1 000 tensors beside it made 100 MB of spaces). --json keeps names whole.
constexpr size_t kNameColumns = 80;

std::string shape_text(const Tensor& t) {
  std::string s = "[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

std::string human_bytes(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", value, units[unit]);
  return buf;
}

// The human --info: arrays longer than kWholeArray keep their first
// kShownItems items and say how many there are, as gguf-dump does (a GGUF
// vocabulary printed whole was one line of 650 000 characters). The marker
// is a string that JSON printing always escapes, replaced after printing.
constexpr size_t kWholeArray = 8;
constexpr size_t kShownItems = 5;
constexpr std::string_view kMoreMarker = "\x01modelfs-more:";

// Read straight from the catalog's metadata (a copy of a million keys
// first would double the memory).
template <typename Json>
nlohmann::ordered_json shortened(const Json& value) {
  if (value.is_object()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    ObjectFiller fill(out);
    fill.reserve(value.size());
    for (const auto& [key, item] : value.items()) fill.set(key, shortened(item));
    return out;
  }
  if (!value.is_array()) return nlohmann::ordered_json(value);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  const size_t shown = value.size() > kWholeArray ? kShownItems : value.size();
  for (size_t i = 0; i < shown; ++i) out.push_back(shortened(value[i]));
  if (shown < value.size()) out.push_back(std::string(kMoreMarker) + std::to_string(value.size()) + "\x01");
  return out;
}

// Text for the terminal, written to `out` as it is made, each piece made
// safe by `convert` (printable_lines or json_for_terminal): a metadata value
// of a million keys is never held whole (its text and two copies of it were
// the peak of --info). Pieces end on a character's first byte, and both
// converters work character by character, so the output is the same as
// converting the whole text at once.
class ChunkedText {
 public:
  ChunkedText(std::ostream& out, std::string (*convert)(std::string_view)) : out_(out), convert_(convert) {}
  ChunkedText& operator+=(std::string_view text) {
    text_ += text;
    if (text_.size() >= kPiece) write(false);
    return *this;
  }
  ChunkedText& operator+=(char c) { return *this += std::string_view(&c, 1); }
  // Writes what is left; call once the text is complete.
  void finish() { write(true); }

 private:
  static constexpr size_t kPiece = size_t{1} << 20;
  void write(bool all) {
    size_t end = text_.size();
    // Back to the first byte of a character: a UTF-8 continuation byte is 10xxxxxx.
    while (!all && end > 0 && (static_cast<unsigned char>(text_[end - 1]) & 0xC0) == 0x80) --end;
    if (!all && end > 0) --end;  // the last lead byte may begin an unfinished character
    out_ << convert_(std::string_view(text_).substr(0, end));
    text_.erase(0, end);
  }
  std::ostream& out_;
  std::string (*convert_)(std::string_view);
  std::string text_;
};

// nlohmann's printer writing into a ChunkedText.
class ChunkedAdapter : public nlohmann::detail::output_adapter_protocol<char> {
 public:
  explicit ChunkedAdapter(ChunkedText& text) : text_(text) {}
  void write_character(char c) override { text_ += c; }
  void write_characters(const char* s, std::size_t length) override { text_ += std::string_view(s, length); }

 private:
  ChunkedText& text_;
};

// shortened(value) printed compact, as with_counts leaves it, written from
// `value` itself.
void append_shortened(ChunkedText& out, const nlohmann::json& value) {
  const auto replace = nlohmann::json::error_handler_t::replace;
  if (value.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, item] : value.items()) {
      if (!std::exchange(first, false)) out += ',';
      std::string quoted;
      append_json_string(quoted, key);
      out += quoted;
      out += ':';
      append_shortened(out, item);
    }
    out += '}';
  } else if (value.is_array()) {
    out += '[';
    const size_t shown = value.size() > kWholeArray ? kShownItems : value.size();
    for (size_t i = 0; i < shown; ++i) {
      if (i) out += ',';
      append_shortened(out, value[i]);
    }
    if (shown < value.size()) out += ",… (" + std::to_string(value.size()) + " items)";
    out += ']';
  } else {
    out += value.dump(-1, ' ', false, replace);
  }
}

std::string with_counts(std::string_view text) {
  // The marker as printed: "\u0001modelfs-more:N\u0001". Copied piece by
  // piece into a new text: replacing in place would move the rest of the
  // text once for each array.
  const std::string_view opening = "\"\\u0001modelfs-more:";
  std::string out;
  out.reserve(text.size());
  size_t copied = 0;
  for (size_t at = text.find(opening); at != std::string_view::npos; at = text.find(opening, at)) {
    const size_t digits = at + opening.size();
    const size_t end = text.find("\\u0001\"", digits);
    if (end == std::string_view::npos) break;
    const std::string_view count = text.substr(digits, end - digits);
    if (count.empty() || count.find_first_not_of("0123456789") != std::string_view::npos) {
      at = end;  // a string of the model's own that only looks like the marker
      continue;
    }
    out += text.substr(copied, at - copied);
    out += "… (";
    out += count;
    out += " items)";
    at = copied = end + 7;
  }
  out += text.substr(copied);
  return out;
}

// JSON printed for reading, each line made printable: JSON leaves DEL, C1
// controls and bidirectional marks raw, and strings hold no newline.
std::string printable_lines(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t start = 0; start < text.size();) {
    const size_t end = std::min(text.find('\n', start), text.size());
    out += printable(text.substr(start, end - start));
    if (end < text.size()) out += '\n';
    start = end + 1;
  }
  return out;
}

// `value` printed with an indent of 2 as it would be `depth` levels deep in
// a document (its own first line is where the caller is), made printable.
std::string dumped(const nlohmann::ordered_json& value, size_t depth) {
  const std::string text = value.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string indent(2 * depth, ' ');
  std::string out;
  out.reserve(text.size());
  for (size_t start = 0; start < text.size();) {
    // JSON strings hold no raw newline: every one is the layout's.
    const size_t end = std::min(text.find('\n', start), text.size());
    if (start > 0) out += indent;
    out.append(text, start, end - start);
    if (end < text.size()) out += '\n';
    start = end + 1;
  }
  return json_for_terminal(out);
}

// Compact JSON (no space outside strings, as append_piece_json writes it)
// laid out as dump() with an indent of 2 lays it out `depth` levels deep,
// made printable.
std::string indented(std::string_view compact, size_t depth) {
  std::string out;
  size_t level = depth;
  const auto newline = [&] { out.append(1, '\n').append(2 * level, ' '); };
  bool in_string = false;
  for (size_t i = 0; i < compact.size(); ++i) {
    const char c = compact[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < compact.size())
        out += compact[++i];
      else if (c == '"')
        in_string = false;
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        out += c;
        break;
      case '[':
      case '{':
        out += c;
        if (i + 1 < compact.size() && (compact[i + 1] == ']' || compact[i + 1] == '}')) {
          out += compact[++i];
        } else {
          ++level;
          newline();
        }
        break;
      case ']':
      case '}':
        --level;
        newline();
        out += c;
        break;
      case ',':
        out += c;
        newline();
        break;
      case ':':
        out += ": ";
        break;
      default:
        out += c;
    }
  }
  return json_for_terminal(out);
}

// One entry of --list --json's "tensors", three levels deep. The shape is
// written number by number: a shape of millions of dimensions printed from
// a JSON array took sixteen bytes a number before the text.
void print_tensor_json(const Tensor& t, std::ostream& out) {
  constexpr std::string_view kField = ",\n      ";
  out << "{\n      \"name\": " << dumped(nlohmann::ordered_json(t.name), 3) << kField
      << "\"dtype\": " << dumped(nlohmann::ordered_json(t.dtype_name()), 3) << kField << "\"shape\": [";
  for (size_t i = 0; i < t.shape.size(); ++i) out << (i == 0 ? "\n        " : ",\n        ") << t.shape[i];
  out << (t.shape.empty() ? "]" : "\n      ]") << kField << "\"nbytes\": " << t.nbytes();
  nlohmann::ordered_json source;
  source["file"] = t.source.file;
  if (t.source.offset) source["offset"] = *t.source.offset;
  out << kField << "\"source\": " << dumped(source, 3);
  if (!t.pieces.empty()) {
    // Piece by piece: 100 000 pieces of one tensor parsed into a document
    // took 40 bytes of it for each byte of their text.
    out << kField << "\"pieces\": [";
    std::string compact;
    for (size_t i = 0; i < t.pieces.size(); ++i) {
      compact.clear();
      append_piece_json(compact, t.pieces[i]);
      out << (i == 0 ? "\n        " : ",\n        ") << indented(compact, 4);
    }
    out << "\n      ]";
  }
  // Format extras (GGUF: ggml_type, block_size, type_size ...), as in the
  // sidecar; none of their keys is one of the fields above.
  const nlohmann::json extras = t.extras();
  if (extras.is_object())
    for (const auto& [key, value] : extras.items())
      out << kField << dumped(nlohmann::ordered_json(key), 3) << ": "
          << dumped(nlohmann::ordered_json(value), 3);
  out << "\n    }";
}

}  // namespace

void print_table(const Catalog& catalog, std::ostream& out) {
  std::vector<std::array<std::string, 5>> rows;
  rows.push_back({"NAME", "DTYPE", "SHAPE", "BYTES", "SIZE"});
  std::map<std::string, std::pair<size_t, uint64_t>> per_dtype;
  uint64_t total = 0;
  for (const auto& t : catalog.tensors()) {
    // Names come from the model: escaped, so none can drive the terminal,
    // and cut to the column's width. Dtype names come from modelfs's own
    // tables.
    std::string dtype(t.dtype_name());
    rows.push_back({fit_width(printable(t.name), kNameColumns), dtype, shape_text(t),
                    std::to_string(t.nbytes()), human_bytes(t.nbytes())});
    auto& [count, bytes] = per_dtype[std::move(dtype)];
    ++count;
    bytes += t.nbytes();
    total += t.nbytes();
  }
  // Columns on the terminal, not bytes: a name in Cyrillic or Chinese
  // takes fewer columns than bytes, and the table stays aligned.
  std::vector<std::array<size_t, 5>> columns;
  columns.reserve(rows.size());
  std::array<size_t, 5> width{};
  for (const auto& row : rows) {
    auto& used = columns.emplace_back();
    for (size_t c = 0; c < 5; ++c) width[c] = std::max(width[c], used[c] = display_width(row[c]));
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    const auto& used = columns[r];
    std::string line;
    for (size_t c = 0; c < 3; ++c) line += row[c] + std::string(width[c] - used[c] + 2, ' ');
    // sizes right-aligned
    line += std::string(width[3] - used[3], ' ') + row[3] + "  ";
    line += std::string(width[4] - used[4], ' ') + row[4];
    out << line << "\n";
  }
  out << "\n"
      << catalog.tensors().size() << " tensors, " << human_bytes(total) << " (" << total << " bytes), format "
      << catalog.format << "\n";
  // Bytes per dtype, largest first: for a quantized GGUF model, the mix of
  // ggml types (q4_k, q6_k, f32 ...) that makes up its size.
  std::vector<std::pair<std::string, std::pair<size_t, uint64_t>>> summary(per_dtype.begin(),
                                                                           per_dtype.end());
  std::ranges::stable_sort(summary, std::greater{}, [](const auto& entry) { return entry.second.second; });
  for (const auto& [dtype, stats] : summary) {
    char share[16];
    std::snprintf(share, sizeof share, "%.1f%%",
                  total == 0 ? 0.0 : 100.0 * static_cast<double>(stats.second) / static_cast<double>(total));
    out << "  " << dtype << ": " << stats.first << (stats.first == 1 ? " tensor, " : " tensors, ")
        << human_bytes(stats.second) << " (" << stats.second << " bytes, " << share << ")\n";
  }
}

void print_json(const Catalog& catalog, std::ostream& out) {
  // Written tensor by tensor, as one document would print with an indent
  // of 2: a document of 200 000 entries built whole, printed and made
  // printable held four copies of the listing (350 MB for a 6 MB index).
  out << "{\n  \"format\": " << dumped(nlohmann::ordered_json(catalog.format), 1)
      << ",\n  \"files\": " << dumped(nlohmann::ordered_json(catalog.files), 1) << ",\n  \"tensors\": [";
  const auto& tensors = catalog.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    out << (i == 0 ? "\n    " : ",\n    ");
    print_tensor_json(tensors[i], out);
  }
  out << (tensors.empty() ? "]" : "\n  ]") << "\n}\n";
}

void print_info(const Catalog& catalog, bool json, std::ostream& out) {
  uint64_t total = 0;
  for (const auto& t : catalog.tensors()) total += t.nbytes();
  const auto replace = nlohmann::json::error_handler_t::replace;
  if (json) {
    // readable_json of {format, files, tensors, nbytes, metadata}, the
    // metadata printed from the catalog: a copy of a million keys first
    // held them twice.
    out << "{\n  \"format\": "
        << json_for_terminal(nlohmann::json(catalog.format).dump(-1, ' ', false, replace))
        << ",\n  \"files\": "
        << json_for_terminal(nlohmann::json(catalog.files).dump(-1, ' ', false, replace))
        << ",\n  \"tensors\": " << catalog.tensors().size() << ",\n  \"nbytes\": " << total
        << ",\n  \"metadata\": ";
    ChunkedText text(out, json_for_terminal);
    nlohmann::detail::serializer<nlohmann::json> printer(std::make_shared<ChunkedAdapter>(text), ' ',
                                                         replace);
    printer.dump(catalog.metadata, false, false, 0);
    text.finish();
    out << "\n}\n";
    return;
  }
  out << "format:   " << catalog.format << "\n";
  for (size_t i = 0; i < catalog.files.size(); ++i)
    out << (i == 0 ? "files:    " : "          ") << printable(catalog.files[i]) << "\n";
  out << "tensors:  " << catalog.tensors().size() << " (" << human_bytes(total) << ", " << total
      << " bytes)\n";
  out << "metadata: ";
  if (!catalog.metadata.is_object() || catalog.metadata.empty()) {
    out << printable_lines(with_counts(readable_json(shortened(catalog.metadata))));
    return;
  }
  // Key by key, as readable_json prints shortened(metadata), each value
  // printed from the catalog as it is read (append_shortened, ChunkedText):
  // a shortened copy of a million keys, its text and the text's two copies
  // were four times the metadata.
  ChunkedText text(out, printable_lines);
  bool first = true;
  for (const auto& [key, item] : catalog.metadata.items()) {
    const bool listed = is_list_of_containers(item) && item.size() <= kWholeArray;
    append_member(text, std::exchange(first, false), key, item, listed,
                  [](ChunkedText& into, const nlohmann::json& value) { append_shortened(into, value); });
  }
  text.finish();
  out << "\n}\n";
}

}  // namespace modelfs::cli
