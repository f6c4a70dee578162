// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/terminal_text.hpp"
#include "modelfs/error.hpp"

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
  EXPECT_EQ(printable("x\xc2\x9b"
                      "2J"),
            "x\\u{009b}2J");
}

TEST(TerminalText, BidirectionalControlsAreEscaped) {
  // U+202E (right-to-left override) would show "txt.exe" as "exe.txt".
  EXPECT_EQ(printable("a\xe2\x80\xae"
                      "b"),
            "a\\u{202e}b");
  EXPECT_EQ(printable("\xe2\x81\xa6"
                      "x"
                      "\xe2\x81\xa9"),
            "\\u{2066}x\\u{2069}");
  EXPECT_EQ(printable("\xe2\x80\x8f"), "\\u{200f}");
}

TEST(TerminalText, MalformedUtf8IsEscapedByteByByte) {
  EXPECT_EQ(printable("\x9b"), "\\x9b");                             // a lone continuation byte
  EXPECT_EQ(printable("\xc0\xaf"), "\\xc0\\xaf");                    // an overlong '/'
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");           // a surrogate
  EXPECT_EQ(printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  EXPECT_EQ(printable("ok\xe6\x9d"), "ok\\xe6\\x9d");                // cut short at the end
  EXPECT_EQ(printable("\xe6\x9d"
                      "a"),
            "\\xe6\\x9da");  // cut short by a character
}

TEST(TerminalText, DisplayWidthCountsColumns) {
  EXPECT_EQ(display_width("weight"), 6u);
  EXPECT_EQ(display_width("βάρος"), 5u);             // two-byte characters, one column each
  EXPECT_EQ(display_width("权重"), 4u);              // wide characters, two columns each
  EXPECT_EQ(display_width("e\xcc\x81"), 1u);         // e and a combining acute accent
  EXPECT_EQ(display_width(printable("a\x1b")), 5u);  // "a\x1b" as printed
}

TEST(TerminalText, ElidedKeepsHeadAndTailAndSaysWhatIsCut) {
  EXPECT_EQ(elided("short", 64), "short");
  const std::string name = std::string(500, 'h') + std::string(500, 't');
  const std::string cut = elided(name, 100);
  EXPECT_LE(cut.size(), 100u);
  EXPECT_TRUE(cut.starts_with("hhhh"));
  EXPECT_TRUE(cut.ends_with("tttt"));
  const size_t marker = cut.find("\u2026[");
  ASSERT_NE(marker, std::string::npos);
  const size_t kept = cut.size() - (cut.find("]\u2026") + 4 - marker);
  EXPECT_NE(cut.find("[" + std::to_string(name.size() - kept) + " bytes cut]"), std::string::npos) << cut;
  // Whole characters: no UTF-8 sequence is cut in two.
  std::string wide;
  for (int i = 0; i < 1000; ++i) wide += "\xe6\x9d\x83";
  for (size_t limit : {310, 311, 312, 500}) {
    const std::string shown = printable(elided(wide, limit));
    EXPECT_EQ(shown.find("\\x"), std::string::npos) << shown;
    EXPECT_LE(elided(wide, limit).size(), limit);
  }
}

TEST(TerminalText, BoundedMessageCutsLongQuotedNamesAndTheWhole) {
  const std::string plain = "m.safetensors: safetensors: at byte 8: tensor \"w\" has bad offsets";
  EXPECT_EQ(bounded_message(plain), plain);
  const std::string name(20 << 20, 'n');
  const std::string message =
      bounded_message("m: safetensors: tensor \"" + name + "\" data_offsets run past the data");
  EXPECT_LE(message.size(), kLongestQuotedName + 80);
  EXPECT_TRUE(message.starts_with("m: safetensors: tensor \"nnn"));
  EXPECT_TRUE(message.ends_with("nnn\" data_offsets run past the data"));
  EXPECT_NE(message.find(" bytes cut]"), std::string::npos);
  // Two long names both keep their heads and tails, and the words between.
  const std::string two = bounded_message("tensor \"" + std::string(5000, 'a') + "\" is also stored in \"" +
                                          std::string(5000, 'b') + "\"");
  EXPECT_NE(two.find("a\" is also stored in \"b"), std::string::npos) << two;
  // However many quotes there are, the whole is bounded.
  std::string quotes;
  for (int i = 0; i < 100000; ++i) quotes += "\"q\" ";
  EXPECT_LE(bounded_message(quotes).size(), kLongestMessage);
  EXPECT_LE(printable(bounded_message(std::string(100000, '\x1b'))).size(), 4 * kLongestMessage);
}

TEST(TerminalText, ModelErrorsPrintLongNamesCutAndKeepThemWhole) {
  const std::string name = "head" + std::string(20 << 20, '\0') + "tail";
  const std::string reason = "tensor \"" + name + "\" data_offsets [0, 8] run past the data";
  const ModelError error("m.safetensors", "safetensors", 8, reason);
  const std::string line = printable(error.what());
  EXPECT_LT(line.size(), 4096u - 64);
  EXPECT_TRUE(line.starts_with("m.safetensors: safetensors: at byte 8: tensor \"head\\x00")) << line;
  EXPECT_TRUE(line.ends_with("\\x00tail\" data_offsets [0, 8] run past the data")) << line;
  EXPECT_NE(line.find(" bytes cut]"), std::string::npos) << line;
  EXPECT_EQ(error.reason(), reason);
  const std::string whole = error.message();
  EXPECT_EQ(whole.size(),
            std::string("m.safetensors: safetensors: at byte 8: ").size() + reason.size() + 3 * (20 << 20));
  EXPECT_TRUE(whole.ends_with("\\x00tail\" data_offsets [0, 8] run past the data"));
}

TEST(TerminalText, JsonForTerminalEscapesWhatJsonLeavesRaw) {
  const nlohmann::json doc = {{"k\u202e", "a\u2066b\u200f\u061c\xc2\x85\xc2\x9b\x7f\u200e\u2069c\nd"}};
  const std::string text = json_for_terminal(doc.dump(2));
  for (const char* raw :
       {"\u202e", "\u2066", "\u200f", "\u061c", "\xc2\x85", "\xc2\x9b", "\x7f", "\u200e", "\u2069"})
    EXPECT_EQ(text.find(raw), std::string::npos) << text;
  EXPECT_NE(text.find("\\u202e"), std::string::npos) << text;
  EXPECT_NE(text.find("\\u007f"), std::string::npos) << text;
  EXPECT_EQ(nlohmann::json::parse(text), doc);  // the same values, the layout kept
  EXPECT_NE(text.find('\n'), std::string::npos);
  EXPECT_EQ(json_for_terminal("{\"\u6743\u91cd\": 1}"), "{\"\u6743\u91cd\": 1}");
}

// The --list name column is capped: cut at whole characters, marked.
TEST(TerminalText, FitWidthCutsWholeCharactersWithAnEllipsis) {
  EXPECT_EQ(fit_width("short", 80), "short");
  EXPECT_EQ(fit_width(std::string(80, 'a'), 80), std::string(80, 'a'));
  EXPECT_EQ(fit_width(std::string(81, 'a'), 80), std::string(79, 'a') + "\xe2\x80\xa6");
  EXPECT_EQ(display_width(fit_width(std::string(100000, 'a'), 80)), 80u);
  // Wide characters (two columns each) are never split, and the cut text
  // stays within the columns.
  std::string wide;
  for (int i = 0; i < 50; ++i) wide += "\xe6\x9d\x83";  // 权
  const std::string cut = fit_width(wide, 80);
  EXPECT_LE(display_width(cut), 80u);
  EXPECT_EQ(cut, wide.substr(0, 39 * 3) + "\xe2\x80\xa6");
  // A combining mark stays with the character before it.
  const std::string accented = std::string(78, 'a') + "e\xcc\x81" + "zz";
  EXPECT_EQ(fit_width(accented, 80), std::string(78, 'a') + "e\xcc\x81" + "\xe2\x80\xa6");
  EXPECT_EQ(fit_width("abc", 0), "");
  EXPECT_EQ(fit_width("abc", 1), "\xe2\x80\xa6");
}

}  // namespace
}  // namespace modelfs
