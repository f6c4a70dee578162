// SPDX-License-Identifier: Apache-2.0
// The restricted unpickler, opcode by opcode, on hand-written pickles (the
// bytes CPython's pickle module emits for the same values), plus limits and
// every truncation of a valid stream.
#include <gtest/gtest.h>

#include <cstring>

#include "io/unpickler.hpp"
#include "modelfs/error.hpp"

namespace modelfs::pickle {
namespace {

using namespace std::string_literals;

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

Pickle load(const std::string& bytes) { return unpickle(as_bytes(bytes), "t.pkl", "pickle"); }

std::string refusal(const std::string& bytes) {
  try {
    load(bytes);
  } catch (const ModelError& e) {
    return e.reason();
  }
  return "<accepted>";
}

std::string u32le(uint32_t v) {
  std::string s(4, '\0');
  std::memcpy(s.data(), &v, 4);
  return s;
}
std::string u64le(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}
std::string unicode(const std::string& s) { return "X" + u32le(static_cast<uint32_t>(s.size())) + s; }

const std::string P2 = "\x80\x02"s;

TEST(Unpickler, IntegersOfEveryWidth) {
  auto p = load(P2 + "(K\x07M\xff\xffJ\xfe\xff\xff\xff\x8a\x01\xff\x8a\x00\x8a\x08"s +
                "\x00\x00\x00\x00\x00\x00\x00\x80"s + "\x8b"s + u32le(2) + "\x00\x01t."s);
  ASSERT_EQ(p.root->kind, Kind::Tuple);
  const auto& v = p.root->items;
  ASSERT_EQ(v.size(), 7u);
  EXPECT_EQ(v[0]->integer, 7);
  EXPECT_EQ(v[1]->integer, 65535);  // BININT2 is unsigned
  EXPECT_EQ(v[2]->integer, -2);
  EXPECT_EQ(v[3]->integer, -1);         // LONG1 is two's complement
  EXPECT_EQ(v[4]->integer, 0);          // zero-length LONG1
  EXPECT_EQ(v[5]->integer, INT64_MIN);  // eight-byte LONG1 still fits
  EXPECT_EQ(v[6]->integer, 256);
  EXPECT_EQ(p.protocol, 2);
}

TEST(Unpickler, Long1OverEightBytesIsKeptAsBigInt) {
  // The legacy torch.save magic number, 0x1950a86a20f9469cfc6c.
  auto p = load("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."s);
  ASSERT_EQ(p.root->kind, Kind::BigInt);
  EXPECT_EQ(p.root->text, "\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"s);
  EXPECT_EQ(p.end, 15u);
}

TEST(Unpickler, Long4IsBounded) {
  EXPECT_NE(refusal(P2 + "\x8b"s + u32le(5000) + std::string(5000, '\0') + "."), "<accepted>");
  EXPECT_NE(refusal(P2 + "\x8b"s + u32le(0xFFFFFFFF) + "."), "<accepted>");
}

TEST(Unpickler, FloatsBoolsNone) {
  auto p = load(P2 + "(G\x3f\xf8\x00\x00\x00\x00\x00\x00\x88\x89Nt."s);
  const auto& v = p.root->items;
  EXPECT_EQ(v[0]->real, 1.5);  // BINFLOAT is big-endian
  EXPECT_TRUE(v[1]->boolean);
  EXPECT_FALSE(v[2]->boolean);
  EXPECT_EQ(v[3]->kind, Kind::None);
}

TEST(Unpickler, StringsAndBytes) {
  auto p = load("\x80\x04("s + unicode("h\xc3\xa9"s) +
                "\x8c\x02"s
                "ab\x8d"s +
                u64le(3) + "xyz" + "B" + u32le(2) + "\x00\x01"s + "C\x01z\x8e"s + u64le(1) + "q\x96"s +
                u64le(0) + "U\x02py"s + "T" + u32le(1) + "s" + "t.");
  const auto& v = p.root->items;
  ASSERT_EQ(v.size(), 9u);
  EXPECT_EQ(v[8]->text, "s");
  EXPECT_EQ(v[0]->text, "h\xc3\xa9"s);
  EXPECT_EQ(v[1]->text, "ab");
  EXPECT_EQ(v[2]->text, "xyz");  // BINUNICODE8
  EXPECT_EQ(v[3]->kind, Kind::Bytes);
  EXPECT_EQ(v[3]->text, "\x00\x01"s);
  EXPECT_EQ(v[4]->text, "z");
  EXPECT_EQ(v[5]->text, "q");
  EXPECT_EQ(v[6]->kind, Kind::Bytes);
  EXPECT_EQ(v[6]->text, "");
  EXPECT_EQ(v[7]->text, "py");
}

TEST(Unpickler, ContainersMarksAndTuples) {
  // {'a': [1, 2], 'b': (), 'c': (9,), 'd': (1, 2)}
  auto p = load(P2 + "}(" + unicode("a") + "]K\x01\x61K\x02\x61"s + unicode("b") + ")" + unicode("c") +
                "K\x09\x85"s + unicode("d") + "K\x01K\x02\x86u"s + ".");
  ASSERT_EQ(p.root->kind, Kind::Dict);
  ASSERT_EQ(p.root->entries.size(), 4u);
  EXPECT_EQ(p.root->entries[0].first->text, "a");
  ASSERT_EQ(p.root->entries[0].second->kind, Kind::List);
  EXPECT_EQ(p.root->entries[0].second->items.size(), 2u);
  EXPECT_EQ(p.root->entries[1].second->kind, Kind::Tuple);
  EXPECT_EQ(p.root->entries[2].second->items[0]->integer, 9);
  EXPECT_EQ(p.root->entries[3].second->items.size(), 2u);
  EXPECT_EQ(p.root->depth, 1u);
}

TEST(Unpickler, AppendsSetItemsAndSmallTuples) {
  auto p = load(P2 + "](K\x01K\x02K\x03"s + "e" + ".");
  ASSERT_EQ(p.root->kind, Kind::List);
  EXPECT_EQ(p.root->items.size(), 3u);

  auto q = load(P2 + "K\x01K\x02K\x03\x87."s);
  ASSERT_EQ(q.root->kind, Kind::Tuple);
  EXPECT_EQ(q.root->items[2]->integer, 3);

  auto d = load(P2 + "}(K\x01K\x02K\x03K\x04u"s + "K\x05K\x06s."s);
  ASSERT_EQ(d.root->kind, Kind::Dict);
  ASSERT_EQ(d.root->entries.size(), 3u);
  EXPECT_EQ(d.root->entries[2].second->integer, 6);

  auto s = load("\x80\x04\x8f(K\x01K\x02\x90."s);
  EXPECT_EQ(s.root->kind, Kind::Set);
  EXPECT_EQ(s.root->items.size(), 2u);
  auto f = load("\x80\x04(K\x01\x91."s);
  EXPECT_EQ(f.root->kind, Kind::Set);
}

TEST(Unpickler, MemoSharesTheSameValue) {
  auto p = load(P2 + "(]q\x00h\x00r"s + u32le(70000) + "j" + u32le(70000) + "t.");
  const auto& v = p.root->items;
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0], v[1]);
  EXPECT_EQ(v[1], v[2]);
  EXPECT_NE(refusal(P2 + "h\x05."s), "<accepted>");
  EXPECT_NE(refusal(P2 + "j" + u32le(9) + "."), "<accepted>");
}

