// SPDX-License-Identifier: Apache-2.0
#include "io/protobuf_wire.hpp"

#include "io/budget_charge.hpp"

#include <algorithm>

#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"

namespace modelfs::protobuf {
namespace {

[[noreturn]] void fail_at(const WireContext& context, uint64_t offset, const std::string& reason) {
  throw ModelError(context.file, context.format, offset, reason);
}

uint64_t read_fixed(std::span<const std::byte> bytes, uint64_t pos, uint64_t width) {
  uint64_t value = 0;
  for (uint64_t i = width; i-- > 0;) value = (value << 8) | std::to_integer<uint64_t>(bytes[pos + i]);
  return value;
}

// Reads the field at bytes[pos] and advances pos past it.
WireField read_field(std::span<const std::byte> bytes, uint64_t& pos, uint64_t base,
                     const WireContext& context) {
  const uint64_t key_at = base + pos;
  // The key, a length or value (two varints at most, or a key and a fixed
  // value) lie in the next 20 bytes: made present (a remote model's) first.
  MappedFile::ensure_at(bytes.data() + pos, std::min<uint64_t>(20, bytes.size() - pos));
  const uint64_t key = read_varint(bytes, pos, context, base);
  const uint64_t number = key >> 3;
  const auto type = static_cast<uint8_t>(key & 7);
  if (number == 0 || number > 0x1FFFFFFF)
    fail_at(context, key_at, "protobuf field number " + std::to_string(number) + " is invalid");
  if (type == 3 || type == 4)
    fail_at(context, key_at,
            "field " + std::to_string(number) + " is a protobuf group (wire type " + std::to_string(type) +
                "), which no field of this format uses");
  if (type != 0 && type != 1 && type != 2 && type != 5)
    fail_at(context, key_at,
            "field " + std::to_string(number) + " has invalid wire type " + std::to_string(type));
  WireField field;
  field.number = static_cast<uint32_t>(number);
  field.type = static_cast<WireType>(type);
  if (field.type == WireType::Varint) {
    const uint64_t start = pos;
    field.offset = base + start;
    field.value = read_varint(bytes, pos, context, base);
    field.length = pos - start;
    field.payload = bytes.subspan(start, field.length);
    return field;
  }
  uint64_t length = field.type == WireType::Fixed64 ? 8 : 4;
  if (field.type == WireType::Length) length = read_varint(bytes, pos, context, base);
  field.offset = base + pos;
  if (length > bytes.size() - pos)
    fail_at(context, base + pos,
            "field " + std::to_string(number) + ": " +
                (field.type == WireType::Length ? "length-delimited payload" : "fixed-width value") + " of " +
                std::to_string(length) + " bytes runs past the end of its message (" +
                std::to_string(bytes.size() - pos) + " bytes remain)");
  if (field.type != WireType::Length) field.value = read_fixed(bytes, pos, length);
  field.length = length;
  field.payload = bytes.subspan(pos, length);
  pos += length;
  return field;
}

}  // namespace

uint64_t read_varint(std::span<const std::byte> bytes, uint64_t& pos, const WireContext& context,
                     uint64_t base) {
  const uint64_t start = pos;
  uint64_t value = 0;
  for (int i = 0; i < kMaxVarintBytes; ++i) {
    if (pos >= bytes.size()) fail_at(context, base + start, "varint runs past the end of its message");
    const auto byte = std::to_integer<uint64_t>(bytes[pos++]);
    value |= (byte & 0x7F) << (7 * i);
    // The tenth byte may carry bit 63 only: anything more (a continuation
    // bit included) overflows 64 bits.
    if ((byte & 0x80) == 0 && (i < kMaxVarintBytes - 1 || byte <= 1)) return value;
  }
  fail_at(context, base + start, "varint overflows 64 bits");
}

void expect_type(const WireField& field, WireType type, std::string_view what, const WireContext& context) {
  if (field.type != type)
    fail_at(context, field.offset,
            "field " + std::to_string(field.number) + " should " + std::string(what) + " but has wire type " +
                std::to_string(static_cast<int>(field.type)));
}

WireMessage::WireMessage(std::span<const std::byte> bytes, uint64_t offset, const WireContext* context)
    : chunks_{{bytes, offset}}, depth_(0), context_(context) {}

WireMessage::WireMessage(std::vector<Chunk> chunks, int depth, const WireContext* context)
    : chunks_(std::move(chunks)), depth_(depth), context_(context) {}

void WireMessage::scan(const std::function<void(const WireField&)>& visit) const {
  for (const auto& chunk : chunks_) {
    uint64_t pos = 0;
    while (pos < chunk.bytes.size()) visit(read_field(chunk.bytes, pos, chunk.offset, *context_));
  }
}

std::vector<WireField> WireMessage::fields() const {
  std::vector<WireField> out;
  scan([&](const WireField& field) { out.push_back(field); });
  return out;
}

WireMessage WireMessage::child(const WireField& field) const { return child(std::vector<WireField>{field}); }

WireMessage WireMessage::child(const std::vector<WireField>& occurrences) const {
  const uint64_t at = occurrences.empty() ? offset() : occurrences.front().offset;
  if (depth_ + 1 > kMaxMessageDepth)
    fail_at(*context_, at, "messages nest deeper than " + std::to_string(kMaxMessageDepth) + " levels");
  std::vector<Chunk> chunks;
  chunks.reserve(occurrences.size());
  for (const auto& field : occurrences) {
    expect_type(field, WireType::Length, "hold a message", *context_);
    chunks.push_back({field.payload, field.offset});
  }
  return WireMessage(std::move(chunks), depth_ + 1, context_);
}

void append_varints(const WireField& field, const WireContext& context, std::vector<uint64_t>& out) {
  if (field.type == WireType::Varint) {
    out.push_back(field.value);
    return;
  }
  expect_type(field, WireType::Length, "hold varints", context);
  uint64_t pos = 0;
  MappedFile::ensure_at(field.payload.data(), field.payload.size());
  // A packed list of a few MB is millions of values: the vector's growth is
  // refused as it passes the budget, not after the list is copied on.
  while (pos < field.payload.size()) {
    out.push_back(read_varint(field.payload, pos, context, field.offset));
    check_budget();
  }
}

std::span<const std::byte> payload_bytes(const WireField& field) {
  MappedFile::ensure_at(field.payload.data(), field.payload.size());
  return field.payload;
}

std::string_view field_text(const WireField& field, const WireContext& context) {
  expect_type(field, WireType::Length, "hold a string", context);
  MappedFile::ensure_at(field.payload.data(), field.payload.size());
  return {reinterpret_cast<const char*>(field.payload.data()), field.payload.size()};
}

}  // namespace modelfs::protobuf
