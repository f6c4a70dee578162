// SPDX-License-Identifier: Apache-2.0
// The FUSE layer's answers built without a request (fuse/replies.hpp): a
// node's attributes and entry, a folder's listing from any offset; and the
// read path's slicing of a file's parts into iovecs (slice_parts).
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "fuse/replies.hpp"
#include "io/tensor_spec.hpp"
#include "modelfs/tree.hpp"
#include "tree/tree_parts.hpp"

namespace modelfs {
namespace {

constexpr timespec kMtime{1700000000, 123456789};

// Three tensors, two of them in a folder: a/x, a/y, z.
std::unique_ptr<const Tree> small_tree() {
  Catalog catalog;
  catalog.format = "safetensors";
  catalog.files = {"m.safetensors"};
  catalog.mtime = kMtime;
  for (const auto& [name, bytes] : std::vector<std::pair<std::string, std::string>>{
           {"a.x", std::string(1000, 'x')}, {"a.y", std::string(513, 'y')}, {"z", std::string(8, 'z')}}) {
    TensorSpec t;
    t.name = name;
    t.dtype = DType::UInt8;
    t.shape = {bytes.size()};
    t.strides = {1};
    t.bytes = ByteSpan::owned(bytes);
    t.source = {"m.safetensors", 0};
    catalog.add(t);
  }
  return Tree::build(std::move(catalog), {});
}

TEST(FuseAttributes, FilesAre0444FoldersAre0555WithTheModelsTimesAndTheMountersIds) {
  const auto tree = small_tree();
  const Owner owner{4321, 8765};
  const uint64_t file_ino = *tree->resolve("a/x");
  const struct stat file = attributes_of(*tree, owner, file_ino, *tree->node(file_ino));
  EXPECT_EQ(file.st_mode, S_IFREG | 0444);
  EXPECT_EQ(file.st_ino, file_ino);
  EXPECT_EQ(file.st_nlink, 1u);
  EXPECT_EQ(file.st_size, 1000);
  EXPECT_EQ(file.st_blocks, 2);  // 512-byte units, rounded up
  EXPECT_EQ(file.st_uid, 4321u);
  EXPECT_EQ(file.st_gid, 8765u);
  for (const timespec& t : {file.st_atim, file.st_mtim, file.st_ctim}) {
    EXPECT_EQ(t.tv_sec, kMtime.tv_sec);
    EXPECT_EQ(t.tv_nsec, kMtime.tv_nsec);
  }
  EXPECT_EQ(attributes_of(*tree, owner, *tree->resolve("a/y"), *tree->node(*tree->resolve("a/y"))).st_blocks,
            2);
  EXPECT_EQ(attributes_of(*tree, owner, *tree->resolve("z"), *tree->node(*tree->resolve("z"))).st_blocks, 1);

  const uint64_t folder_ino = *tree->resolve("a");
  const struct stat folder = attributes_of(*tree, owner, folder_ino, *tree->node(folder_ino));
  EXPECT_EQ(folder.st_mode, S_IFDIR | 0555);
  EXPECT_EQ(folder.st_size, 0);
  EXPECT_EQ(folder.st_nlink, 2u);  // a has no subfolder
  EXPECT_EQ(folder.st_mtim.tv_sec, kMtime.tv_sec);
  // The root: itself, its parent link and one for each subfolder (a, .modelfs).
  const struct stat root = attributes_of(*tree, owner, Tree::kRootIno, *tree->node(Tree::kRootIno));
  EXPECT_EQ(root.st_mode, S_IFDIR | 0555);
  size_t subfolders = 0;
  for (const DirEntry& child : tree->node(Tree::kRootIno)->children)
    subfolders += tree->node(child.ino)->kind == NodeKind::Directory;
  EXPECT_EQ(subfolders, 2u);
  EXPECT_EQ(root.st_nlink, 2 + subfolders);
}

TEST(FuseAttributes, EntriesCarryTheAttributesCachedForever) {
  const auto tree = small_tree();
  const uint64_t ino = *tree->resolve("z");
  const fuse_entry_param entry = entry_of(*tree, {1, 2}, ino, *tree->node(ino));
  EXPECT_EQ(entry.ino, ino);
  EXPECT_EQ(entry.generation, 1u);
  EXPECT_GE(entry.attr_timeout, 86400.0 * 365);
  EXPECT_GE(entry.entry_timeout, 86400.0 * 365);
  EXPECT_EQ(entry.attr.st_mode, S_IFREG | 0444);
  EXPECT_EQ(entry.attr.st_size, 8);
  EXPECT_EQ(entry.attr.st_uid, 1u);
  // READDIR's entry says the type alone.
  const struct stat plain = listing_attributes(ino, *tree->node(ino));
  EXPECT_EQ(plain.st_ino, ino);
  EXPECT_EQ(plain.st_mode, S_IFREG);
  EXPECT_EQ(listing_attributes(1, *tree->node(1)).st_mode, S_IFDIR);
}

struct Listed {
  std::string name;
  uint64_t ino;
  off_t next;
  bool operator==(const Listed&) const = default;
};

// A listing from `offset` with entries of `entry_bytes` each into a buffer
// of `size`, recorded as the callback is asked to write them.
std::vector<Listed> listing(const Tree& tree, uint64_t ino, off_t offset, size_t size,
                            size_t entry_bytes = 32, size_t* used = nullptr) {
  std::vector<Listed> out;
  std::vector<char> buffer(size);
  const size_t n = fill_listing(tree, ino, *tree.node(ino), offset, buffer.data(), size,
                                [&](char*, size_t room, const ListingEntry& entry, const Node&) {
                                  if (entry_bytes <= room) out.push_back({entry.name, entry.ino, entry.next});
                                  return entry_bytes;
                                });
  if (used != nullptr) *used = n;
  return out;
}

TEST(FuseListing, DotDotDotThenChildrenInNameOrderEachResumingAfterItself) {
  const auto tree = small_tree();
  const uint64_t a = *tree->resolve("a");
  const auto whole = listing(*tree, a, 0, 1 << 16);
  // a/ holds x, y and their .json and .npy; the oracle is the names the
  // tree resolves, sorted as bytes.
  std::vector<std::string> expected_names = {".", ".."};
  std::set<std::string> children;
  for (const char* name : {"x", "x.json", "x.npy", "y", "y.json", "y.npy"}) {
    ASSERT_TRUE(tree->resolve(std::string("a/") + name)) << name;
    children.insert(name);
  }
  expected_names.insert(expected_names.end(), children.begin(), children.end());
  ASSERT_EQ(whole.size(), expected_names.size());
  for (size_t i = 0; i < whole.size(); ++i) {
    EXPECT_EQ(whole[i].name, expected_names[i]);
    EXPECT_EQ(whole[i].next, static_cast<off_t>(i + 1));
  }
  EXPECT_EQ(whole[0].ino, a);
  EXPECT_EQ(whole[1].ino, Tree::kRootIno);
  EXPECT_EQ(whole[2].ino, *tree->resolve("a/x"));
  // The root's ".." is the root.
  const auto root = listing(*tree, Tree::kRootIno, 0, 1 << 16);
  ASSERT_GE(root.size(), 2u);
  EXPECT_EQ(root[1].ino, Tree::kRootIno);

  // From every offset: the rest of the listing; past the end, nothing; a
  // negative offset is the start.
  for (size_t offset = 0; offset <= whole.size() + 3; ++offset) {
    const auto rest = listing(*tree, a, static_cast<off_t>(offset), 1 << 16);
    const std::vector<Listed> expected(whole.begin() + std::min(offset, whole.size()), whole.end());
    EXPECT_EQ(rest, expected) << offset;
  }
  EXPECT_EQ(listing(*tree, a, -5, 1 << 16), whole);
}

TEST(FuseListing, StopsAtTheFirstEntryThatDoesNotFitAndResumesThere) {
  const auto tree = small_tree();
  const uint64_t a = *tree->resolve("a");
  const auto whole = listing(*tree, a, 0, 1 << 16);
  size_t used = 0;
  // 100 bytes hold three 32-byte entries, not four.
  const auto first = listing(*tree, a, 0, 100, 32, &used);
  ASSERT_EQ(first.size(), 3u);
  EXPECT_EQ(used, 96u);
  // Too small for one entry: nothing, and nothing used.
  EXPECT_TRUE(listing(*tree, a, 0, 31, 32, &used).empty());
  EXPECT_EQ(used, 0u);
  // A reader taking a buffer's worth at a time, resuming at the last entry's
  // offset, gets every entry once.
  for (size_t size : {32u, 33u, 64u, 100u}) {
    std::vector<Listed> all;
    off_t offset = 0;
    for (int round = 0; round < 100; ++round) {
      const auto part = listing(*tree, a, offset, size);
      if (part.empty()) break;
      all.insert(all.end(), part.begin(), part.end());
      offset = part.back().next;
    }
    EXPECT_EQ(all, whole) << size;
  }
}

// Computed bytes: byte i of the part is 'A' + (i % 26).
class Letters final : public ComputedBytes {
 public:
  void fill(uint64_t offset, std::span<std::byte> out) const override {
    for (size_t i = 0; i < out.size(); ++i) out[i] = std::byte('A' + (offset + i) % 26);
  }
};

// held 5, computed 7, empty held, held 3, computed 4, held 12: 31 bytes.
// Built in place: the parts point at its own members.
struct Content {
  std::string held = "0123456789abcdefghij";  // the held parts' bytes
  Letters letters;
  std::vector<Part> parts;
  std::string expected;  // the whole content, written out independently
  std::vector<uint64_t> boundaries;

