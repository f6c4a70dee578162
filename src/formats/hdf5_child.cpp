// SPDX-License-Identifier: Apache-2.0
// The sandboxed child's side (hdf5_sandbox.hpp): libhdf5 over a virtual
// file driver that reads through the parent, a walk of the file's groups,
// and the records it streams back (the layout is in hdf5.hpp). Nothing
// here is trusted by the parent, which validates every record; the limits
// here only keep the child's own work bounded.
#include <hdf5.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "formats/hdf5.hpp"
#include "formats/hdf5_sandbox.hpp"

namespace modelfs::hdf5 {
namespace {

int g_socket = -1;
uint64_t g_length = 0;

// Records go out in packets of up to kMaxReadChunk bytes; the parent
// concatenates them into one stream.
class Out {
 public:
  bool ok = true;
  void put(const void* data, uint64_t size) {
    const auto* from = static_cast<const char*>(data);
    while (size > 0) {
      const uint64_t room = sizeof buffer_ - used_;
      const uint64_t n = size < room ? size : room;
      std::memcpy(buffer_ + used_, from, n);
      used_ += n;
      from += n;
      size -= n;
      if (used_ == sizeof buffer_) flush();
    }
  }
  void u8(uint8_t v) { put(&v, 1); }
  void u32(uint32_t v) { put(&v, 4); }
  void u64(uint64_t v) { put(&v, 8); }
  void str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    put(s.data(), s.size());
  }
  void flush() {
    if (used_ > 0 && !send_packet(g_socket, Packet::Record, buffer_, used_)) ok = false;
    used_ = 0;
  }

