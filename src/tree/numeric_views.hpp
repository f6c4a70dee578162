// SPDX-License-Identifier: Apache-2.0
#pragma once
// The .npy bodies of tensors numpy cannot read as stored: their values
// converted, for exactly the range each read asks, into the numpy type
// npy_content() names (npy.hpp). Nothing is converted ahead of a read and
// no tensor is ever held whole: a read decodes the elements (or ggml
// blocks) it overlaps into a small buffer on the stack and copies the bytes
// asked for.
//
//   ElementView  one stored element gives one value: bfloat16, float8_*,
//                float6_*, float4_e2m1 -> float32; int4/int2 -> int8,
//                uint4/uint2 -> uint8 (sub-byte elements packed from the
//                lowest bits of each byte up, element 0 first), uint1 ->
//                uint8 (most significant bit first), nf4 -> float32
//                through its 16-value table; torch's
//                quantized integers -> float32 ((q - zero_point) x scale,
//                per tensor or per channel); unsigned integers q x scale +
//                min -> float32 or int32, float16 -> float32; or the
//                stored elements as they are (copy_conversion), for a
//                strided view of a type numpy has. In C order, or through
//                any non-negative strides (a strided view is read in runs
//                along its innermost dimension): an expand() of one element to 2^26
//                is a 4-byte storage and a 256 MiB .npy, never held whole
//                (and a view past kViewBound, npy.hpp, is not made).
//   BlockView    a ggml block type -> float32, one block at a time
//                (ggml_dequant.hpp); blocks follow each other in C order.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "modelfs/catalog.hpp"
#include "modelfs/tree.hpp"
#include "tree/ggml_dequant.hpp"
#include "tree/npy.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {

// How one stored element becomes one value of the .npy.
class ElementConversion {
 public:
  virtual ~ElementConversion() = default;
  // Bits of a stored element (2, 4, 6, 8, 16, 32, or 8 x an element size).
  virtual uint32_t stored_bits() const noexcept = 0;
  // Bytes of a converted value (at most ElementView::kMaxValueSize).
  virtual uint32_t value_size() const noexcept = 0;
  // Converts `count` stored elements, the first at element `first` of
  // `stored` (which the caller has bounds-checked), whose C-order positions
  // in the tensor start at `position`, into `count` values at `out`.
  // Reads only `stored` and what make_present() made present, holding only
  // trivially destructible objects (it runs under the mapped-bytes guard).
  virtual void convert(const std::byte* stored, uint64_t first, size_t count, uint64_t position,
                       std::byte* out) const = 0;
  // Makes present the mapped bytes it reads beyond `stored` (a remote
  // model's blocks): a per-channel conversion's scales and zero points.
  virtual void make_present(ReadScope& /*scope*/) const {}
  // True when a stored element's value depends on its position (a
  // per-channel scale), not on its bits alone.
  virtual bool by_position() const noexcept { return false; }
};

// The numpy type the .npy of a plain dtype numpy lacks holds (float32;
// int8 or uint8 for the sub-byte integers), or none.
std::optional<DType> widened_type(DType stored);
// The conversion of a plain dtype numpy lacks (bfloat16, float8/6/4,
// int4/2, uint4/2/1, nf4), or null: one per dtype, made on first use and shared by
// every view (a model of 100 000 float8 tensors needs one 1 KiB table).
std::shared_ptr<const ElementConversion> plain_conversion(DType stored);
// Elements of `element_size` bytes copied as they are (null past
// ElementView::kMaxValueSize).
std::shared_ptr<const ElementConversion> copy_conversion(uint32_t element_size);

// A torch quantized tensor's dequantization. `stored` is Int8, UInt8 or
// Int32 (qint8, quint8, qint32).
struct PerTensorAffine {
  double scale = 1;
  int64_t zero_point = 0;
};
// Per channel along `axis`: `scales` (float64 or float32) and `zero_points`
// (int64 or int32; float32/float64 for the float-qparams scheme) hold one
// entry per channel; their bytes must outlive the conversion (the catalog's
// spans, kept with their file: make_present() makes them present through it).
struct PerChannelAffine {
  ByteSpan scales;
  DType scales_dtype = DType::Float64;
  ByteSpan zero_points;
  DType zero_points_dtype = DType::Int64;
  bool float_qparams = false;  // zero points are floats, subtracted as such
  uint64_t channels = 0;       // shape[axis]
  uint64_t inner = 1;          // elements after the axis: product of shape[axis+1:]
};
std::unique_ptr<ElementConversion> affine_conversion(DType stored, const PerTensorAffine& params);
// q x scale + min (catalog.hpp, QScheme::MinScaleAffine) and the widened
// floats (QScheme::Widened): whether `q` has the parameters its scheme
// needs for `stored` (uint8 or uint16 into float32 or int32; float16 into
// float32), and its conversion (null when not).
bool dequantizes(const Quantization& q, DType stored);
std::unique_ptr<ElementConversion> dequantization(const Quantization& q, DType stored);
// Null when the parameters do not fit (sizes, dtypes, a zero channel count).
std::unique_ptr<ElementConversion> affine_conversion(DType stored, const PerChannelAffine& params);

