// SPDX-License-Identifier: Apache-2.0
#include "formats/ggml_legacy.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <string_view>
#include <unordered_set>

#include "formats/ggml_tensor.hpp"
#include "io/budget_charge.hpp"
#include "io/byte_reader.hpp"
#include "io/checked_math.hpp"
#include "modelfs/error.hpp"

namespace modelfs::ggml_legacy {
namespace {

constexpr std::string_view kFormat = "ggml";
constexpr std::string_view kGgml = "lmgg";  // 0x67676d6c as stored
constexpr std::string_view kGgmf = "fmgg";  // 0x67676d66
constexpr std::string_view kGgjt = "tjgg";  // 0x67676a74
// whisper.cpp's ftype is ftype + 1000 x the quantization version; version
// 2 is the block layouts of ggml's table (the last change, May 2023).
constexpr int32_t kQuantVersionFactor = 1000;
constexpr int32_t kCurrentQuantVersion = 2;
constexpr uint64_t kGgjtAlignment = 32;

// What a layout's header tells the walk over its records, and what
// metadata.json says of it.
struct Layout {
  std::string_view id;       // metadata's "layout"
  std::string_view program;  // as messages name it
  int32_t min_dims = 0;
  int32_t max_dims = 4;
  bool aligned = false;        // 'ggjt': data on the next multiple of 32 bytes
  bool rwkv_codes = false;     // rwkv.cpp's own type codes
  std::string blocks_refused;  // why block types are refused; empty: served
  nlohmann::json hparams = nlohmann::json::object();
  std::optional<uint64_t> vocab_size;
  std::string header_arrays;  // what header arrays it holds (not tensors); empty: none
};

// rwkv.cpp's type codes and the ggml_type each stands for
// (rwkv_file_format.inc, rwkv_type_to_ggml); its 4-6 were removed types.
struct RwkvType {
  int32_t code;
  uint32_t ggml;
};
constexpr RwkvType kRwkvTypes[] = {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {7, 6}, {8, 7}, {9, 8}};

std::optional<uint32_t> rwkv_to_ggml(int32_t code) {
  for (const auto& type : kRwkvTypes)
    if (type.code == code) return type.ggml;
  return std::nullopt;
}

// A cursor over the file for the header's fields: every count and length
// checked against what remains before it is used.
class Cursor {
 public:
  Cursor(const MappedFile& file, uint64_t at) : file_(file), reader_(file, std::string(kFormat)) {
    reader_.seek(at);
  }

  uint64_t at() const { return reader_.file_offset(); }
  uint64_t remaining() const { return reader_.remaining(); }
  int32_t i32(std::string_view what) { return reader_.read_le<int32_t>(what); }
  uint32_t u32(std::string_view what) { return reader_.u32(what); }
  float f32(std::string_view what) { return reader_.read_le<float>(what); }

  [[noreturn]] void fail(uint64_t at, const std::string& reason) const {
    throw ModelError(file_.display_name(), std::string(kFormat), at, reason);
  }

  // A count stored as i32: negative, or more `unit`-byte items than what
  // remains holds, refused.
  uint64_t count(std::string_view what, uint64_t unit) {
    const uint64_t where = at();
    const int32_t value = i32(what);
    if (value < 0) fail(where, std::string(what) + " is " + std::to_string(value) + ", negative");
    return fits(where, value, unit, what);
  }
  uint64_t count_u32(std::string_view what, uint64_t unit) {
    const uint64_t where = at();
    return fits(where, u32(what), unit, what);
  }
  // A count read already (at `where`), checked so.
  uint64_t fits(uint64_t where, uint64_t value, uint64_t unit, std::string_view what) const {
    if (unit != 0 && value > remaining() / unit)
      fail(where, std::string(what) + " " + std::to_string(value) + " cannot fit in the " +
                      std::to_string(remaining()) + " bytes that remain");
    return value;
  }

  // Bytes stepped over without reading them (arrays the header holds).
  void skip(uint64_t bytes, std::string_view what) {
    if (bytes > remaining())
      fail(at(), std::string(what) + " of " + std::to_string(bytes) +
                     " bytes runs past the end of the file (" + std::to_string(remaining()) +
                     " bytes remain)");
    reader_.seek(reader_.position() + bytes);
  }
  // `rows` x `cols` float32 values stepped over.
  void skip_floats(uint64_t rows, uint64_t cols, std::string_view what) {
    auto bytes = checked_mul(rows, cols);
    if (bytes) bytes = checked_mul(*bytes, 4);
    if (!bytes)
      fail(at(), std::string(what) + ": " + std::to_string(rows) + " x " + std::to_string(cols) +
                     " values overflow");
    skip(*bytes, what);
  }
  std::string_view text(uint64_t length, std::string_view what) { return reader_.take_string(length, what); }