 private:
  char buffer_[kMaxReadChunk];
  uint64_t used_ = 0;
};

Out g_out;

// --- the virtual file driver: the file is what the parent serves ---

struct ParentFile {
  H5FD_t pub;  // first: libhdf5 fills it
  haddr_t eoa;
};

H5FD_t* vfd_open(const char*, unsigned flags, hid_t, haddr_t) {
  if ((flags & H5F_ACC_RDWR) != 0) return nullptr;
  auto* file = static_cast<ParentFile*>(std::calloc(1, sizeof(ParentFile)));
  return file == nullptr ? nullptr : &file->pub;
}
herr_t vfd_close(H5FD_t* file) {
  std::free(file);
  return 0;
}
haddr_t vfd_get_eoa(const H5FD_t* file, H5FD_mem_t) { return reinterpret_cast<const ParentFile*>(file)->eoa; }
herr_t vfd_set_eoa(H5FD_t* file, H5FD_mem_t, haddr_t addr) {
  reinterpret_cast<ParentFile*>(file)->eoa = addr;
  return 0;
}
haddr_t vfd_get_eof(const H5FD_t*, H5FD_mem_t) { return g_length; }
// libhdf5 reads metadata a few hundred bytes at a time: whole blocks are
// asked for and kept (direct-mapped), so a walk costs one round trip to
// the parent per block, not per object header.
constexpr uint64_t kBlock = kMaxReadChunk;
constexpr size_t kCacheBytes = 4 << 20;  // libhdf5's metadata cache at most
constexpr size_t kSlots = 64;
struct Slot {
  uint64_t block = kUndefined;
  uint64_t size = 0;
  unsigned char bytes[kBlock];
};
Slot* g_slots = nullptr;

herr_t vfd_read(H5FD_t*, H5FD_mem_t, hid_t, haddr_t addr, size_t size, void* buffer) {
  if (addr > g_length || size > g_length - addr) return -1;
  if (g_slots == nullptr) {
    g_slots = static_cast<Slot*>(std::calloc(kSlots, sizeof(Slot)));
    for (size_t i = 0; g_slots != nullptr && i < kSlots; ++i) g_slots[i].block = kUndefined;
  }
  if (g_slots == nullptr) return read_through_parent(g_socket, addr, size, buffer) ? 0 : -1;
  auto* out = static_cast<unsigned char*>(buffer);
  while (size > 0) {
    const uint64_t block = addr / kBlock;
    Slot& slot = g_slots[block % kSlots];
    if (slot.block != block) {
      const uint64_t start = block * kBlock;
      const uint64_t n = g_length - start < kBlock ? g_length - start : kBlock;
      slot.block = kUndefined;
      if (!read_through_parent(g_socket, start, n, slot.bytes)) return -1;
      slot.block = block;
      slot.size = n;
    }
    const uint64_t within = addr - block * kBlock;
    const uint64_t n = slot.size - within < size ? slot.size - within : size;
    std::memcpy(out, slot.bytes + within, n);
    out += n;
    addr += n;
    size -= n;
  }
  return 0;
}
herr_t vfd_write(H5FD_t*, H5FD_mem_t, hid_t, haddr_t, size_t, const void*) { return -1; }
herr_t vfd_query(const H5FD_t*, unsigned long* flags) {
  *flags = H5FD_FEAT_ACCUMULATE_METADATA | H5FD_FEAT_DATA_SIEVE | H5FD_FEAT_AGGREGATE_METADATA;
  return 0;
}

hid_t register_driver() {
  static H5FD_class_t cls;
  std::memset(&cls, 0, sizeof cls);
  cls.name = "modelfs-parent";
  cls.maxaddr = HADDR_MAX;
  cls.fc_degree = H5F_CLOSE_WEAK;
  cls.open = vfd_open;
  cls.close = vfd_close;
  cls.query = vfd_query;
  cls.get_eoa = vfd_get_eoa;
  cls.set_eoa = vfd_set_eoa;
  cls.get_eof = vfd_get_eof;
  cls.read = vfd_read;
  cls.write = vfd_write;
  for (auto& m : cls.fl_map) m = H5FD_MEM_DEFAULT;  // one free list: the file is never written
  return H5FDregister(&cls);
}

// --- the walk ---

struct Walk {
  hid_t file = -1;
  std::unordered_set<haddr_t> visited;
  uint64_t objects = 0;
  uint64_t cells = 0;         // chunk-grid cells looked up, over the file
  uint64_t lookup_steps = 0;  // their cost in libhdf5 (kMaxChunkLookupSteps)
  uint64_t base = 0;          // the base address: where the superblock is, after any user block
  std::string failure;
};

// Whether an allocation failed in the walk (libhdf5 said so, or ours threw):
// the process reached the memory it may use.
bool g_out_of_memory = false;

// What libhdf5 last said went wrong, the innermost entry of its error
// stack ("incorrect metadata checksum after all read attempts", "truncated
// file: ..."), "" when it said nothing.
std::string library_error() {
  struct Said {
    std::string text;
    bool memory = false;
  } said;
  H5Ewalk2(
      H5E_DEFAULT, H5E_WALK_UPWARD,
      [](unsigned n, const H5E_error2_t* e, void* out) -> herr_t {
        auto& said = *static_cast<Said*>(out);
        if (e == nullptr) return 0;
        if (n == 0 && e->desc != nullptr) said.text = e->desc;
        if (e->min_num == H5E_CANTALLOC || e->min_num == H5E_NOSPACE) said.memory = true;
        return 0;
      },
      &said);
  g_out_of_memory = g_out_of_memory || said.memory;
  return said.text.size() > 200 ? said.text.substr(0, 200) + "..." : said.text;
}

// The walk's last packet when it fails: why, marked as running out of
// memory when it did (the parent names its limit).
int send_failure(std::string_view why) {
  send_packet(g_socket, g_out_of_memory ? Packet::OutOfMemory : Packet::Failure, why.data(),
              why.size() < 1024 ? why.size() : 1024);
  return g_out_of_memory ? 4 : 3;
}

// `why`, with what libhdf5 said of it when it said something (else
// `otherwise`, when given).
std::string with_library_error(std::string why, std::string_view otherwise = {}) {
  const std::string said = library_error();
  if (!said.empty()) return why + " (libhdf5: " + said + ")";
  return otherwise.empty() ? why : why + " (" + std::string(otherwise) + ")";
}

bool failed(Walk& walk, std::string why) {
  if (walk.failure.empty()) walk.failure = with_library_error(std::move(why));
  return false;
}

// A string attribute's value (fixed or variable length), bounded.
bool string_attribute(hid_t attr, std::string& out) {
  const hid_t type = H5Aget_type(attr);
  const hid_t space = H5Aget_space(attr);
  bool ok = false;
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  if (H5Tget_class(type) == H5T_STRING && n == 1) {
    if (H5Tis_variable_str(type) > 0) {
      char* value = nullptr;
      const hid_t memory = H5Tcopy(H5T_C_S1);
      H5Tset_size(memory, H5T_VARIABLE);
      H5Tset_cset(memory, H5Tget_cset(type));
      if (H5Aread(attr, memory, &value) >= 0 && value != nullptr) {
        out.assign(value, strnlen(value, kMaxAttributeBytes));
        H5free_memory(value);
        ok = true;
      }
      H5Tclose(memory);
    } else {
      const size_t size = H5Tget_size(type);
      if (size > 0 && size <= kMaxAttributeBytes) {
        out.assign(size, '\0');
        if (H5Aread(attr, type, out.data()) >= 0) {
          out.resize(strnlen(out.data(), size));
          ok = true;
        }
      }
    }
  }
  H5Sclose(space);
  H5Tclose(type);
  return ok;
}

bool read_string_attribute(hid_t object, const char* name, std::string& out) {
  if (H5Aexists(object, name) <= 0) return false;
  const hid_t attr = H5Aopen(object, name, H5P_DEFAULT);
  if (attr < 0) return false;
  const bool ok = string_attribute(attr, out);
  H5Aclose(attr);
  return ok;
}

void skipped(const std::string& path, std::string_view why) {
  g_out.u8(kRecordSkipped);
  g_out.str(path);
  g_out.str(why);
}

// The element type as the parent needs it to decide whether the stored
// bytes are a tensor's: class, size, order and sign, and every other
// property of the bits (precision, bit offset, padding; a float's fields,
// bias, normalization and internal padding), which the parent compares
// with its dtype's. Properties a class does not have are sent as 255 (a
// failed libhdf5 call's -1).
void describe_type(hid_t dset, hid_t type) {
  const H5T_class_t cls = H5Tget_class(type);
  const bool numeric = cls == H5T_INTEGER || cls == H5T_FLOAT || cls == H5T_ENUM;
  constexpr uint8_t kNone = 255;
  g_out.u8(static_cast<uint8_t>(cls));
  g_out.u64(H5Tget_size(type));
  g_out.u8(static_cast<uint8_t>(H5Tget_order(type)));
  g_out.u8(cls == H5T_INTEGER || cls == H5T_ENUM ? static_cast<uint8_t>(H5Tget_sign(type)) : kNone);
  size_t fields[5] = {};
  size_t bias = 0;
  if (cls == H5T_FLOAT) {
    H5Tget_fields(type, &fields[0], &fields[1], &fields[2], &fields[3], &fields[4]);
    bias = H5Tget_ebias(type);
  }
  for (const size_t f : fields) g_out.u64(f);
  g_out.u64(bias);
  // An enum's bits are its base integer's (libhdf5 answers for the base).
  const int offset = numeric ? H5Tget_offset(type) : -1;
  H5T_pad_t lsb = H5T_PAD_ERROR, msb = H5T_PAD_ERROR;
  if (numeric) H5Tget_pad(type, &lsb, &msb);
  g_out.u64(numeric ? H5Tget_precision(type) : 0);
  g_out.u64(offset < 0 ? kUndefined : static_cast<uint64_t>(offset));
  g_out.u8(static_cast<uint8_t>(lsb));
  g_out.u8(static_cast<uint8_t>(msb));
  g_out.u8(cls == H5T_FLOAT ? static_cast<uint8_t>(H5Tget_norm(type)) : kNone);
  g_out.u8(cls == H5T_FLOAT ? static_cast<uint8_t>(H5Tget_inpad(type)) : kNone);
  // h5py's bool: an enum over a 1-byte integer of FALSE = 0, TRUE = 1.
  bool is_bool = false;
  if (cls == H5T_ENUM && H5Tget_size(type) == 1 && H5Tget_nmembers(type) == 2) {
    is_bool = true;
    for (unsigned i = 0; i < 2; ++i) {
      char* name = H5Tget_member_name(type, i);
      int8_t value = -1;
      H5Tget_member_value(type, i, &value);
      if (name == nullptr || value != static_cast<int8_t>(i) || std::strcmp(name, i ? "TRUE" : "FALSE") != 0)
        is_bool = false;
      if (name != nullptr) H5free_memory(name);
    }
  }
  g_out.u8(is_bool);
  std::string tag;
  if (cls == H5T_OPAQUE) {
    char* text = H5Tget_tag(type);
    if (text != nullptr) {
      tag.assign(text, strnlen(text, 256));
      H5free_memory(text);
    }
  }
  g_out.str(tag);
  std::string dtype_attr;
  read_string_attribute(dset, "dtype", dtype_attr);
  g_out.str(dtype_attr.substr(0, 64));
}

// A dataset's handles, closed on every way out.
struct DatasetHandles {
  hid_t type = -1, space = -1, dcpl = -1;
  explicit DatasetHandles(hid_t dset)
      : type(H5Dget_type(dset)), space(H5Dget_space(dset)), dcpl(H5Dget_create_plist(dset)) {}
  DatasetHandles(const DatasetHandles&) = delete;
  DatasetHandles& operator=(const DatasetHandles&) = delete;
  ~DatasetHandles() {
    if (dcpl >= 0) H5Pclose(dcpl);
    if (space >= 0) H5Sclose(space);
    if (type >= 0) H5Tclose(type);
  }
};

// Whether libhdf5 gives chunk addresses from the start of the file: 1.14.4
// on (HDFGroup/hdf5 #4236) adds the base address, as H5Dget_offset always
// has; before, they count from the base address.
bool chunk_addresses_from_file_start() {
  unsigned major = 0, minor = 0, release = 0;
  H5get_libversion(&major, &minor, &release);
  return major > 1 || (major == 1 && (minor > 14 || (minor == 14 && release >= 4)));
}

// An address libhdf5 gave counted from the file's start, sent from its base.
bool from_base(Walk& walk, haddr_t& address, const std::string& path) {
  if (address == HADDR_UNDEF) return true;
  if (address < walk.base) return failed(walk, "data of " + path + " before the file's base address");
  address -= walk.base;
  return true;
}

bool describe_contiguous(Walk& walk, hid_t dset, const std::string& path) {
  // From the file's start: libhdf5 adds the base address, also to the
  // undefined address of storage never allocated (wrapping it).
  haddr_t offset = H5Dget_offset(dset);
  if (offset == HADDR_UNDEF + walk.base) offset = HADDR_UNDEF;
  if (!from_base(walk, offset, path)) return false;
  g_out.u64(offset == HADDR_UNDEF ? kUndefined : offset);
  g_out.u64(H5Dget_storage_size(dset));
  return true;
}

bool describe_compact(Walk& walk, hid_t dset, const DatasetHandles& h, const std::string& path) {
  const hssize_t n = H5Sget_simple_extent_npoints(h.space);
  const size_t size = H5Tget_size(h.type);
  if (n < 0 || size == 0 || static_cast<uint64_t>(n) > kMaxCompactBytes / size) {
    g_out.u64(kUndefined);
    return true;
  }
  std::string bytes(static_cast<size_t>(n) * size, '\0');
  if (n > 0 && H5Dread(dset, h.type, H5S_ALL, H5S_ALL, H5P_DEFAULT, bytes.data()) < 0)
    return failed(walk, "cannot read the compact dataset " + path);
  g_out.u64(bytes.size());
  g_out.put(bytes.data(), bytes.size());
  return true;
}

// The grid's cells, each looked up by its coordinates (an index lookup
// each; H5Dget_chunk_info by number walks the index from its start every
// time): the count, then each stored chunk.
bool describe_chunk_grid(Walk& walk, hid_t dset, hid_t space, const std::vector<hsize_t>& dims,
                         const std::vector<hsize_t>& chunk, const std::string& path) {
  const size_t rank = dims.size();
  bool empty = false;
  for (size_t i = 0; i < rank; ++i) {
    if (chunk[i] == 0) return failed(walk, "a chunk dimension of 0 in " + path);
    empty = empty || dims[i] == 0;
  }
  uint64_t grid = 1;
  for (size_t i = 0; i < rank && !empty && grid != 0; ++i) {
    const uint64_t n = dims[i] / chunk[i] + (dims[i] % chunk[i] != 0);
    grid = grid > kMaxChunkCells / n ? 0 : grid * n;
  }
  if (empty) {
    g_out.u64(0);
    return true;
  }
  if (grid == 0) {
    g_out.u64(kUndefined);  // more cells than a dataset may have: the parent leaves it out
    return true;
  }
  walk.cells += grid;
  if (walk.cells > kMaxFileChunkCells)
    return failed(walk, "more than " + std::to_string(kMaxFileChunkCells) + " chunks in the file");
  // One walk of the index counts the stored chunks; each cell's lookup
  // then walks up to all of them.
  hsize_t stored = 0;
  if (H5Dget_num_chunks(dset, space, &stored) < 0) return failed(walk, "cannot count the chunks of " + path);
  const uint64_t steps = stored == 0                            ? 0
                         : grid > kMaxChunkLookupSteps / stored ? kMaxChunkLookupSteps + 1
                                                                : grid * stored;
  if (steps > kMaxChunkLookupSteps - walk.lookup_steps) {
    g_out.u64(kTooManyLookups);
    return true;
  }
  walk.lookup_steps += steps;
  const bool from_start = chunk_addresses_from_file_start();
  std::vector<hsize_t> at(rank, 0);
  std::vector<std::pair<std::vector<hsize_t>, std::array<uint64_t, 3>>> found;
  for (uint64_t cell = 0; cell < grid; ++cell) {
    unsigned mask = 0;
    haddr_t addr = HADDR_UNDEF;
    hsize_t size = 0;
    if (H5Dget_chunk_info_by_coord(dset, at.data(), &mask, &addr, &size) >= 0 && addr != HADDR_UNDEF) {
      if (from_start && !from_base(walk, addr, path)) return false;
      found.push_back({at, {mask, addr, size}});
    }
    for (size_t i = rank; i-- > 0;) {
      at[i] += chunk[i];
      if (at[i] < dims[i]) break;
      at[i] = 0;
    }
  }
  g_out.u64(found.size());
  for (const auto& [coords, info] : found) {
    for (const hsize_t c : coords) g_out.u64(c);
    g_out.u32(static_cast<uint32_t>(info[0]));
    g_out.u64(info[1]);
    g_out.u64(info[2]);
  }
  return true;
}

bool describe_chunked(Walk& walk, hid_t dset, const DatasetHandles& h, const std::vector<hsize_t>& dims,
                      const std::string& path) {
  const int rank = static_cast<int>(dims.size());
  std::vector<hsize_t> chunk(dims.size());
  if (H5Pget_chunk(h.dcpl, rank, chunk.data()) != rank)
    return failed(walk, "cannot read the chunks of " + path);
  for (const hsize_t c : chunk) g_out.u64(c);
  const int filters = H5Pget_nfilters(h.dcpl);
  g_out.u8(static_cast<uint8_t>(filters < 0 ? 0 : filters > 32 ? 32 : filters));
  for (int i = 0; i < filters && i < 32; ++i) {
    unsigned flags = 0;
    size_t nvalues = 0;
    g_out.u32(static_cast<uint32_t>(
        H5Pget_filter2(h.dcpl, static_cast<unsigned>(i), &flags, &nvalues, nullptr, 0, nullptr, nullptr)));
  }
  // Whether a chunk never written reads as zero bytes.
  bool fill_zero = false;
  unsigned char fill[64] = {};
  if (H5Tget_size(h.type) <= sizeof fill && H5Pget_fill_value(h.dcpl, h.type, fill) >= 0) {
    fill_zero = true;
    for (const unsigned char b : fill) fill_zero = fill_zero && b == 0;
  }
  g_out.u8(fill_zero);
  return describe_chunk_grid(walk, dset, h.space, dims, chunk, path);
}

bool describe_dataset(Walk& walk, hid_t dset, const std::string& path) {
  const DatasetHandles h(dset);
  if (h.type < 0 || h.space < 0 || h.dcpl < 0) return failed(walk, "cannot read the dataset " + path);
  const int rank = H5Sget_simple_extent_ndims(h.space);
  const bool null_space = H5Sget_simple_extent_type(h.space) == H5S_NULL;
  if (rank < 0 || rank > static_cast<int>(kMaxRank) || null_space) {
    skipped(path, rank < 0 || null_space ? "a dataset with no dataspace"
                                         : "more than " + std::to_string(kMaxRank) + " dimensions");
    return g_out.ok;
  }
  std::vector<hsize_t> dims(static_cast<size_t>(rank));
  H5Sget_simple_extent_dims(h.space, dims.data(), nullptr);
  g_out.u8(kRecordDataset);
  g_out.str(path);
  describe_type(dset, h.type);
  g_out.u8(static_cast<uint8_t>(rank));
  for (const hsize_t d : dims) g_out.u64(d);
  const H5D_layout_t layout = H5Pget_layout(h.dcpl);
  const int external = H5Pget_external_count(h.dcpl);
  g_out.u8(layout == H5D_COMPACT      ? kLayoutCompact
           : layout == H5D_CONTIGUOUS ? kLayoutContiguous
           : layout == H5D_CHUNKED    ? kLayoutChunked
           : layout == H5D_VIRTUAL    ? kLayoutVirtual
                                      : kLayoutOther);
  g_out.u8(external != 0);
  bool ok = true;
  if (layout == H5D_CONTIGUOUS && external == 0) {
    ok = describe_contiguous(walk, dset, path);
  } else if (layout == H5D_CHUNKED) {
    ok = describe_chunked(walk, dset, h, dims, path);
  } else if (layout == H5D_COMPACT) {
    ok = describe_compact(walk, dset, h, path);
  }
  return ok && g_out.ok;
}

bool walk_group(Walk& walk, hid_t group, const std::string& prefix, unsigned depth);

struct Visit {
  Walk* walk;
  const std::string* prefix;
  unsigned depth;
  bool ok = true;
};

herr_t visit_link(hid_t group, const char* name, const H5L_info_t* info, void* data) {
  auto& visit = *static_cast<Visit*>(data);
  Walk& walk = *visit.walk;
  const std::string path = *visit.prefix + name;
  if (path.size() > kMaxPathBytes) {
    visit.ok = failed(walk, "an object path longer than " + std::to_string(kMaxPathBytes) + " bytes");
    return -1;
  }
  if (++walk.objects > kMaxObjects) {
    visit.ok = failed(walk, "more than " + std::to_string(kMaxObjects) + " objects");
    return -1;
  }
  if (info->type != H5L_TYPE_HARD) {
    skipped(path, info->type == H5L_TYPE_SOFT       ? "a soft link (not followed)"
                  : info->type == H5L_TYPE_EXTERNAL ? "an external link (not followed)"
                                                    : "a user-defined link (not followed)");
    return 0;
  }
  H5O_info_t object;
  if (H5Oget_info_by_name2(group, name, &object, H5O_INFO_BASIC, H5P_DEFAULT) < 0) {
    visit.ok = failed(walk, "cannot read the object " + path);
    return -1;
  }
  if (!walk.visited.insert(object.addr).second) {
    skipped(path, "a second link to an object already listed");
    return 0;
  }
  if (object.type == H5O_TYPE_GROUP) {
    const hid_t child = H5Gopen2(group, name, H5P_DEFAULT);
    if (child < 0 || !walk_group(walk, child, path + "/", visit.depth + 1)) {
      if (child >= 0) H5Gclose(child);
      visit.ok = failed(walk, "cannot read the group " + path);
      return -1;
    }
    H5Gclose(child);
  } else if (object.type == H5O_TYPE_DATASET) {
    const hid_t dset = H5Dopen2(group, name, H5P_DEFAULT);
    if (dset < 0 || !describe_dataset(walk, dset, path)) {
      if (dset >= 0) H5Dclose(dset);
      visit.ok = failed(walk, "cannot read the dataset " + path);
      return -1;
    }
    H5Dclose(dset);
  } else {
    skipped(path, "a named datatype, not a dataset");
  }
  return 0;
}

bool walk_group(Walk& walk, hid_t group, const std::string& prefix, unsigned depth) {
  if (depth > kMaxDepth) return failed(walk, "groups nested deeper than " + std::to_string(kMaxDepth));
  Visit visit{&walk, &prefix, depth};
  hsize_t index = 0;
  const herr_t rc = H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, &index, visit_link, &visit);
  if (visit.ok && rc < 0)
    return failed(walk, "cannot list the links of the group /" +
                            prefix.substr(0, prefix.empty() ? 0 : prefix.size() - 1));
  return visit.ok && g_out.ok;
}