// What these views are: bytes computed from a tensor's stored bytes, which
// they keep with their source. A read is two steps, in this order only:
// make_present(), outside the guard, makes present through the tensor's
// own file what the values read (for a remote model, the stored bytes of
// the values a read asks for when they lie in order: C-contiguous
// elements, ggml blocks; the tensor whole for a strided view, which
// reaches any of it); then compute() makes the values under the
// mapped-bytes guard.
class StoredView : public ComputedBytes {
 public:
  uint64_t size() const noexcept { return size_; }
  void read(uint64_t offset, std::span<std::byte> out, ReadScope& scope) const final;

 protected:
  StoredView(const ByteSpan& stored, uint64_t reach, uint64_t size)
      : stored_(stored.subspan(0, reach)), size_(size) {}
  // The stored bytes made present (ModelError when they cannot be had):
  // all, or [offset, offset + length) of them (clamped).
  void prepare_stored(ReadScope& scope) const { stored_.span(&scope); }
  void prepare_stored(uint64_t offset, uint64_t length, ReadScope& scope) const {
    if (offset >= stored_.size()) return;
    stored_.subspan(offset, std::min(length, stored_.size() - offset)).span(&scope);
  }
  // Where they lie: read by compute() only, after make_present().
  const std::byte* base() const noexcept { return stored_.data(); }

 private:
  // The stored bytes the values [offset, offset + length) are made of,
  // made present (ModelError when they cannot be had).
  virtual void make_present(uint64_t offset, uint64_t length, ReadScope& scope) const = 0;
  // Bytes [offset, offset + out.size()) of the values into `out`, reading
  // only what make_present() made present and holding only trivially
  // destructible objects (it runs under the guard).
  virtual void compute(uint64_t offset, std::span<std::byte> out) const = 0;

  ByteSpan stored_;  // the bytes the values are read from
  uint64_t size_ = 0;
};

// The elements of a big-endian tensor (Encoded::Method::ByteSwap): its raw
// file, and its .npy's body, made per read by reversing every `swap` bytes
// of the stored ones.
class SwapView final : public StoredView {
 public:
  SwapView(const ByteSpan& stored, uint32_t swap)
      : StoredView(stored, stored.size(), stored.size()), swap_(swap) {}

 private:
  void make_present(uint64_t offset, uint64_t length, ReadScope& scope) const override;
  void compute(uint64_t offset, std::span<std::byte> out) const override;
  uint64_t swap_;
};

// The raw bytes of an array a protocol-2 pickle stored as latin-1 text in
// UTF-8 (Encoded::Method::Latin1Utf8; latin1_size in utf8.hpp): a byte
// below 0x80 as itself, any other as two. Where a byte's text lies depends
// on every byte before it, so the view keeps where each kMarkBytes-th byte
// starts, found by one pass over the text when the tree is built, and a
// read decodes from the mark at or before it. A text that no longer
// decodes (changed under the mount) fails the read.
class Latin1View final : public ComputedBytes {
 public:
  static constexpr uint64_t kMarkBytes = 16 << 10;
  // The view of `stored`, or null when it is not latin-1 text of `size`
  // bytes.
  static std::unique_ptr<Latin1View> make(const ByteSpan& stored, uint64_t size);
  uint64_t size() const noexcept { return size_; }
  void read(uint64_t offset, std::span<std::byte> out, ReadScope& scope) const override;

 private:
  Latin1View(const ByteSpan& stored, uint64_t size) : stored_(stored), size_(size) {}
  ByteSpan stored_;
  uint64_t size_ = 0;
  std::vector<uint64_t> marks_;  // where byte i x kMarkBytes starts in the text
};

class ElementView final : public StoredView {
 public:
  static constexpr uint32_t kMaxValueSize = 16;  // complex128