 private:
  const MappedFile& file_;
  ByteReader reader_;
};

// `names.size()` i32 fields into hparams, in order.
template <size_t N>
std::array<int32_t, N> read_hparams(Cursor& c, Layout& layout, const std::array<std::string_view, N>& names) {
  std::array<int32_t, N> values{};
  for (size_t i = 0; i < N; ++i) layout.hparams[std::string(names[i])] = values[i] = c.i32(names[i]);
  return values;
}

// The mel filter bank whisper.cpp's files hold after their
// hyper-parameters: i32 rows, i32 columns, float32 values (not a tensor).
void read_mel_filters(Cursor& c, Layout& layout) {
  const uint64_t rows = c.count("mel filter rows", 0);
  const uint64_t cols = c.count("mel filter columns", 0);
  layout.hparams["mel_filters"] = {rows, cols};
  c.skip_floats(rows, cols, "mel filters");
}

// ---- the layouts' headers ---------------------------------------------------

void read_whisper(Cursor& c, Layout& layout) {
  layout.id = "whisper";
  layout.program = "whisper.cpp (whisper)";
  layout.header_arrays = "hyper-parameters, mel filters and vocabulary";
  const auto hp =
      read_hparams<11>(c, layout,
                       {"n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer",
                        "n_text_ctx", "n_text_state", "n_text_head", "n_text_layer", "n_mels", "ftype"});
  const int32_t qntvr = hp[10] / kQuantVersionFactor;
  layout.hparams["quantization_version"] = qntvr;
  if (qntvr != kCurrentQuantVersion)
    layout.blocks_refused = "whisper.cpp's quantization version " + std::to_string(qntvr) + " (ftype " +
                            std::to_string(hp[10]) +
                            ") stores blocks in a layout older than ggml's current one " + "(version " +
                            std::to_string(kCurrentQuantVersion) + ")";
  read_mel_filters(c, layout);
  const uint64_t tokens = c.count("token count", 4);
  for (uint64_t i = 0; i < tokens; ++i) c.skip(c.count_u32("token length", 1), "token");
  layout.vocab_size = tokens;
}

void read_silero(Cursor& c, Layout& layout) {
  layout.id = "silero_vad";
  layout.program = "whisper.cpp (Silero VAD)";
  const uint64_t at = c.at();
  const uint64_t length = c.count("model type length", 1);
  const std::string_view type = c.text(length, "model type");
  const bool printable =
      std::all_of(type.begin(), type.end(), [](char ch) { return ch >= 0x20 && ch < 0x7f; });
  if (length == 0 || length > 64 || !printable)
    c.fail(at, "no Silero VAD model type (a short printable name such as \"silero-16k\") after the magic");
  layout.hparams["model_type"] = type;
  read_hparams<5>(c, layout, {"version_major", "version_minor", "version_patch", "n_window", "n_context"});
  const uint64_t layers_at = c.at();
  const uint64_t layers = c.count("n_encoder_layers", 12);
  if (layers > kMaxEncoderLayers)
    c.fail(layers_at, std::to_string(layers) + " encoder layers, more than the " +
                          std::to_string(kMaxEncoderLayers) + " modelfs lists");
  layout.hparams["n_encoder_layers"] = layers;
  nlohmann::json& encoder = layout.hparams["encoder"] = nlohmann::json::array();
  for (uint64_t i = 0; i < layers; ++i) {
    const int32_t in = c.i32("encoder in_channels"), out = c.i32("encoder out_channels");
    encoder.push_back({in, out, c.i32("encoder kernel_size")});
  }
  read_hparams<4>(c, layout, {"lstm_input_size", "lstm_hidden_size", "final_conv_in", "final_conv_out"});
}

void read_parakeet(Cursor& c, Layout& layout) {
  layout.id = "parakeet";
  layout.program = "whisper.cpp (Parakeet)";
  layout.header_arrays = "hyper-parameters, mel filters, window, TDT durations and vocabulary";
  const auto hp =
      read_hparams<15>(c, layout,
                       {"n_vocab", "n_audio_ctx", "n_audio_state", "n_audio_head", "n_audio_layer", "n_mels",
                        "ftype", "n_fft", "subsampling_factor", "n_subsampling_channels", "n_conv_kernel",
                        "n_pred_dim", "n_pred_layers", "n_tdt_durations", "n_max_tokens"});
  read_mel_filters(c, layout);
  const uint64_t window = c.count("window length", 4);
  c.skip(window * 4, "window");
  if (hp[13] < 0) c.fail(c.at(), "n_tdt_durations is " + std::to_string(hp[13]) + ", negative");
  c.skip_floats(1, static_cast<uint64_t>(hp[13]), "TDT durations");
  const uint64_t tokens = c.count("token count", 4);
  for (uint64_t i = 0; i < tokens; ++i) c.skip(c.count("token length", 1), "token");
  layout.vocab_size = tokens;
}

// llama.cpp: unversioned 'ggml' (no scores), 'ggmf' v1, 'ggjt' v1-v3.
void read_llama(Cursor& c, Layout& layout, std::string_view magic, std::optional<uint32_t> version) {
  layout.id = "llama";
  layout.program = "llama.cpp";
  layout.min_dims = 1;
  layout.max_dims = 2;
  layout.aligned = magic == kGgjt;
  if (magic != kGgjt || version != 3)
    layout.blocks_refused =
        "llama.cpp files before 'ggjt' version 3 store blocks in layouts older than ggml's "
        "current ones";
  const std::array<std::string_view, 7> names{"n_vocab", "n_embd", "n_mult", "n_head",
                                              "n_layer", "n_rot",  "ftype"};
  const uint64_t vocab_at = c.at();
  for (auto name : names) layout.hparams[std::string(name)] = c.u32(name);
  const bool scores = magic != kGgml;
  const uint64_t tokens =
      c.fits(vocab_at, layout.hparams["n_vocab"].get<uint32_t>(), scores ? 8 : 4, "n_vocab");
  for (uint64_t i = 0; i < tokens; ++i) {
    c.skip(c.count_u32("token length", 1), "token");
    if (scores) c.f32("token score");
  }
  layout.vocab_size = tokens;
}

void read_rwkv(Cursor& c, Layout& layout, uint32_t version) {
  layout.id = "rwkv";
  layout.program = "rwkv.cpp";
  layout.min_dims = 1;
  layout.max_dims = 3;
  layout.rwkv_codes = true;
  if (version == 100)
    layout.blocks_refused =
        "rwkv.cpp file version 100 stores blocks in layouts older than ggml's current ones "
        "(version 101 has those)";
  const std::array<std::string_view, 4> names{"n_vocab", "n_embed", "n_layer", "data_type"};
  for (auto name : names) layout.hparams[std::string(name)] = c.u32(name);
  layout.vocab_size = layout.hparams["n_vocab"].get<uint64_t>();
}

// ---- the tensor records -----------------------------------------------------

// The budget grows with the metadata read (headers, vocabularies, records
// without their data), each byte of the file counted once however many
// layouts walk it.
class MetadataCount {
 public:
  void add(uint64_t from, uint64_t to) {
    from = std::max(from, counted_to_);
    if (to > from) add_metadata_bytes(to - from);
    counted_to_ = std::max(counted_to_, to);
  }

