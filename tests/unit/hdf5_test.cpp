// SPDX-License-Identifier: Apache-2.0
// The HDF5 reader's two halves apart. The sandbox (hdf5_sandbox.hpp): a
// child that opens a file is killed by seccomp, one that crashes or hangs
// is a ModelError within the deadline, one that asks for bytes past the
// file is refused them. The parent's validation of records (hdf5.hpp,
// add_records): each rule a record breaks, refused or left out with its
// reason; good records as contiguous, compact and chunked tensors.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "formats/hdf5.hpp"
#include "formats/hdf5_sandbox.hpp"
#include "modelfs/error.hpp"
#include "test_files.hpp"

namespace modelfs::hdf5 {
namespace {

using test::TempDir;
using test::vec;

std::shared_ptr<const MappedFile> file_of(const TempDir& dir, uint64_t size) {
  return MappedFile::open(dir.write("model.h5", std::string(size, '\x11')));
}

std::string refusal_of(const std::function<void()>& work) {
  try {
    work();
  } catch (const ModelError& e) {
    return e.message();
  }
  return "";
}

// --- the sandbox ---

int opens_a_file(int, uint64_t) {
  const int fd = open("/etc/hostname", O_RDONLY);  // killed here
  return fd >= 0 ? 0 : 7;
}
int crashes(int, uint64_t) {
  volatile int* nowhere = nullptr;
  *nowhere = 1;
  return 0;
}
int hangs(int, uint64_t) {
  volatile uint64_t spins = 0;
  for (;;) spins = spins + 1;
}
int reads_past_the_file(int socket, uint64_t length) {
  char byte = 0;
  const bool got = read_through_parent(socket, length, 1, &byte);
  const std::string_view text = got ? "given" : "refused";
  send_packet(socket, Packet::Failure, text.data(), text.size());
  return 0;
}
int reads_the_file(int socket, uint64_t length) {
  std::string bytes(length, '\0');
  if (!read_through_parent(socket, 0, length, bytes.data())) return 9;
  send_packet(socket, Packet::Record, bytes.data(), bytes.size() < 100 ? bytes.size() : 100);
  send_packet(socket, Packet::End, nullptr, 0);
  return 0;
}

// Touches 1 MiB blocks until malloc refuses one (at most 4 GiB), then
// sends how many it got.
int allocates_until_refused(int socket, uint64_t) {
  uint64_t mib = 0;
  for (; mib < 4096; ++mib) {
    void* block = std::malloc(1 << 20);
    if (block == nullptr) break;
    std::memset(block, 1, 1 << 20);
  }
  send_packet(socket, Packet::Record, &mib, sizeof mib);
  send_packet(socket, Packet::End, nullptr, 0);
  return 0;
}
int runs_out_of_memory(int socket, uint64_t) {
  send_packet(socket, Packet::OutOfMemory, "memory allocation failed", 24);
  return 4;
}

TEST(Hdf5Sandbox, AChildThatOpensAFileIsKilledBySeccomp) {
  TempDir dir;
  const auto file = file_of(dir, 64);
  const std::string why = refusal_of([&] { run_sandboxed(*file, 0, 64, "model.h5", opens_a_file); });
  EXPECT_NE(why.find("killed by signal " + std::to_string(SIGSYS)), std::string::npos) << why;
}

TEST(Hdf5Sandbox, AChildThatCrashesIsARefusal) {
  TempDir dir;
  const auto file = file_of(dir, 64);
  const std::string why = refusal_of([&] { run_sandboxed(*file, 0, 64, "model.h5", crashes); });
  // Under AddressSanitizer the child's SIGSEGV handler makes a system call
  // the filter does not allow, which ends it with SIGSYS instead: a
  // refusal all the same.
  const bool segv = why.find("(killed by signal " + std::to_string(SIGSEGV) + ")") != std::string::npos;
  const bool sys = why.find("(killed by signal " + std::to_string(SIGSYS) + ")") != std::string::npos;
  EXPECT_NE(why.find("the HDF5 library failed on it"), std::string::npos) << why;
  EXPECT_TRUE(segv || sys) << why;
}

TEST(Hdf5Sandbox, AChildThatHangsIsKilledAtTheDeadline) {
  TempDir dir;
  const auto file = file_of(dir, 64);
  SandboxLimits limits;
  limits.deadline_ms = 300;
  const auto start = std::chrono::steady_clock::now();
  const std::string why = refusal_of([&] { run_sandboxed(*file, 0, 64, "model.h5", hangs, limits); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_NE(why.find("took more than"), std::string::npos) << why;
}

TEST(Hdf5Sandbox, TheCpuLimitEndsAChildThatSpins) {
  TempDir dir;
  const auto file = file_of(dir, 64);
  SandboxLimits limits;
  limits.cpu_seconds = 1;
  limits.deadline_ms = 20'000;
  const std::string why = refusal_of([&] { run_sandboxed(*file, 0, 64, "model.h5", hangs, limits); });
  EXPECT_NE(why.find("more than its 1 s of CPU time"), std::string::npos) << why;
}

#if defined(__SANITIZE_ADDRESS__)
#define HDF5_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HDF5_TEST_ASAN 1
#endif
#endif

TEST(Hdf5Sandbox, TheChildsMemoryIsHeldToItsLimit) {
#if defined(HDF5_TEST_ASAN)
  GTEST_SKIP() << "AddressSanitizer's allocator does not return null when memory runs out";
#endif
  TempDir dir;
  const auto file = file_of(dir, 64);
  SandboxLimits limits;
  limits.memory_bytes = uint64_t{48} << 20;
  // The child's malloc also reuses the heap this process freed and kept
  // (earlier tests' memory, in a whole-suite run): inherited, so not
  // counted against the limit.
  const uint64_t kept_mib = mallinfo2().fordblks >> 20;
  const std::string got = run_sandboxed(*file, 0, 64, "model.h5", allocates_until_refused, limits);
  ASSERT_EQ(got.size(), 8U);
  uint64_t mib = 0;
  std::memcpy(&mib, got.data(), 8);
  EXPECT_GE(mib, 40U);  // what it may use, less malloc's own
  EXPECT_LE(mib, 48U + kept_mib + 1) << kept_mib << " MiB of freed heap inherited";
}

TEST(Hdf5Sandbox, AChildOutOfMemoryNamesItsLimit) {
  TempDir dir;
  const auto file = file_of(dir, 64);
  SandboxLimits limits;
  limits.memory_bytes = uint64_t{96} << 20;
  const std::string why =
      refusal_of([&] { run_sandboxed(*file, 0, 64, "model.h5", runs_out_of_memory, limits); });
  EXPECT_NE(why.find("needed more than the 96 MiB it may use"), std::string::npos) << why;
  EXPECT_NE(why.find("memory allocation failed"), std::string::npos) << why;
}

TEST(Hdf5Sandbox, ReadsPastTheRangeAreRefused) {
  TempDir dir;
  const auto file = file_of(dir, 64);
  // The range is bytes [16, 48): its end is refused, though the file goes on.
  const std::string why = refusal_of([&] { run_sandboxed(*file, 16, 32, "model.h5", reads_past_the_file); });
  EXPECT_NE(why.find("refused"), std::string::npos) << why;
  EXPECT_NE(
      refusal_of([&] { run_sandboxed(*file, 60, 32, "model.h5", reads_the_file); }).find("past the file"),
      std::string::npos);
}

TEST(Hdf5Sandbox, ReadsAreServedFromTheRange) {
  TempDir dir;
  const auto file = MappedFile::open(dir.write("model.h5", "0123456789abcdef"));
  EXPECT_EQ(run_sandboxed(*file, 4, 8, "model.h5", reads_the_file), "456789ab");
}

// --- the parent's validation of records ---

// The bits of a type as libhdf5 describes them (precision 0: the whole
// word); the default is exactly a dtype's.
struct Bits {
  uint64_t precision = 0, offset = 0;
  uint8_t lsb = 0, msb = 0, norm = 0, inner = 0;
};

class Stream {
 public:
  Stream& u8(uint8_t v) { return put(&v, 1); }
  Stream& u32(uint32_t v) { return put(&v, 4); }
  Stream& u64(uint64_t v) { return put(&v, 8); }
  Stream& str(std::string_view s) {
    u32(static_cast<uint32_t>(s.size()));
    return put(s.data(), s.size());
  }
  Stream& put(const void* data, size_t n) {
    bytes.append(static_cast<const char*>(data), n);
    return *this;
  }
  // A dataset record's head up to its layout: float32 (or `cls`/`size`) of `dims`.
  Stream& dataset(std::string_view path, std::vector<uint64_t> dims, uint8_t layout, uint8_t cls = 1,
                  uint64_t size = 4, Bits bits = {}) {
    u8(kRecordDataset).str(path).u8(cls).u64(size).u8(0).u8(cls == 0 ? 1 : 255);
    for (const uint64_t f : {31, 23, 8, 0, 23}) u64(f);
    u64(127).u64(bits.precision == 0 ? size * 8 : bits.precision).u64(bits.offset);
    u8(bits.lsb).u8(bits.msb).u8(bits.norm).u8(bits.inner);
    u8(0).str("").str("").u8(static_cast<uint8_t>(dims.size()));
    for (const uint64_t d : dims) u64(d);
    return u8(layout).u8(0);
  }
  std::string bytes;
};

struct Parent {
  TempDir dir;
  std::shared_ptr<const MappedFile> file = file_of(dir, 4096);
  Source source{file, 0, 4096, "model.h5", "model.h5"};
  Catalog catalog;
  Parent() { catalog.format = "hdf5"; }
  std::string refusal(const Stream& s) {
    return refusal_of([&] { add_records(catalog, s.bytes, source); });
  }
  std::string left_out(const std::string& name) {
    for (const auto& e : catalog.metadata.value("left_out", nlohmann::json::array()))
      if (e["name"] == name) return e["reason"];
    return "";
  }
};

TEST(Hdf5Records, AContiguousDatasetIsARangeOfTheFile) {
  Parent p;
  Stream s;
  s.dataset("layers/dense/vars/0", {2, 3}, kLayoutContiguous).u64(1000).u64(24);
  add_records(p.catalog, s.bytes, p.source);
  ASSERT_EQ(p.catalog.tensors().size(), 1U);
  const Tensor& t = p.catalog.tensors()[0];
  EXPECT_EQ(t.name, "layers/dense/vars/0");
  EXPECT_EQ(vec(t.shape), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(t.bytes.file_offset(), 1000U);
  EXPECT_EQ(t.bytes.size(), 24U);
}

TEST(Hdf5Records, AContiguousRecordPointingPastTheFileIsRefused) {
  Parent p;
  Stream s;
  s.dataset("w", {2, 3}, kLayoutContiguous).u64(4090).u64(24);
  EXPECT_NE(p.refusal(s).find("runs past the end of the file"), std::string::npos) << p.refusal(s);
}

TEST(Hdf5Records, StorageThatIsNotShapeTimesElementIsRefused) {
  Parent p;
  Stream s;
  s.dataset("w", {2, 3}, kLayoutContiguous).u64(0).u64(20);
  EXPECT_NE(p.refusal(s).find("shape and type need 24"), std::string::npos);
}

TEST(Hdf5Records, AShapeOf2To62ElementsIsRefused) {
  Parent p;
  Stream s;
  s.dataset("w", {uint64_t{1} << 62, 8}, kLayoutContiguous).u64(0).u64(16);
  EXPECT_NE(p.refusal(s).find("passes 2^64"), std::string::npos) << p.refusal(s);
}

TEST(Hdf5Records, ChunksBecomeBoxPiecesAndMissingOnesZeros) {
  Parent p;
  Stream s;
  s.dataset("c", {5}, kLayoutChunked).u64(2).u8(2).u32(2).u32(1).u8(1).u64(2);
  s.u64(0).u32(0).u64(100).u64(5);  // deflated
  s.u64(4).u32(1).u64(200).u64(6);  // shuffle skipped by the mask
  add_records(p.catalog, s.bytes, p.source);
  ASSERT_EQ(p.catalog.tensors().size(), 1U);
  const auto pieces = p.catalog.tensors()[0].pieces;
  ASSERT_EQ(pieces.size(), 3U);
  // In C order of the chunk grid.
  EXPECT_EQ(pieces[0].filters.size(), 2U);
  EXPECT_EQ(pieces[0].bytes.file_offset(), 100U);
  EXPECT_TRUE(pieces[1].zeros);
  EXPECT_EQ(vec(pieces[1].start), (std::vector<uint64_t>{2}));
  EXPECT_EQ(pieces[2].filters.size(), 1U);
  EXPECT_EQ(pieces[2].filters[0], PieceFilter::Deflate);
  EXPECT_EQ(vec(pieces[2].extent), (std::vector<uint64_t>{2}));
}

TEST(Hdf5Records, ChunkRulesAreEnforced) {
  struct Case {
    uint64_t coord, address, size;
    uint32_t mask;
    const char* why;
  };
  for (const Case& c :
       {Case{1, 100, 8, 0, "off the chunk grid"}, Case{6, 100, 8, 0, "outside the shape"},
        Case{0, 4095, 8, 0, "past the end of the file"}, Case{0, 100, 7, 0, "that is not deflated"},
        Case{0, 100, 8, 2, "filter mask names no filter"}}) {
    Parent p;
    Stream s;
    s.dataset("c", {5}, kLayoutChunked).u64(2).u8(0).u8(1).u64(1);
    s.u64(c.coord).u32(c.mask).u64(c.address).u64(c.size);
    EXPECT_NE(p.refusal(s).find(c.why), std::string::npos) << p.refusal(s);
  }
  Parent p;
  Stream s;
  s.dataset("c", {5}, kLayoutChunked).u64(2).u8(0).u8(1).u64(2);
  s.u64(2).u32(0).u64(100).u64(8).u64(2).u32(0).u64(200).u64(8);
  EXPECT_NE(p.refusal(s).find("same coordinates"), std::string::npos);
}

TEST(Hdf5Records, AddressesCountFromTheFilesBaseAddress) {
  Parent p;
  Stream s;
  s.u8(kRecordBase).u64(512);
  s.dataset("contiguous", {2, 3}, kLayoutContiguous).u64(100).u64(24);
  s.dataset("c", {2}, kLayoutChunked).u64(2).u8(0).u8(1).u64(1);
  s.u64(0).u32(0).u64(200).u64(8);
  add_records(p.catalog, s.bytes, p.source);
  ASSERT_EQ(p.catalog.tensors().size(), 2U);
  EXPECT_EQ(p.catalog.tensors()[0].bytes.file_offset(), 612U);
  EXPECT_EQ(p.catalog.tensors()[1].pieces[0].bytes.file_offset(), 712U);
  // The room after the base is what is left of the file.
  Stream past;
  past.u8(kRecordBase).u64(512).dataset("w", {2, 3}, kLayoutContiguous).u64(4096 - 512 - 23).u64(24);
  EXPECT_NE(Parent().refusal(past).find("runs past the end of the file"), std::string::npos);
  Stream chunk_past;
  chunk_past.u8(kRecordBase).u64(512).dataset("c", {2}, kLayoutChunked).u64(2).u8(0).u8(1).u64(1);
  chunk_past.u64(0).u32(0).u64(4096 - 512 - 7).u64(8);
  EXPECT_NE(Parent().refusal(chunk_past).find("past the end of the file"), std::string::npos);
}

TEST(Hdf5Records, ABaseAddressIsOneAndComesFirst) {
  Stream twice;
  twice.u8(kRecordBase).u64(0).u8(kRecordBase).u64(0);
  EXPECT_NE(Parent().refusal(twice).find("base address"), std::string::npos);
  Stream late;
  late.dataset("w", {2}, kLayoutContiguous).u64(0).u64(8).u8(kRecordBase).u64(512);
  EXPECT_NE(Parent().refusal(late).find("base address"), std::string::npos);
  Stream past;
  past.u8(kRecordBase).u64(4097);
  EXPECT_NE(Parent().refusal(past).find("base address past the end"), std::string::npos);
}

TEST(Hdf5Records, TypesWhoseBitsAreNotExactlyADtypesAreLeftOut) {
  struct Case {
    const char* name;
    uint8_t cls;
    uint64_t size;
    Bits bits;
    const char* why;
  };
  const Case cases[] = {
      {"int16_at_8", 0, 4, {16, 8}, "16-bit values at bit 8 of 4-byte words"},
      {"int8_low", 0, 2, {8, 0}, "8-bit values at bit 0 of 2-byte words"},
      {"int_pad_one", 0, 4, {0, 0, 1, 1}, "padding bits"},
      {"float_offset", 1, 4, {24, 8}, "24-bit values at bit 8"},
      {"float_no_implied", 1, 4, {0, 0, 0, 0, 2}, "implied"},
      {"float_msbset", 1, 4, {0, 0, 0, 0, 1}, "implied"},
      {"float_inner_pad", 1, 4, {0, 0, 0, 0, 0, 1}, "internal padding"},
      {"float_pad_background", 1, 4, {0, 0, 2, 0}, "padding bits"},
      {"bool_offset", 8, 1, {1, 3}, "1-bit values at bit 3"},
  };
  Parent p;
  Stream s;
  for (const Case& c : cases)
    s.dataset(c.name, {2}, kLayoutContiguous, c.cls, c.size, c.bits).u64(0).u64(2 * c.size);
  s.dataset("exact_int", {2}, kLayoutContiguous, 0, 4).u64(0).u64(8);
  s.dataset("exact_float", {2}, kLayoutContiguous).u64(0).u64(8);
  add_records(p.catalog, s.bytes, p.source);
  ASSERT_EQ(p.catalog.tensors().size(), 2U);
  EXPECT_EQ(p.catalog.tensors()[0].dtype, DType::Int32);
  EXPECT_EQ(p.catalog.tensors()[1].dtype, DType::Float32);
  for (const Case& c : cases)
    EXPECT_NE(p.left_out(c.name).find(c.why), std::string::npos) << c.name << ": " << p.left_out(c.name);
}

TEST(Hdf5Records, FiltersOtherThanDeflateAndShuffleAreLeftOut) {
  Parent p;
  Stream s;
  s.dataset("lzf", {5}, kLayoutChunked).u64(5).u8(1).u32(32000).u8(1).u64(1);
  s.u64(0).u32(0).u64(100).u64(9);
  add_records(p.catalog, s.bytes, p.source);
  EXPECT_TRUE(p.catalog.tensors().empty());
  EXPECT_NE(p.left_out("lzf").find("lzf"), std::string::npos);
}

TEST(Hdf5Records, OtherTypesAndLayoutsAreLeftOutWithWhy) {
  Parent p;
  Stream s;
  s.dataset("text", {2}, kLayoutContiguous, 3, 5).u64(0).u64(10);
  s.dataset("virtual", {2}, kLayoutVirtual);
  s.u8(kRecordSkipped).str("link").str("a soft link (not followed)");
  add_records(p.catalog, s.bytes, p.source);
  EXPECT_TRUE(p.catalog.tensors().empty());
  EXPECT_NE(p.left_out("text").find("strings"), std::string::npos);
  EXPECT_NE(p.left_out("virtual").find("virtual"), std::string::npos);
  EXPECT_NE(p.left_out("link").find("soft link"), std::string::npos);
}

TEST(Hdf5Records, MalformedStreamsAreRefused) {
  for (const std::string& bad : {std::string("Z"), std::string("D\x05"), std::string("S\xff\xff\xff\xff")}) {
    Parent p;
    Stream s;
    s.bytes = bad;
    EXPECT_FALSE(p.refusal(s).empty()) << bad;
  }
  Parent p;
  Stream s;
  s.dataset("w", {2}, kLayoutContiguous).u64(0).u64(8);
  s.dataset("w", {2}, kLayoutContiguous).u64(8).u64(8);
  EXPECT_NE(p.refusal(s).find("listed twice"), std::string::npos);
  Parent q;
  Stream t;
  t.dataset("c", {5}, kLayoutChunked).u64(1).u8(0).u8(1).u64(999'999);  // a count the stream cannot hold
  EXPECT_NE(q.refusal(t).find("past the records' end"), std::string::npos) << q.refusal(t);
}

TEST(Hdf5Records, KerasAttributesBecomeMetadata) {
  Parent p;
  Stream s;
  s.u8(kRecordAttribute).str("model_config").str(R"({"class_name": "Sequential"})");
  s.u8(kRecordAttribute).str("keras_version").str("2.1.6");
  s.u8(kRecordAttribute).str("other").str("ignored");
  add_records(p.catalog, s.bytes, p.source);
  EXPECT_EQ(p.catalog.metadata["model_config"]["class_name"], "Sequential");
  EXPECT_EQ(p.catalog.metadata["keras_version"], "2.1.6");
  EXPECT_FALSE(p.catalog.metadata.contains("other"));
}

}  // namespace
}  // namespace modelfs::hdf5
