// SPDX-License-Identifier: Apache-2.0
// The daemon's log (src/cli/logging.*): a file or syslog once detached,
// through the same sink that makes text printable.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>
#include <string>

#include "cli/logging.hpp"
#include "modelfs/error.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// A NUL in a logged name or message must not end the line.
TEST(Logging, FileSinkKeepsWhatFollowsANul) {
  test::TempDir dir;
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

}  // namespace
}  // namespace modelfs