 private:
  uint64_t counted_to_ = 0;
};

// The ggml type of a record's code, or refused.
const GgmlType& record_type(Cursor& c, const Layout& layout, int32_t code, uint64_t at,
                            const std::string& quote) {
  std::optional<uint32_t> id;
  if (layout.rwkv_codes)
    id = rwkv_to_ggml(code);
  else if (code >= 0)
    id = static_cast<uint32_t>(code);
  const GgmlType* type = id ? ggml_type(*id) : nullptr;
  if (type == nullptr && layout.rwkv_codes)
    c.fail(at, quote + "type code " + std::to_string(code) + " is none of rwkv.cpp's (0-3, 7-9; 4-6 were " +
                   "removed types)");
  if (type == nullptr)
    c.fail(at, quote + "type code " + std::to_string(code) + " is no ggml_type modelfs reads" +
                   (code == 4 || code == 5 ? " (q4_2 and q4_3 were removed from ggml in 2023)" : ""));
  if (!type->plain && !layout.blocks_refused.empty())
    c.fail(at, quote + std::string(type->name) + " blocks: " + layout.blocks_refused);
  return *type;
}

// Walks the records from the cursor to the end of the file, adding each
// tensor to `catalog`; a record that does not end inside the file, or
// leaves bytes that are not a record, is refused.
void read_records(Cursor& c, const Layout& layout, const std::shared_ptr<const MappedFile>& file,
                  const std::string& name, Catalog& catalog, MetadataCount& counted) {
  std::unordered_set<std::string_view> names;
  while (c.remaining() > 0) {
    const uint64_t at = c.at();
    const std::string where = "tensor record at byte " + std::to_string(at) + ": ";
    const int32_t n_dims = c.i32("n_dims");
    if (n_dims < layout.min_dims || n_dims > layout.max_dims)
      c.fail(at, where + "n_dims is " + std::to_string(n_dims) + ", outside the " +
                     std::to_string(layout.min_dims) + ".." + std::to_string(layout.max_dims) + " " +
                     std::string(layout.program) + " accepts");
    const int32_t name_len = c.i32("name length");
    if (name_len <= 0 || static_cast<uint64_t>(name_len) > kMaxNameBytes)
      c.fail(at + 4, where + "name length " + std::to_string(name_len) + " is outside 1.." +
                         std::to_string(kMaxNameBytes));
    const uint64_t type_at = c.at();
    const int32_t code = c.i32("type");
    std::vector<uint64_t> ne(static_cast<size_t>(n_dims));
    for (auto& dim : ne) {
      const uint64_t dim_at = c.at();
      const int32_t value = c.i32("dimension");
      if (value < 0) c.fail(dim_at, where + "dimension " + std::to_string(value) + " is negative");
      dim = static_cast<uint64_t>(value);
    }
    if (static_cast<uint64_t>(name_len) > c.remaining())
      c.fail(c.at(), where + "name of " + std::to_string(name_len) +
                         " bytes runs past the end of the file (" + std::to_string(c.remaining()) +
                         " bytes remain)");
    TensorSpec t;
    const std::string_view stored = c.text(static_cast<uint64_t>(name_len), "tensor name");
    counted.add(at, c.at());
    t.name = std::string(stored);
    const std::string quote = where + "tensor \"" + t.name + "\": ";
    if (!names.insert(stored).second) c.fail(at, quote + "the name is stored twice");
    const GgmlType& type = record_type(c, layout, code, type_at, quote);
    const ggml::Described described = ggml::describe(t, type, ne);
    if (!described.refusal.empty()) c.fail(at, quote + described.refusal);
    if (layout.aligned)
      c.skip((kGgjtAlignment - c.at() % kGgjtAlignment) % kGgjtAlignment, quote + "padding");
    const uint64_t data_at = c.at();
    if (described.nbytes > c.remaining())
      c.fail(data_at, quote + std::to_string(described.nbytes) +
                          " bytes of data run past the end of the file (" + std::to_string(c.remaining()) +
                          " bytes remain)");
    c.skip(described.nbytes, "tensor data");
    t.bytes = ByteSpan::mapped(file, data_at, described.nbytes);
    t.source = {name, data_at};
    if (layout.rwkv_codes) t.extras["rwkv_type"] = code;
    catalog.add(t);
  }
}

// ---- trying the layouts -----------------------------------------------------

using HeaderReader = std::function<void(Cursor&, Layout&)>;

// What one layout made of the file, or where and why it failed.
struct Attempt {
  std::string_view program;
  std::optional<Catalog> catalog;
  bool reached_records = false;
  std::optional<uint64_t> failed_at;
  std::string reason;
};

nlohmann::json header_json(std::string_view magic, std::optional<uint32_t> version, const Layout& layout,
                           uint64_t records_at) {
  nlohmann::json out = {{"magic", magic == kGgml   ? "ggml"
                                  : magic == kGgmf ? "ggmf"
                                                   : "ggjt"},
                        {"layout", layout.id},
                        {"program", layout.program},
                        {"records_offset", records_at}};
  if (version) out["version"] = *version;
  if (layout.aligned) out["data_alignment"] = kGgjtAlignment;
  return out;
}

Attempt attempt(const ModelFile& model, std::string_view magic, std::optional<uint32_t> version,
                const HeaderReader& read_header, MetadataCount& counted) {
  const auto& file = model.mapped;
  Cursor c(*file, version ? 8 : 4);
  Layout layout;
  Attempt out;
  try {
    read_header(c, layout);
    out.program = layout.program;
    out.reached_records = true;
    const uint64_t records_at = c.at();
    counted.add(0, records_at);
    Catalog catalog;
    catalog.format = std::string(kFormat);
    catalog.mtime = file->mtime();
    const std::string name = model.path.filename().string();
    catalog.files.push_back(name);
    read_records(c, layout, file, name, catalog, counted);
    nlohmann::json& meta = catalog.metadata;
    meta["ggml"] = header_json(magic, version, layout, records_at);
    meta["ggml"]["tensor_count"] = catalog.tensors().size();
    meta["hparams"] = std::move(layout.hparams);
    if (layout.vocab_size) meta["vocab_size"] = *layout.vocab_size;
    if (!layout.header_arrays.empty())
      meta["not_tensors"] =
          nlohmann::json::array({{{"name", "header"},
                                  {"offset", 4},
                                  {"size", records_at - 4},
                                  {"reason", "header data before the tensor records (" +
                                                 layout.header_arrays + "), not a tensor record"}}});
    out.catalog = std::move(catalog);
  } catch (const ModelError& e) {
    if (out.program.empty()) out.program = layout.program;
    out.failed_at = e.offset();
    out.reason = e.reason();
  }
  return out;
}

// A 'ggml' file: each layout tried; exactly one must take the whole file.
Catalog open_ggml(const ModelFile& model) {
  MetadataCount counted;
  std::vector<Attempt> attempts;
  attempts.push_back(attempt(model, kGgml, std::nullopt, read_whisper, counted));
  attempts.push_back(attempt(model, kGgml, std::nullopt, read_silero, counted));
  attempts.push_back(attempt(model, kGgml, std::nullopt, read_parakeet, counted));
  attempts.push_back(attempt(
      model, kGgml, std::nullopt, [](Cursor& c, Layout& l) { read_llama(c, l, kGgml, std::nullopt); },
      counted));
  std::vector<Attempt*> whole;
  for (auto& a : attempts)
    if (a.catalog) whole.push_back(&a);
  const std::string file = model.mapped->display_name();
  if (whole.size() == 1) return std::move(*whole.front()->catalog);
  if (whole.size() > 1)
    throw ModelError(file, std::string(kFormat), std::nullopt,
                     "a 'ggml' file that parses whole both in the layout of " +
                         std::string(whole[0]->program) + " and in that of " +
                         std::string(whole[1]->program) + "; modelfs does not guess which wrote it");
  // The nearest: a layout whose header was read, then the one read furthest.
  const Attempt* nearest = &attempts.front();
  for (const auto& a : attempts)
    if (std::pair(a.reached_records, a.failed_at.value_or(0)) >
        std::pair(nearest->reached_records, nearest->failed_at.value_or(0)))
      nearest = &a;
  throw ModelError(
      file, std::string(kFormat), nearest->failed_at,
      "a 'ggml' file of none of the layouts modelfs reads (whisper.cpp's whisper, Silero VAD and "
      "Parakeet, llama.cpp's unversioned); the nearest, " +
          std::string(nearest->program) + "'s, fails: " + nearest->reason);
}

Catalog take(Attempt&& a, const ModelFile& model) {
  if (a.catalog) return std::move(*a.catalog);
  throw ModelError(model.mapped->display_name(), std::string(kFormat), a.failed_at,
                   std::string(a.program) + " layout: " + a.reason);
}

}  // namespace

bool probe_file(std::span<const std::byte> head) {
  if (head.size() < 4) return false;
  const std::string_view magic(reinterpret_cast<const char*>(head.data()), 4);
  return magic == kGgml || magic == kGgmf || magic == kGgjt;
}

Catalog open_file(const ModelFile& model) {
  const auto& file = model.mapped;
  ByteReader reader(*file, std::string(kFormat));
  const std::string magic(reader.take_string(4, "magic"));
  if (magic == kGgml) return open_ggml(model);
  const uint32_t version = reader.u32("version");
  const std::string shown_magic = magic == kGgmf ? "'ggmf'" : "'ggjt'";
  MetadataCount counted;
  if (magic == kGgmf && (version == 100 || version == 101))
    return take(attempt(
                    model, kGgmf, version, [&](Cursor& c, Layout& l) { read_rwkv(c, l, version); }, counted),
                model);
  if ((magic == kGgmf && version == 1) || (magic == kGgjt && version >= 1 && version <= 3)) {
    const std::string_view kind = magic == kGgmf ? kGgmf : kGgjt;
    return take(
        attempt(
            model, kind, version, [&](Cursor& c, Layout& l) { read_llama(c, l, kind, version); }, counted),
        model);
  }
  throw ModelError(file->display_name(), std::string(kFormat), 4,
                   shown_magic + " version " + std::to_string(version) + " is none modelfs reads (" +
                       (magic == kGgmf ? "llama.cpp's 1, rwkv.cpp's 100 and 101" : "llama.cpp's 1 to 3") +
                       ")");
}

}  // namespace modelfs::ggml_legacy