  // The converted view of the tensor with `shape` and `strides` (in
  // elements) whose first element starts `stored`, or null when an element
  // would lie outside `stored`, a stride is negative, the sizes overflow or
  // the view would pass kViewBound (npy.hpp).
  // Shape and strides must outlive the view.
  static std::unique_ptr<ElementView> make(const ByteSpan& stored, std::span<const uint64_t> shape,
                                           std::span<const int64_t> strides,
                                           std::shared_ptr<const ElementConversion> conversion);
  ElementView(ElementView&&) = default;
  // The dimensions along which the view only repeats values (stride 0,
  // more than one long), when it has any and its conversion gives a stored
  // element one value wherever it appears: then the view's values are
  // those with these dimensions' indices at 0, each appearing as many
  // times as the product of their lengths (an expand() of a tensor has
  // the tensor's statistics). Empty otherwise.
  std::vector<bool> repeated_dimensions() const;

 private:
  ElementView(const ByteSpan& stored, uint64_t reach, uint64_t size) : StoredView(stored, reach, size) {}
  void make_present(uint64_t offset, uint64_t length, ReadScope& scope) const override;
  void compute(uint64_t offset, std::span<std::byte> out) const override;
  // Values of elements [position, position + count) (C order) into `out`.
  void values(uint64_t position, size_t count, std::byte* out) const;

  std::span<const uint64_t> shape_;
  std::span<const int64_t> strides_;
  bool contiguous_ = true;
  std::shared_ptr<const ElementConversion> conversion_;
};

// Bytes [offset, offset + out.size()) of a run of converted values of
// `value_size` bytes each, made by values(first, count, into) at most
// `chunk` at a time. Whole values are converted straight into `out`
// (conversions write through memcpy: no alignment needed); a value cut by
// either end of the range is converted into a buffer of its own and its
// bytes in range copied. Holds nothing to destroy (the mapped-bytes rule).
template <typename Values>
void fill_values(uint64_t offset, std::span<std::byte> out, uint32_t value_size, size_t chunk,
                 const Values& values) {
  std::byte value[ElementView::kMaxValueSize];
  uint64_t position = offset / value_size;
  const size_t skip = offset % value_size;  // bytes of the first value before the range
  std::byte* to = out.data();
  size_t left = out.size();
  if (skip != 0) {
    values(position++, 1, value);
    const size_t take = std::min<size_t>(value_size - skip, left);
    std::memcpy(to, value + skip, take);
    to += take;
    left -= take;
  }
  while (left >= value_size) {
    const size_t count = std::min(chunk, left / value_size);
    values(position, count, to);
    position += count;
    to += count * value_size;
    left -= count * value_size;
  }
  if (left > 0) {
    values(position, 1, value);
    std::memcpy(to, value, left);
  }
}

class BlockView final : public StoredView {
 public:
  // The float32 values of `numel` elements of ggml type `type` stored in
  // `stored`; null when the type has no kernels, numel is not a whole
  // number of blocks, the blocks do not fit or the view would pass
  // kViewBound (npy.hpp).
  static std::unique_ptr<BlockView> make(const ByteSpan& stored, const GgmlType& type, uint64_t numel);
  BlockView(BlockView&&) = default;

 private:
  BlockView(const ByteSpan& stored, uint64_t reach, uint64_t size) : StoredView(stored, reach, size) {}
  void make_present(uint64_t offset, uint64_t length, ReadScope& scope) const override;
  void compute(uint64_t offset, std::span<std::byte> out) const override;
  const GgmlType* type_ = nullptr;
  const ggml::GgmlKernels* kernels_ = nullptr;
};

// Where a tree keeps its converted views: side by side in storage sized
// for them up front, not one heap block each scattered among the build's
// short-lived objects, pinning their pages. Views never move once added.
class ViewArena {
 public:
  ViewArena(size_t elements, size_t blocks);
  // The view added (null when make() refuses it).
  const ElementView* add(std::unique_ptr<ElementView> view);
  const BlockView* add(std::unique_ptr<BlockView> view);

 private:
  template <typename View>
  static const View* place(std::vector<View>& reserved, std::deque<View>& more, std::unique_ptr<View> view);
  std::vector<ElementView> elements_;  // never past the capacity reserved
  std::vector<BlockView> blocks_;
  std::deque<ElementView> more_elements_;  // past it (not expected)
  std::deque<BlockView> more_blocks_;
};

}  // namespace modelfs