  Content() {
    add_held(5);
    add_computed(7);
    add_held(0);
    add_held(3);
    add_computed(4);
    add_held(12);
  }
  Content(const Content&) = delete;
  Content& operator=(const Content&) = delete;

 private:
  uint64_t offset_ = 0, held_at_ = 0;

  void add_held(uint64_t size) {
    Part p = Part::held(std::as_bytes(std::span(held.data() + held_at_, size)));
    p.offset = offset_;
    parts.push_back(p);
    expected += held.substr(held_at_, size);
    held_at_ += size;
    end_part(size);
  }
  void add_computed(uint64_t size) {
    Part p{nullptr, &letters, size};
    p.offset = offset_;
    parts.push_back(p);
    for (uint64_t i = 0; i < size; ++i) expected += static_cast<char>('A' + i % 26);
    end_part(size);
  }
  void end_part(uint64_t size) {
    offset_ += size;
    boundaries.push_back(offset_);
  }
};

std::string gathered(std::span<const iovec> iov) {
  std::string out;
  for (const auto& v : iov) out.append(static_cast<const char*>(v.iov_base), v.iov_len);
  return out;
}

TEST(FuseReadSlicing, EveryRangeFromEveryBoundaryWithAnyNumberOfIovecs) {
  const Content c;
  ASSERT_EQ(c.expected.size(), 31u);
  std::vector<uint64_t> starts = {0};
  for (uint64_t b : c.boundaries) starts.insert(starts.end(), {b > 0 ? b - 1 : 0, b, b + 1});
  for (size_t slots : {1u, 2u, 3u, 6u, 64u}) {
    for (uint64_t from : starts) {
      for (uint64_t length : {uint64_t{1}, uint64_t{3}, uint64_t{7}, uint64_t{31}, uint64_t{100}}) {
        std::vector<iovec> iov(slots);
        std::string scratch;
        const size_t n = slice_parts(c.parts, from, length, iov, scratch);
        ASSERT_LE(n, slots);
        // Past the end of the content, only what there is.
        const std::string want = from < c.expected.size() ? c.expected.substr(from, length) : "";
        EXPECT_EQ(gathered(std::span(iov.data(), n)), want) << slots << " " << from << " " << length;
        for (size_t i = 0; i < n; ++i) EXPECT_GT(iov[i].iov_len, 0u) << "an empty iovec";
      }
    }
  }
}

TEST(FuseReadSlicing, HeldBytesGoOutUncopiedWhileIovecsLast) {
  const Content c;
  std::vector<iovec> iov(8);
  std::string scratch;
  const size_t n = slice_parts(c.parts, 0, 31, iov, scratch);
  // One iovec per non-empty part: the held ones point into the held bytes.
  ASSERT_EQ(n, 5u);
  EXPECT_EQ(iov[0].iov_base, c.held.data());
  EXPECT_EQ(iov[0].iov_len, 5u);
  EXPECT_EQ(iov[2].iov_base, c.held.data() + 5);
  EXPECT_EQ(iov[4].iov_base, c.held.data() + 8);
  EXPECT_EQ(iov[4].iov_len, 12u);
  // A read starting at a part boundary begins in that part, uncopied.
  ASSERT_GE(slice_parts(c.parts, 12, 4, iov, scratch), 1u);  // past the empty part there too
  EXPECT_EQ(iov[0].iov_base, c.held.data() + 5);
  EXPECT_EQ(iov[0].iov_len, 3u);
}

TEST(FuseReadSlicing, MorePartsThanIovecsPutTheRestCopiedInTheLast) {
  const Content c;
  std::vector<iovec> iov(2);
  std::string scratch;
  const size_t n = slice_parts(c.parts, 2, 29, iov, scratch);
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(iov[0].iov_base, c.held.data() + 2);  // the first part as it is
  EXPECT_EQ(iov[0].iov_len, 3u);
  EXPECT_EQ(iov[1].iov_len, 26u);  // everything after, in the scratch
  EXPECT_EQ(gathered(std::span(iov.data(), n)), c.expected.substr(2));
  // The copy is bounded by the request.
  EXPECT_LE(scratch.size(), 29u);
}

TEST(FuseReadSlicing, AtOrPastTheEndNothingAndNoIovecsNothing) {
  const Content c;
  std::vector<iovec> iov(4);
  std::string scratch;
  EXPECT_EQ(slice_parts(c.parts, 31, 10, iov, scratch), 0u);
  EXPECT_EQ(slice_parts(c.parts, 1000, 10, iov, scratch), 0u);
  EXPECT_EQ(slice_parts(c.parts, 0, 10, std::span<iovec>(), scratch), 0u);
  EXPECT_EQ(slice_parts(std::span<const Part>(), 0, 10, iov, scratch), 0u);
}

}  // namespace
}  // namespace modelfs
