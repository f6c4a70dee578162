// SPDX-License-Identifier: Apache-2.0
// ModelError (include/modelfs/error.hpp): its message names file, format,
// offset and reason, and a NUL in any of them does not cut it.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "modelfs/error.hpp"

namespace modelfs {
namespace {

TEST(ModelError, MessageKeepsWhatFollowsANul) {
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

}  // namespace
}  // namespace modelfs
