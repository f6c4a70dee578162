// SPDX-License-Identifier: Apache-2.0
#pragma once
// A lazy scanner for the protobuf wire format (docs/formats.md, "Protobuf wire format"), over bytes
// that stay in the mapping.
//
// Why not the protobuf library: generated classes parse a message by copying
// every bytes field into its own std::string, so loading a model would copy
// every weight of every raw_data field. This scanner only records where each
// field's payload lies (an offset and a length into the mapped file), so a
// reader can serve those bytes in place and decode only what it needs.
//
// Every length is checked against the bytes of the enclosing message before
// use; nesting is bounded by kMaxMessageDepth, checked where a message is
// entered, so a reader that recurses through WireMessage::child cannot
// exhaust the stack on a hostile file.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace modelfs::protobuf {

// Deeper than any real ONNX model nests (a subgraph costs three levels:
// attribute, graph, node); deep enough for If/Loop bodies many levels down.
inline constexpr int kMaxMessageDepth = 100;
inline constexpr int kMaxVarintBytes = 10;

enum class WireType : uint8_t { Varint = 0, Fixed64 = 1, Length = 2, Fixed32 = 5 };

// One field occurrence. `offset` is the file offset of the payload: the
// varint's first byte, the fixed bytes, or the first byte after a length.
struct WireField {
  uint32_t number = 0;
  WireType type = WireType::Varint;
  uint64_t value = 0;                  // the varint, or the fixed-width value (LE)
  uint64_t offset = 0;                 // payload's file offset
  uint64_t length = 0;                 // payload bytes (the varint's own bytes for type 0)
  std::span<const std::byte> payload;  // those bytes
};

// The context a scan reports errors with.
struct WireContext {
  std::string file;
  std::string format;
};

// Decodes one varint at bytes[pos], advancing pos. Throws ModelError when
// the varint runs past the end, is longer than 10 bytes, or overflows 64
// bits. `base` is the file offset of bytes[0].
uint64_t read_varint(std::span<const std::byte> bytes, uint64_t& pos, const WireContext& context,
                     uint64_t base);

// Throws ModelError "field N should <what> but has wire type T" unless
// `field` has wire type `type`.
void expect_type(const WireField& field, WireType type, std::string_view what, const WireContext& context);

// A message: one or more encoded chunks read in order. A non-repeated
// message field that occurs several times is the merge of its occurrences,
// which protobuf defines as parsing their concatenation, so such a field is
// one WireMessage over every occurrence's bytes.
class WireMessage {
 public:
  struct Chunk {
    std::span<const std::byte> bytes;
    uint64_t offset;  // file offset of bytes[0]
  };

  // The whole file (or any top-level span) as the outermost message.
  WireMessage(std::span<const std::byte> bytes, uint64_t offset, const WireContext* context);

  // Every field in order. Throws ModelError on malformed input.
  std::vector<WireField> fields() const;
  // Calls `visit` for each field in order; same checks as fields().
  void scan(const std::function<void(const WireField&)>& visit) const;

  // The message held by a length-delimited field, one level deeper.
  WireMessage child(const WireField& field) const;
  // The merge of several occurrences of one non-repeated message field.
  WireMessage child(const std::vector<WireField>& occurrences) const;

  int depth() const noexcept { return depth_; }
  uint64_t offset() const noexcept { return chunks_.empty() ? 0 : chunks_.front().offset; }
  const WireContext& context() const noexcept { return *context_; }

 private:
  WireMessage(std::vector<Chunk> chunks, int depth, const WireContext* context);

  std::vector<Chunk> chunks_;
  int depth_ = 0;
  const WireContext* context_;
};

// The values of a repeated varint field, whether packed (wire type 2) or
// unpacked (one field per value), in order, appended to `out`.
void append_varints(const WireField& field, const WireContext& context, std::vector<uint64_t>& out);

// The string or bytes of a length-delimited field; throws if the field has
// another wire type.
std::string_view field_text(const WireField& field, const WireContext& context);
// A field's payload, made present (a remote model's blocks): how a reader
// takes the bytes of a packed list or a raw value.
std::span<const std::byte> payload_bytes(const WireField& field);

}  // namespace modelfs::protobuf