TEST(Unpickler, Protocol4FrameStackGlobalMemoize) {
  // pickle.dumps(collections.OrderedDict(a=1), protocol=4)
  const std::string body =
      "\x8c\x0b"s
      "collections\x94\x8c\x0bOrderedDict\x94\x93\x94)R\x94\x8c\x01"s
      "a\x94K\x01s."s;
  auto p = load("\x80\x04\x95"s + u64le(body.size()) + body);
  ASSERT_EQ(p.root->kind, Kind::Dict);
  ASSERT_EQ(p.root->entries.size(), 1u);
  EXPECT_EQ(p.root->entries[0].first->text, "a");
  EXPECT_TRUE(p.unknown_globals.empty());
  EXPECT_NE(refusal("\x80\x04\x95"s + u64le(1000) + "N."), "<accepted>");
}

TEST(Unpickler, KnownGlobalsFoldIntoPlainValues) {
  auto size = load(P2 + "ctorch\nSize\n(K\x02K\x03t\x85R."s);
  ASSERT_EQ(size.root->kind, Kind::Tuple);
  EXPECT_EQ(size.root->items[1]->integer, 3);

  // Protocol 2 bytes: _codecs.encode('\xff\x00', 'latin1')
  auto bytes = load(P2 + "c_codecs\nencode\n" + unicode("\xc3\xbf\x00"s) + unicode("latin1") + "\x86R."s);
  ASSERT_EQ(bytes.root->kind, Kind::Bytes);
  EXPECT_EQ(bytes.root->text, "\xff\x00"s);

  auto dict = load(P2 +
                   "ccollections\nOrderedDict\n]K\x01K\x02\x86"s
                   "a\x85R."s);
  ASSERT_EQ(dict.root->kind, Kind::Dict);
  EXPECT_EQ(dict.root->entries.size(), 1u);

  auto py2 = load(P2 +
                  "c__builtin__\nset\n](K\x01K\x02"s
                  "e\x85R."s);
  EXPECT_EQ(py2.root->kind, Kind::Set);
}

