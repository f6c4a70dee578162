// SPDX-License-Identifier: Apache-2.0
// The protobuf wire scanner: varints, every wire type, where payloads lie,
// unknown fields, merged messages, and each way hostile bytes can go wrong.
#include <gtest/gtest.h>

#include <functional>

#include "io/protobuf_wire.hpp"
#include "modelfs/error.hpp"
#include "test_files.hpp"

namespace modelfs::protobuf {
namespace {

using test::pb_bytes;
using test::pb_fixed32;
using test::pb_key;
using test::pb_uint;
using test::pb_varint;

const WireContext kContext{"model.onnx", "onnx"};

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

uint64_t decode(const std::string& bytes) {
  uint64_t pos = 0;
  return read_varint(as_bytes(bytes), pos, kContext, 0);
}

// Runs `what` and returns the ModelError it must throw.
ModelError error_of(const std::function<void()>& what) {
  try {
    what();
  } catch (const ModelError& e) {
    return e;
  }
  ADD_FAILURE() << "no ModelError thrown";
  return ModelError("", "", std::nullopt, "");
}

TEST(ProtobufWire, Varints) {
  EXPECT_EQ(decode(std::string(1, '\0')), 0u);
  EXPECT_EQ(decode("\x01"), 1u);
  EXPECT_EQ(decode("\xac\x02"), 300u);
  EXPECT_EQ(decode(pb_varint(UINT64_MAX)), UINT64_MAX);
  // int32 -1 as onnx writes it: sign-extended to ten bytes.
  EXPECT_EQ(decode("\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), UINT64_MAX);
  EXPECT_EQ(pb_varint(UINT64_MAX).size(), 10u);
}

TEST(ProtobufWire, BadVarintsRefused) {
  auto truncated = error_of([] { decode("\xff\xff"); });
  EXPECT_EQ(truncated.format(), "onnx");
  EXPECT_NE(truncated.reason().find("runs past the end"), std::string::npos);
  EXPECT_EQ(truncated.offset(), 0u);
  auto eleven = error_of([] { decode(std::string(10, '\x80') + "\x01"); });
  EXPECT_NE(eleven.reason().find("overflows 64 bits"), std::string::npos);
  auto overflow = error_of([] { decode(std::string(9, '\xff') + "\x02"); });
  EXPECT_NE(overflow.reason().find("overflows 64 bits"), std::string::npos);
}

TEST(ProtobufWire, EveryWireTypeAndWherePayloadsLie) {
  const std::string fixed64 = pb_key(3, 1) + std::string("\x01\x02\x03\x04\x05\x06\x07\x08", 8);
  const std::string bytes = pb_uint(1, 150) + pb_bytes(2, "hello") + fixed64 + pb_fixed32(4, 0xDEADBEEF);
  WireMessage message(as_bytes(bytes), 1000, &kContext);
  auto fields = message.fields();
  ASSERT_EQ(fields.size(), 4u);
  EXPECT_EQ(fields[0].number, 1u);
  EXPECT_EQ(fields[0].type, WireType::Varint);
  EXPECT_EQ(fields[0].value, 150u);
  EXPECT_EQ(fields[1].type, WireType::Length);
  EXPECT_EQ(field_text(fields[1], kContext), "hello");
  EXPECT_EQ(fields[1].offset, 1000u + 3 + 2);  // after field 1 (3 bytes), key and length
  EXPECT_EQ(fields[1].length, 5u);
  EXPECT_EQ(fields[2].type, WireType::Fixed64);
  EXPECT_EQ(fields[2].value, 0x0807060504030201u);
  EXPECT_EQ(fields[3].type, WireType::Fixed32);
  EXPECT_EQ(fields[3].value, 0xDEADBEEFu);
  EXPECT_EQ(fields[3].offset, 1000u + bytes.size() - 4);
}

TEST(ProtobufWire, UnknownFieldsAreSkippedByWireType) {
  // Field numbers nobody reads, of every wire type, around a known one.
  const std::string bytes = pb_uint(900, UINT64_MAX) + pb_bytes(901, std::string(300, 'x')) +
                            pb_fixed32(902, 7) + pb_key(903, 1) + std::string(8, '\0') + pb_bytes(8, "name") +
                            pb_uint(536870911, 1);
  WireMessage message(as_bytes(bytes), 0, &kContext);
  std::string name;
  int seen = 0;
  message.scan([&](const WireField& f) {
    ++seen;
    if (f.number == 8) name = field_text(f, kContext);
  });
  EXPECT_EQ(seen, 6);
  EXPECT_EQ(name, "name");
}

TEST(ProtobufWire, LengthPastTheEndRefused) {
  const std::string bytes = pb_uint(1, 1) + pb_key(2, 2) + pb_varint(100) + "short";
  WireMessage message(as_bytes(bytes), 0, &kContext);
  auto e = error_of([&] { message.fields(); });
  EXPECT_NE(e.reason().find("runs past the end of its message"), std::string::npos);
  EXPECT_EQ(e.offset(), 4u);  // where the payload would start
  // A length near 2^64 must not wrap around the bounds check.
  const std::string huge = pb_key(2, 2) + pb_varint(UINT64_MAX) + "x";
  EXPECT_THROW(WireMessage(as_bytes(huge), 0, &kContext).fields(), ModelError);
  // Fixed-width values cut short.
  EXPECT_THROW(WireMessage(as_bytes(pb_key(3, 5) + "ab"), 0, &kContext).fields(), ModelError);
  EXPECT_THROW(WireMessage(as_bytes(pb_key(3, 1) + "abcd"), 0, &kContext).fields(), ModelError);
}

TEST(ProtobufWire, GroupsAndInvalidKeysRefused) {
  auto group = error_of([] { WireMessage(as_bytes(pb_key(5, 3)), 0, &kContext).fields(); });
  EXPECT_NE(group.reason().find("group"), std::string::npos);
  auto end_group = error_of([] { WireMessage(as_bytes(pb_key(5, 4)), 0, &kContext).fields(); });
  EXPECT_NE(end_group.reason().find("group"), std::string::npos);
  auto type6 = error_of([] { WireMessage(as_bytes(pb_key(5, 6)), 0, &kContext).fields(); });
  EXPECT_NE(type6.reason().find("invalid wire type"), std::string::npos);
  auto zero = error_of([] { WireMessage(as_bytes(pb_uint(0, 1)), 0, &kContext).fields(); });
  EXPECT_NE(zero.reason().find("field number 0"), std::string::npos);
}

// Descends through field 1 as long as there is one.
int descend(const WireMessage& message) {
  for (const auto& f : message.fields())
    if (f.number == 1) return 1 + descend(message.child(f));
  return 0;
}

TEST(ProtobufWire, NestingDeeperThanTheLimitRefused) {
  auto nested = [](int depth) {
    std::string bytes = pb_uint(2, 1);
    for (int i = 0; i < depth; ++i) bytes = pb_bytes(1, bytes);
    return bytes;
  };
  const std::string ok = nested(kMaxMessageDepth);
  EXPECT_EQ(descend(WireMessage(as_bytes(ok), 0, &kContext)), kMaxMessageDepth);
  const std::string deep = nested(kMaxMessageDepth + 1);
  auto e = error_of([&] { descend(WireMessage(as_bytes(deep), 0, &kContext)); });
  EXPECT_NE(e.reason().find("nest deeper than"), std::string::npos);
}

TEST(ProtobufWire, ChildOfAScalarRefused) {
  const std::string bytes = pb_uint(1, 5);
  WireMessage message(as_bytes(bytes), 0, &kContext);
  auto fields = message.fields();
  EXPECT_THROW(message.child(fields[0]), ModelError);
}

TEST(ProtobufWire, RepeatedOccurrencesOfAMessageMerge) {
  // Two occurrences of field 7: their fields read as one message, in order.
  const std::string bytes =
      pb_bytes(7, pb_uint(1, 10) + pb_bytes(2, "a")) + pb_uint(3, 0) + pb_bytes(7, pb_uint(1, 20));
  WireMessage message(as_bytes(bytes), 0, &kContext);
  std::vector<WireField> occurrences;
  for (const auto& f : message.fields())
    if (f.number == 7) occurrences.push_back(f);
  auto merged = message.child(occurrences).fields();
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged[0].value, 10u);
  EXPECT_EQ(merged[2].value, 20u);  // the last occurrence of a scalar wins
  EXPECT_EQ(message.child(occurrences).depth(), 1);
}

TEST(ProtobufWire, PackedAndUnpackedVarints) {
  const std::string packed = pb_varint(1) + pb_varint(300) + pb_varint(UINT64_MAX);
  const std::string bytes = pb_bytes(5, packed) + pb_uint(5, 42);
  WireMessage message(as_bytes(bytes), 0, &kContext);
  std::vector<uint64_t> values;
  for (const auto& f : message.fields()) append_varints(f, kContext, values);
  EXPECT_EQ(values, (std::vector<uint64_t>{1, 300, UINT64_MAX, 42}));
  const std::string truncated = pb_bytes(5, "\x80");
  WireMessage bad(as_bytes(truncated), 0, &kContext);
  auto fields = bad.fields();
  EXPECT_THROW(append_varints(fields[0], kContext, values), ModelError);
  const std::string fixed = pb_fixed32(5, 1);
  auto fixed_fields = WireMessage(as_bytes(fixed), 0, &kContext).fields();
  EXPECT_THROW(append_varints(fixed_fields[0], kContext, values), ModelError);
}

}  // namespace
}  // namespace modelfs::protobuf
