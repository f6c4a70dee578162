// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include "modelfs/terminal_text.hpp"

namespace modelfs {
namespace {

TEST(TerminalText, PlainNamesAreUnchanged) {
  EXPECT_EQ(printable("model.layers.0.self_attn.q_proj.weight"), "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(printable(""), "");
  // Other scripts are names like any other.
  EXPECT_EQ(printable("ветка.权重.βάρος"), "ветка.权重.βάρος");
  // A backslash is shown as it is.
  EXPECT_EQ(printable("a\\b"), "a\\b");
}

TEST(TerminalText, ControlCharactersAreEscaped) {
  // An escape sequence that would turn the terminal red, and a newline that
  // would start a forged line of its own.
  EXPECT_EQ(printable("w\x1b[31mred\nmodelfs: ok"), "w\\x1b[31mred\\x0amodelfs: ok");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(printable("tab\there\x7f"), "tab\\x09here\\x7f");
  // C1 controls, as UTF-8 (U+009B is a one-character CSI on some terminals).
  EXPECT_EQ(printable("x\xc2\x9b" "2J"), "x\\u{009b}2J");
}

TEST(TerminalText, BidirectionalControlsAreEscaped) {
  // U+202E (right-to-left override) would show "txt.exe" as "exe.txt".
  EXPECT_EQ(printable("a\xe2\x80\xae" "b"), "a\\u{202e}b");
  EXPECT_EQ(printable("\xe2\x81\xa6" "x" "\xe2\x81\xa9"), "\\u{2066}x\\u{2069}");
  EXPECT_EQ(printable("\xe2\x80\x8f"), "\\u{200f}");
}

TEST(TerminalText, MalformedUtf8IsEscapedByteByByte) {
  EXPECT_EQ(printable("\x9b"), "\\x9b");                 // a lone continuation byte
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");        // an overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(printable("ok\xe6\x9d"), "ok\\xe6\\x9d");    // cut short at the end
  EXPECT_EQ(printable("\xe6\x9d" "a"), "\\xe6\\x9da");   // cut short by a character
}

TEST(TerminalText, DisplayWidthCountsColumns) {
  EXPECT_EQ(display_width("weight"), 6u);
  EXPECT_EQ(display_width("βάρος"), 5u);  // two-byte characters, one column each
  EXPECT_EQ(display_width("权重"), 4u);   // wide characters, two columns each
  EXPECT_EQ(display_width("e\xcc\x81"), 1u);  // e and a combining acute accent
  EXPECT_EQ(display_width(printable("a\x1b")), 5u);  // "a\x1b" as printed
}

}  // namespace
}  // namespace modelfs