TEST(Unpickler, BuildMergesStatesAndAStateMergedIntoItselfIsUnchanged) {
  // obj.__setstate__-less BUILD twice with one memoized dict (DUP-like, as
  // a fuzzer found: appending a vector to itself read freed memory), then
  // with a second dict, which Python merges into __dict__.
  auto p = load(P2 + "cargparse\nNamespace\n)\x81}q\x00"s + unicode("a") + "K\x01sb"s + "h\x00"s + "b}" +
                unicode("b") + "K\x02sb."s);
  ASSERT_EQ(p.root->kind, Kind::Call);
  ASSERT_NE(p.root->state, nullptr);
  ASSERT_EQ(p.root->state->entries.size(), 2u);
  EXPECT_EQ(p.root->state->entries[0].first->text, "a");
  EXPECT_EQ(p.root->state->entries[1].first->text, "b");
}

TEST(Unpickler, CopiesFromValueToValueAreBounded) {
  // bytearray-like copies of one memoized 64 KiB string, and OrderedDict
  // copies of one memoized dict of 4 096 entries: each copy is 7 bytes of
  // pickle, so without a bound a small file could fill memory.
  auto copies = [](const std::string& source, const std::string& global, int count) {
    std::string p = P2 + source + "q\x00"s + global + "q\x01"s;
    for (int i = 0; i < count; ++i) p += "h\x01h\x00\x85R0"s;
    return p + "N.";
  };
  const std::string text = unicode(std::string(65536, 'a'));
  std::string dict = "}(";
  for (int i = 0; i < 4096; ++i) dict += "K\x01K\x02"s;
  dict += "u";
  for (const auto& [source, global] :
       {std::pair{text, "c_codecs\nencode\n"s}, std::pair{dict, "ccollections\nOrderedDict\n"s}}) {
    EXPECT_EQ(refusal(copies(source, global, 100)), "<accepted>");
    EXPECT_NE(refusal(copies(source, global, 1100)).find("bytes from value to value"), std::string::npos);
  }
}

TEST(Unpickler, PersistentIdsAreRecorded) {
  auto p = load(P2 + "(" + unicode("storage") + "ctorch\nFloatStorage\n" + unicode("0") + unicode("cpu") +
                "K\x04tQ."s);
  ASSERT_EQ(p.root->kind, Kind::PersistentId);
  const Value* id = p.root->items[0];
  ASSERT_EQ(id->kind, Kind::Tuple);
  EXPECT_EQ(id->items[1]->kind, Kind::Global);
  EXPECT_EQ(id->items[1]->known, KnownGlobal::Storage);
  auto text = load("(Pstorage-0\nt.");
  EXPECT_EQ(text.root->items[0]->kind, Kind::PersistentId);
  EXPECT_EQ(text.root->items[0]->items[0]->text, "storage-0");
}