void root_attributes(hid_t file) {
  for (const char* name : {"model_config", "training_config", "keras_version", "backend"}) {
    std::string value;
    if (!read_string_attribute(file, name, value)) continue;
    g_out.u8(kRecordAttribute);
    g_out.str(name);
    g_out.str(value);
  }
}

// libhdf5's caches sized so that its own state stays within a fixed
// margin whatever the file holds: a metadata cache of a few MiB (its
// default may grow to 32 MiB of images, several times that once decoded),
// and free lists that give memory back to malloc beyond a few MiB.
bool bound_library_memory(hid_t fapl) {
  H5AC_cache_config_t config{};
  config.version = H5AC__CURR_CACHE_CONFIG_VERSION;
  if (H5Pget_mdc_config(fapl, &config) < 0) return false;
  config.set_initial_size = true;
  config.initial_size = kCacheBytes / 4;
  config.min_size = kCacheBytes / 4;
  config.max_size = kCacheBytes;
  return H5Pset_mdc_config(fapl, &config) >= 0 &&
         H5set_free_list_limits(1 << 20, 256 << 10, 1 << 20, 256 << 10, 1 << 20, 256 << 10) >= 0;
}

}  // namespace

int walk_hdf5_child(int socket, uint64_t length) {
  g_socket = socket;
  g_length = length;
  try {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    const hid_t driver = register_driver();
    const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    if (driver < 0 || fapl < 0 || H5Pset_driver(fapl, driver, nullptr) < 0 || !bound_library_memory(fapl))
      return send_failure(with_library_error("cannot set up libhdf5"));
    Walk walk;
    walk.file = H5Fopen("modelfs", H5F_ACC_RDONLY, fapl);
    if (walk.file < 0)
      return send_failure(
          with_library_error("not an HDF5 file it can open", "no superblock, or a damaged one"));
    // Every data address goes to the parent counted from the base address
    // the file declares (libhdf5 keeps it as the user block's size).
    const hid_t fcpl = H5Fget_create_plist(walk.file);
    hsize_t base = 0;
    if (fcpl < 0 || H5Pget_userblock(fcpl, &base) < 0)
      return send_failure(with_library_error("cannot read the file's base address"));
    H5Pclose(fcpl);
    walk.base = base;
    g_out.u8(kRecordBase);
    g_out.u64(base);
    root_attributes(walk.file);
    const bool ok = walk_group(walk, walk.file, "", 0);
    g_out.flush();
    if (!ok || !g_out.ok)
      return send_failure(walk.failure.empty() ? "the walk of its groups failed" : walk.failure);
    send_packet(socket, Packet::End, nullptr, 0);
    return 0;
  } catch (...) {
    g_out_of_memory = true;
    return send_failure("an allocation failed");
  }
}

}  // namespace modelfs::hdf5
