// SPDX-License-Identifier: Apache-2.0
#pragma once
// Text from a model, shown to a person. Tensor names, archive member names
// and shard file names end up in `--list` tables and in messages; a hostile
// model could put terminal control sequences there (colours, cursor moves,
// a newline that forges a log line), so whatever is printed for reading
// goes through printable(). JSON output needs none of this: it escapes.
#include <cstddef>
#include <string>
#include <string_view>

namespace modelfs {

// `text` with everything a terminal would act on escaped: C0 controls and
// DEL as \xNN (newline and tab too: a message stays one line), C1 controls
// and the bidirectional marks, embeddings and isolates as \u{NNNN}, and
// every byte that is not part of well-formed UTF-8 as \xNN. Printable
// characters of any script are kept as they are.
std::string printable(std::string_view text);

// JSON text (nlohmann's dump, valid UTF-8) with each character that
// printable() escapes and JSON leaves raw (DEL, C1 controls, the
// bidirectional marks) written as \uNNNN: the same JSON values, and nothing
// in it a terminal acts on. For the JSON that modelfs prints to stdout.
std::string json_for_terminal(std::string_view json_text);

// The columns `text` takes on a UTF-8 terminal, for aligning tables: wide
// (East Asian) characters count two, combining marks none. Meant for text
// that printable() returned.
size_t display_width(std::string_view text);

// `text` (printable()'s output) fitted into `columns` terminal columns: as it
// is when it fits, else its longest prefix of at most `columns - 1` columns
// (whole characters) followed by "\u2026" (an ellipsis, one column). For
// table columns, so that one long name cannot widen every row.
std::string fit_width(std::string_view text, size_t columns);

// `text` as it is when it has at most `limit` bytes, else its first and last
// bytes (whole UTF-8 characters) around "…[N bytes cut]…", N the bytes left
// out, in at most `limit` bytes all told (`limit` of at least 64).
std::string elided(std::string_view text, size_t limit);

// The longest message modelfs prints, in bytes before printable(): at most
// four bytes printed for each, a line stays under 4 KiB.
inline constexpr size_t kLongestMessage = 960;
// The longest quoted name a message keeps whole.
inline constexpr size_t kLongestQuotedName = 256;

// A message for one line of stderr or a log: every piece of `text` between
// double quotes (a name from the model, as messages quote them) of more than
// kLongestQuotedName bytes elided to that, and then the whole elided to
// kLongestMessage. What is cut is said; head and tail of each name stay.
std::string bounded_message(std::string_view text);

}  // namespace modelfs