TEST(Unpickler, RebuildCallsAreRecordedNotCalled) {
  auto p = load(P2 + "ctorch._utils\n_rebuild_tensor_v2\n(K\x00K\x01t"s + "R.");
  ASSERT_EQ(p.root->kind, Kind::Call);
  EXPECT_TRUE(p.root->is_call_of(KnownGlobal::RebuildTensorV2));
  EXPECT_EQ(p.root->args->items.size(), 2u);
}

TEST(Unpickler, UnknownGlobalsBecomeOpaqueObjectsWithState) {
  // os.system('touch x') and an argparse Namespace holding a value.
  auto p = load(P2 + "(cos\nsystem\n" + unicode("touch x") + "\x85R"s + "cargparse\nNamespace\n)\x81}"s +
                unicode("lr") + "G\x3f\xe0\x00\x00\x00\x00\x00\x00sbt."s);
  ASSERT_EQ(p.root->kind, Kind::Tuple);
  const Value* call = p.root->items[0];
  ASSERT_EQ(call->kind, Kind::Call);
  EXPECT_EQ(call->qualified_name(), "os.system");
  EXPECT_EQ(call->args->items[0]->text, "touch x");
  const Value* ns = p.root->items[1];
  EXPECT_TRUE(ns->newobj);
  ASSERT_NE(ns->state, nullptr);
  EXPECT_EQ(ns->state->entries[0].second->real, 0.5);
  EXPECT_EQ(p.unknown_globals, (std::vector<std::string>{"os.system", "argparse.Namespace"}));
  auto stacked = load(
      "\x80\x04\x8c\x08"s
      "builtins\x8c\x04"s
      "eval\x93"s +
      unicode("1") + "\x85R."s);
  EXPECT_EQ(stacked.root->qualified_name(), "builtins.eval");
}

TEST(Unpickler, TorchScriptObjectsAndJitHelpers) {
  auto p = load(P2 + "c__torch__.m\nM\n)\x81}("s + unicode("training") + "\x88ub."s);
  ASSERT_EQ(p.root->kind, Kind::Call);
  EXPECT_EQ(p.root->callable->known, KnownGlobal::TorchScriptClass);
  ASSERT_NE(p.root->state, nullptr);
  EXPECT_TRUE(p.unknown_globals.empty());

  auto list = load(P2 +
                   "ctorch.jit._pickle\nbuild_intlist\n](K\x01K\x02"s
                   "e\x85R."s);
  ASSERT_EQ(list.root->kind, Kind::List);
  EXPECT_EQ(list.root->items.size(), 2u);
}

TEST(Unpickler, Protocol0TextOpcodes) {
  auto p = load("(I42\nI01\nL123L\nF2.5\nS'a\\x41\\n'\nVa\\u00e9\np0\ng0\nl."s);
  ASSERT_EQ(p.root->kind, Kind::List);
  const auto& v = p.root->items;
  ASSERT_EQ(v.size(), 7u);
  EXPECT_EQ(v[0]->integer, 42);
  EXPECT_TRUE(v[1]->boolean);
  EXPECT_EQ(v[2]->integer, 123);
  EXPECT_EQ(v[3]->real, 2.5);
  EXPECT_EQ(v[4]->text, "aA\n");
  EXPECT_EQ(v[5]->text, "a\xc3\xa9"s);
  EXPECT_EQ(v[5], v[6]);
  auto d = load("(dp0\nS'k'\nI1\ns.");
  EXPECT_EQ(d.root->kind, Kind::Dict);
}

