// SPDX-License-Identifier: Apache-2.0
#include "fuse/replies.hpp"

namespace modelfs {

struct stat attributes_of(const Tree& tree, Owner owner, uint64_t ino, const Node& node) {
  struct stat st {};
  st.st_ino = ino;
  st.st_mode = node.kind == NodeKind::Directory ? (S_IFDIR | 0555) : (S_IFREG | 0444);
  st.st_nlink = node.nlink;
  st.st_uid = owner.uid;
  st.st_gid = owner.gid;
  st.st_size = static_cast<off_t>(node.size);
  st.st_blksize = 65536;
  st.st_blocks = static_cast<blkcnt_t>((node.size + 511) / 512);
  const timespec mtime = tree.mtime();
  st.st_atim = st.st_mtim = st.st_ctim = mtime;
  return st;
}

fuse_entry_param entry_of(const Tree& tree, Owner owner, uint64_t ino, const Node& node) {
  fuse_entry_param entry{};
  entry.ino = ino;
  entry.generation = 1;
  entry.attr = attributes_of(tree, owner, ino, node);
  entry.attr_timeout = kCacheTimeout;
  entry.entry_timeout = kCacheTimeout;
  return entry;
}

struct stat listing_attributes(uint64_t ino, const Node& node) {
  struct stat st {};
  st.st_ino = ino;
  st.st_mode = node.kind == NodeKind::Directory ? S_IFDIR : S_IFREG;
  return st;
}

}  // namespace modelfs
