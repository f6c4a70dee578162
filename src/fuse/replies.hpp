// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the FUSE operations answer about a node, built without a request:
// its attributes, its entry, and a folder's listing from an offset. Pure
// functions of the tree, so the unit tests check them as fuse_ops.cpp uses them.
#include <fuse_lowlevel.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "modelfs/tree.hpp"

namespace modelfs {

// Effectively forever: the tree is immutable for the life of the mount.
constexpr double kCacheTimeout = 86400.0 * 365;

// Who owns every node: the user who mounted.
struct Owner {
  uid_t uid;
  gid_t gid;
};

// A node's attributes: folders 0555, files 0444, the node's link count
// and size, the model's mtime as every time.
struct stat attributes_of(const Tree& tree, Owner owner, uint64_t ino, const Node& node);

// LOOKUP's and READDIRPLUS's answer: the attributes, cached forever.
fuse_entry_param entry_of(const Tree& tree, Owner owner, uint64_t ino, const Node& node);

// READDIR's entry: only the inode number and the type count.
struct stat listing_attributes(uint64_t ino, const Node& node);

// A folder's listing: ".", "..", then the children in name order. The offset
// of an entry is its position plus one, so a listing resumes where it stopped.
struct ListingEntry {
  const char* name;  // NUL-terminated
  uint64_t ino;
  off_t next;  // the offset that resumes after this entry
};

inline size_t listing_size(const Node& dir) { return dir.children.size() + 2; }

inline ListingEntry listing_entry(uint64_t ino, const Node& dir, size_t index) {
  const off_t next = static_cast<off_t>(index + 1);
  if (index == 0) return {".", ino, next};
  if (index == 1) return {"..", dir.parent, next};
  return {dir.children[index - 2].name.data(), dir.children[index - 2].ino,
          next};  // NUL-terminated (DirEntry)
}

// Adds the entries of folder `ino` from `offset` to a buffer of `size` bytes
// for as long as they fit: `add(at, room, entry, node)` writes one (as
// fuse_add_direntry does) and returns its size, which past `room` means it
// did not fit and was not written. Returns the bytes used.
template <typename Add>
size_t fill_listing(const Tree& tree, uint64_t ino, const Node& dir, off_t offset, char* buffer, size_t size,
                    Add&& add) {
  size_t used = 0;
  const size_t total = listing_size(dir);
  for (size_t index = static_cast<size_t>(std::max<off_t>(offset, 0)); index < total; ++index) {
    const ListingEntry entry = listing_entry(ino, dir, index);
    const size_t entry_size = add(buffer + used, size - used, entry, *tree.node(entry.ino));
    if (entry_size > size - used) break;
    used += entry_size;
  }
  return used;
}

}  // namespace modelfs
