// SPDX-License-Identifier: Apache-2.0
// Hostile input, round two: what reaches a person (messages, the --list
// table, the log) and what a model may make modelfs open.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli/list.hpp"
#include "cli/logging.hpp"
#include "modelfs/error.hpp"
#include "modelfs/mapped_file.hpp"
#include "modelfs/tensor_spec.hpp"
#include "modelfs/terminal_text.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using test::TempDir;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// --- a NUL in a name does not cut the message -----------------------------

TEST(HostileCli, ModelErrorMessageKeepsWhatFollowsANul) {
  const std::string name("a\0b\x1b[31m", 8);
  const ModelError e("m.safetensors", "safetensors", 9,
                     "tensor \"" + name + "\": data_offsets span 4 bytes but shape and dtype need 8");
  // what() is a C string: everything must be before its first NUL.
  EXPECT_EQ(std::string(e.what()),
            "m.safetensors: safetensors: at byte 9: tensor \"a\\x00b\x1b[31m\": data_offsets "
            "span 4 bytes but shape and dtype need 8");
  // The parts stay as given.
  EXPECT_EQ(e.reason().substr(8, 8), name);
  // Several NULs, one at each end.
  const ModelError ends(std::string("\0f\0", 3), "x", std::nullopt, std::string("r\0", 2));
  EXPECT_EQ(std::string(ends.what()), "\\x00f\\x00: x: r\\x00");
}

// The daemon's log (a file or syslog once detached) goes through the same
// sink that makes text printable; a NUL there must not end the line either.
TEST(HostileCli, LogSinkKeepsWhatFollowsANul) {
  TempDir dir;
  const auto path = dir.path() / "modelfs.log";
  auto previous = spdlog::default_logger();
  ASSERT_TRUE(log_to_file(path.string(), LogLevel::Info));
  spdlog::warn("tensor \"{}\" is not listed", std::string("a\0b\x1b[31m", 8));
  try {
    throw ModelError("m.onnx", "onnx", 68, std::string("location \"x\0y\" contains a NUL byte", 34));
  } catch (const ModelError& e) {
    spdlog::error("{}", e.what());
  }
  spdlog::default_logger()->flush();
  spdlog::set_default_logger(previous);
  spdlog::drop("modelfs-file");
  const std::string log = read_text(path);
  EXPECT_NE(log.find("tensor \"a\\x00b\\x1b[31m\" is not listed\n"), std::string::npos) << log;
  EXPECT_NE(log.find("m.onnx: onnx: at byte 68: location \"x\\x00y\" contains a NUL byte\n"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find('\0'), std::string::npos);
}

// --- the --list name column is capped -------------------------------------

TEST(HostileCli, FitWidthCutsWholeCharactersWithAnEllipsis) {
  EXPECT_EQ(fit_width("short", 80), "short");
  EXPECT_EQ(fit_width(std::string(80, 'a'), 80), std::string(80, 'a'));
  EXPECT_EQ(fit_width(std::string(81, 'a'), 80), std::string(79, 'a') + "\xe2\x80\xa6");
  EXPECT_EQ(display_width(fit_width(std::string(100000, 'a'), 80)), 80u);
  // Wide characters (two columns each) are never split, and the cut text
  // stays within the columns.
  std::string wide;
  for (int i = 0; i < 50; ++i) wide += "\xe6\x9d\x83";  // 权
  const std::string cut = fit_width(wide, 80);
  EXPECT_LE(display_width(cut), 80u);
  EXPECT_EQ(cut, wide.substr(0, 39 * 3) + "\xe2\x80\xa6");
  // A combining mark stays with the character before it.
  const std::string accented = std::string(78, 'a') + "e\xcc\x81" + "zz";
  EXPECT_EQ(fit_width(accented, 80), std::string(78, 'a') + "e\xcc\x81" + "\xe2\x80\xa6");
  EXPECT_EQ(fit_width("abc", 0), "");
  EXPECT_EQ(fit_width("abc", 1), "\xe2\x80\xa6");
}

TensorSpec small_tensor(std::string name) {
  TensorSpec t;
  t.name = std::move(name);
  t.dtype = DType::Float32;
  t.shape = {1};
  t.strides = {1};
  t.bytes = ByteSpan::owned(std::string(4, '\0'));
  return t;
}

TEST(HostileCli, ListTableCapsTheNameColumn) {
  Catalog catalog;
  catalog.format = "safetensors";
  for (int i = 0; i < 1000; ++i) catalog.add(small_tensor("layer." + std::to_string(i)));
  catalog.add(small_tensor(std::string(100000, 'x')));
  std::ostringstream table;
  cli::print_table(catalog, table);
  const std::string text = table.str();
  // 1 002 lines of about a hundred columns, not 1 002 lines of 100 000.
  EXPECT_LT(text.size(), 200000u);
  EXPECT_NE(text.find(std::string(79, 'x') + "\xe2\x80\xa6  float32"), std::string::npos);
  EXPECT_EQ(text.find(std::string(80, 'x')), std::string::npos);
  // Short names are padded to the capped column, so the table stays aligned.
  EXPECT_NE(text.find("layer.999" + std::string(80 - 9 + 2, ' ') + "float32"), std::string::npos);
  // --json keeps the name whole.
  std::ostringstream json;
  cli::print_json(catalog, json);
  EXPECT_NE(json.str().find("\"" + std::string(100000, 'x') + "\""), std::string::npos);
}

// --- FIFOs are refused, not opened for reading ----------------------------

TEST(HostileCli, MappedFileRefusesAFifoWithoutWaitingForAWriter) {
  TempDir dir;
  const auto fifo = dir.path() / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    MappedFile::open(fifo);  // before: blocked in open(2) until a writer came
    FAIL() << "a FIFO was opened";
  } catch (const ModelError& e) {
    EXPECT_EQ(std::string(e.what()), fifo.string() +
                                         ": file: is a FIFO (named pipe), not a regular "
                                         "file; modelfs reads only regular files");
  }
  try {
    MappedFile::open(dir.path());
    FAIL() << "a folder was opened";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder, not a regular file"), std::string::npos);
  }
  // A regular file is still read, and its descriptor is blocking again.
  const auto file = MappedFile::open(dir.write("ok.bin", "abcd"));
  EXPECT_EQ(file->size(), 4u);
  EXPECT_EQ(::fcntl(file->fd(), F_GETFL) & O_NONBLOCK, 0);
}

}  // namespace
}  // namespace modelfs