TEST(Unpickler, NestingDepthIsLimited) {
  std::string deep = P2;
  const int n = static_cast<int>(kMaxNesting) + 10;
  for (int i = 0; i < n; ++i) deep += "]";
  for (int i = 0; i < n - 1; ++i) deep += "a";
  deep += ".";
  EXPECT_NE(refusal(deep).find("nest deeper"), std::string::npos);

  std::string ok = P2;
  for (int i = 0; i < 100; ++i) ok += "]";
  for (int i = 0; i < 99; ++i) ok += "a";
  EXPECT_EQ(load(ok + ".").root->depth, 99u);
}

TEST(Unpickler, MalformedStreamsAreRefused) {
  EXPECT_NE(refusal(P2 + "a."), "<accepted>");                   // stack underflow
  EXPECT_NE(refusal(P2 + "t."), "<accepted>");                   // no mark
  EXPECT_NE(refusal(P2 + "."), "<accepted>");                    // STOP on empty stack
  EXPECT_NE(refusal(P2 + "(K\x01u."s), "<accepted>");            // SETITEMS on nothing
  EXPECT_NE(refusal(P2 + "K\x01(K\x01K\x02u."s), "<accepted>");  // SETITEMS on an int
  EXPECT_NE(refusal(P2 + "\x82\x01."s), "<accepted>");           // EXT1
  EXPECT_NE(refusal(P2 + "\x97."s), "<accepted>");               // NEXT_BUFFER
  EXPECT_NE(refusal(P2 + "\xff."s), "<accepted>");               // unknown opcode
  EXPECT_NE(refusal("\x80\x06N."s), "<accepted>");               // protocol 6
  EXPECT_NE(refusal(P2 + "cos\nsystem"), "<accepted>");          // GLOBAL without newline
  EXPECT_NE(refusal(P2 + "X" + u32le(0xFFFFFFF0) + "ab."), "<accepted>");
  EXPECT_NE(refusal(P2 + "\x8d"s + u64le(~uint64_t{0}) + "."), "<accepted>");
  EXPECT_NE(refusal("(I99999999999999999999\nl."), "<accepted>");
}

TEST(Unpickler, EveryTruncationIsRefused) {
  const std::string whole = P2 + "ccollections\nOrderedDict\nq\x00)Rq\x01("s + unicode("w") +
                            "ctorch._utils\n_rebuild_tensor_v2\n((" + unicode("storage") +
                            "ctorch\nFloatStorage\n" + unicode("0") + unicode("cpu") +
                            "K\x06tQK\x00K\x02K\x03\x86K\x03K\x01\x86\x89h\x00)Rtq\x02Ru"s +
                            "G\x3f\xf0\x00\x00\x00\x00\x00\x00"s
                            "0.";
  auto p = load(whole);
  ASSERT_EQ(p.root->kind, Kind::Dict);
  EXPECT_EQ(p.end, whole.size());
  for (size_t n = 0; n + 1 < whole.size(); ++n)
    EXPECT_THROW(load(whole.substr(0, n)), ModelError) << "prefix of " << n << " bytes";
}

TEST(ValueStore, AddressesStayPutAcrossChunksAndMoves) {
  ValueStore store;
  std::vector<Value*> made;
  const size_t count = 2 * ValueStore::kChunkValues + 3;  // into a third chunk
  for (size_t i = 0; i < count; ++i) {
    Value& v = store.emplace_back();
    EXPECT_EQ(v.kind, Kind::None);  // default-constructed
    v.integer = static_cast<int64_t>(i);
    v.text = "value " + std::to_string(i);  // owns heap memory: destroyed with the store
    made.push_back(&v);
  }
  ASSERT_EQ(store.size(), count);
  ValueStore moved = std::move(store);
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.begin(), store.end());
  size_t i = 0;
  for (const Value& v : moved) {
    ASSERT_LT(i, count);
    EXPECT_EQ(&v, made[i]);
    EXPECT_EQ(v.integer, static_cast<int64_t>(i));
    ++i;
  }
  EXPECT_EQ(i, count);
  ValueStore other;
  other.emplace_back().text = "replaced";
  other = std::move(moved);
  EXPECT_EQ(other.size(), count);
  EXPECT_EQ(other.begin()->text, "value 0");
}

}  // namespace
}  // namespace modelfs::pickle
