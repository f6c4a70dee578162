// SPDX-License-Identifier: Apache-2.0
// Files a model names are opened once, inside its folder, and read from
// what was opened (model_folder.hpp).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "formats/model_folder.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using P = ModelFolder::Problem;

std::string text_of(const MappedFile& file) {
  const auto bytes = file.read(0, file.size());
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

struct Refusal {
  std::string name;
  P problem;
  std::string reason;  // a part of the reason
};

void expect_refused(const ModelFolder& folder, const std::vector<Refusal>& cases) {
  for (const auto& c : cases) {
    const auto opened = folder.open(c.name);
    EXPECT_FALSE(opened) << c.name;
    EXPECT_EQ(opened.file, nullptr) << c.name;
    EXPECT_EQ(opened.problem, c.problem) << c.name << ": " << opened.reason;
    EXPECT_NE(opened.reason.find(c.reason), std::string::npos) << c.name << ": " << opened.reason;
  }
}

TEST(ModelFolder, OpensNamesInsideTheFolderAndRefusesTheRest) {
  TempDir dir;
  dir.write("outside/secret.bin", "s");
  dir.write("model/real/a.bin", "a");
  dir.write("model/b.bin", "b");
  const fs::path model = dir.path() / "model";
  fs::create_symlink("../outside/secret.bin", model / "link.bin");
  fs::create_symlink(dir.path() / "outside", model / "linkdir");
  fs::create_symlink(dir.path() / "outside" / "secret.bin", model / "absolute_out.bin");
  fs::create_symlink("real/a.bin", model / "inside.bin");
  fs::create_symlink(model / "real" / "a.bin", model / "absolute_in.bin");
  fs::create_symlink("missing.bin", model / "dangling.bin");
  fs::create_symlink("../outside/missing.bin", model / "dangling_out.bin");
  fs::create_symlink("loop2.bin", model / "loop1.bin");
  fs::create_symlink("loop1.bin", model / "loop2.bin");
  ASSERT_EQ(::mkfifo((model / "pipe.bin").c_str(), 0600), 0);
  // The model's folder reached through a link of its own: resolved first.
  fs::create_symlink(model, dir.path() / "alias");
  const auto folder = ModelFolder::of_file(dir.path() / "alias" / "model.safetensors.index.json", "test");
  const fs::path real = fs::canonical(model);
  EXPECT_EQ(folder.path(), real);

  expect_refused(folder,
                 {
                     {"", P::NotAName, "is empty"},
                     {std::string("b.bin\0x", 7), P::NotAName, "contains a NUL byte"},
                     {(model / "b.bin").string(), P::NotAName, "is absolute"},
                     {"../model/b.bin", P::NotAName, "contains \"..\""},
                     {"real/../b.bin", P::NotAName, "contains \"..\""},
                     {"link.bin", P::Outside,
                      "resolves to " + fs::canonical(dir.path() / "outside" / "secret.bin").string() +
                          ", outside the model's folder " + real.string()},
                     {"linkdir/secret.bin", P::Outside, "outside the model's folder"},
                     {"absolute_out.bin", P::Outside, "outside the model's folder"},
                     {"missing.bin", P::Missing, "cannot be opened: No such file or directory"},
                     {"dangling.bin", P::Missing, "cannot be opened: No such file or directory"},
                     {"dangling_out.bin", P::Missing, "cannot be opened"},
                     {"loop1.bin", P::Unresolvable, "cannot be opened: Too many levels of symbolic links"},
                     // The folder itself, a folder in it, a FIFO (never waited on).
                     {".", P::NotAFile, "is a folder, not a regular file"},
                     {"real", P::NotAFile, "is a folder, not a regular file"},
                     {"pipe.bin", P::NotAFile, "is a FIFO (named pipe), not a regular file"},
                 });
  for (const auto& [name, text] :
       std::vector<std::pair<std::string, std::string>>{{"b.bin", "b"},
                                                        {"./b.bin", "b"},
                                                        {"inside.bin", "a"},
                                                        {"real/a.bin", "a"},
                                                        {"absolute_in.bin", "a"}}) {
    const auto opened = folder.open(name);
    ASSERT_TRUE(opened) << name << ": " << opened.reason;
    EXPECT_EQ(text_of(*opened.file), text) << name;
    // Messages name the file as the user reached it: the folder given, then the name.
    EXPECT_EQ(opened.file->display_name(), (dir.path() / "alias" / name).string());
  }
}

TEST(ModelFolder, WhatWasOpenedIsWhatIsRead) {
  TempDir dir;
  dir.write("outside/secret.bin", "secret");
  dir.write("model/shard.bin", "shard");
  const fs::path model = dir.path() / "model";
  const auto folder = ModelFolder::at(model, "test");
  const auto opened = folder.open("shard.bin");
  ASSERT_TRUE(opened) << opened.reason;
  // A link swapped in under the name afterwards changes nothing read.
  fs::create_symlink("../outside/secret.bin", model / "swap");
  fs::rename(model / "swap", model / "shard.bin");
  EXPECT_EQ(text_of(*opened.file), "shard");
  EXPECT_EQ(folder.open("shard.bin").problem, P::Outside);
}

TEST(ModelFolder, AnEmptyFolderIsTheWorkingFolder) {
  TempDir dir;
  dir.write("here.bin", "h");
  const fs::path before = fs::current_path();
  fs::current_path(dir.path());
  const auto folder = ModelFolder::at("", "test");
  const auto opened = folder.open("here.bin");
  fs::current_path(before);
  ASSERT_TRUE(opened) << opened.reason;
  EXPECT_EQ(text_of(*opened.file), "h");
  EXPECT_EQ(opened.file->display_name(), "here.bin");
}

// The Hugging Face hub cache: a snapshot's files link to its repository's
// blobs/, which counts as inside; nothing else beside it does.
TEST(ModelFolder, AcceptsTheHubCacheBlobsOfItsOwnRepository) {
  TempDir dir;
  const fs::path repo = dir.path() / "hub" / "models--org--name";
  dir.write("hub/models--org--name/blobs/0a1b", "shard");
  dir.write("hub/models--org--name/blobs/sub/0a1b", "deeper");
  dir.write("hub/models--org--name/refs/main", "rev");
  dir.write("hub/models--org--name/snapshots/old/kept.bin", "older revision");
  dir.write("hub/models--other--name/blobs/ffff", "another repository");
  dir.write("hub/models--org--name/snapshots/rev/onnx/.keep", "");
  const fs::path snapshot = repo / "snapshots" / "rev";
  fs::create_symlink("../../blobs/0a1b", snapshot / "model-00001-of-00002.safetensors");
  fs::create_symlink(repo / "blobs" / "0a1b", snapshot / "absolute.safetensors");
  fs::create_symlink("../../../blobs/0a1b", snapshot / "onnx" / "model.onnx_data");
  fs::create_symlink("../../blobs/sub/0a1b", snapshot / "deeper.bin");
  fs::create_symlink("../../refs/main", snapshot / "refs.bin");
  fs::create_symlink("../old/kept.bin", snapshot / "sibling.bin");
  fs::create_symlink("../../../models--other--name/blobs/ffff", snapshot / "other.bin");
  fs::create_symlink("../../blobs", snapshot / "blobs");

  const auto folder = ModelFolder::of_file(snapshot / "model.safetensors.index.json", "test");
  EXPECT_EQ(folder.hub_blobs(), fs::canonical(repo / "blobs"));
  for (const char* name : {"model-00001-of-00002.safetensors", "absolute.safetensors", "blobs/0a1b"}) {
    const auto shard = folder.open(name);
    ASSERT_TRUE(shard) << name << ": " << shard.reason;
    EXPECT_EQ(text_of(*shard.file), "shard") << name;
  }
  // A subfolder of the snapshot (ONNX models often live in onnx/).
  const auto data = ModelFolder::of_file(snapshot / "onnx" / "model.onnx", "test").open("model.onnx_data");
  ASSERT_TRUE(data) << data.reason;
  EXPECT_EQ(text_of(*data.file), "shard");
  // Only files directly in blobs/ of this repository, or in the snapshot.
  expect_refused(folder, {
                             {"deeper.bin", P::Outside, "outside the model's folder"},
                             {"refs.bin", P::Outside, "outside the model's folder"},
                             {"sibling.bin", P::Outside, "outside the model's folder"},
                             {"other.bin", P::Outside, "outside the model's folder"},
                         });
  // A folder that merely looks like a snapshot gets no such exception.
  dir.write("plain/blobs/0a1b", "x");
  dir.write("plain/snapshots/rev/.keep", "");
  fs::create_symlink("../../blobs/0a1b", dir.path() / "plain" / "snapshots" / "rev" / "s.safetensors");
  const auto plain = ModelFolder::at(dir.path() / "plain" / "snapshots" / "rev", "test");
  EXPECT_TRUE(plain.hub_blobs().empty());
  EXPECT_EQ(plain.open("s.safetensors").problem, P::Outside);
}

TEST(MappedFile, OpenDescriptorChecksAndTakesTheDescriptor) {
  TempDir dir;
  const fs::path file = dir.write("a.bin", "bytes");
  const int fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const auto mapped = MappedFile::open_descriptor(fd, "shown.bin");
  EXPECT_EQ(text_of(*mapped), "bytes");
  EXPECT_EQ(mapped->display_name(), "shown.bin");
  EXPECT_EQ(mapped->fd(), fd);
  EXPECT_EQ(::fcntl(fd, F_GETFL) & O_NONBLOCK, 0);

  const fs::path fifo = dir.path() / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int pipe_fd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(pipe_fd, 0);
  try {
    MappedFile::open_descriptor(pipe_fd, "pipe");
    FAIL() << "a FIFO was mapped";
  } catch (const ModelError& e) {
    EXPECT_EQ(std::string(e.what()),
              "pipe: file: is a FIFO (named pipe), not a regular file; modelfs reads only "
              "regular files");
  }
  // Refused, the descriptor is closed all the same.
  EXPECT_EQ(::fcntl(pipe_fd, F_GETFD), -1);
}

}  // namespace
}  // namespace modelfs
