// SPDX-License-Identifier: Apache-2.0
#pragma once
// What a reader says when it refuses a model, for the readers' unit tests.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <string_view>

#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"

namespace modelfs::test {

// The reason open_model gives for refusing `model`, which must be a
// ModelError of `format`; a test failure when the model is accepted.
inline std::string refusal_reason(const std::filesystem::path& model, std::string_view format) {
  try {
    open_model(model);
  } catch (const ModelError& e) {
    EXPECT_EQ(e.format(), format) << e.what();
    return e.reason();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

// The whole message (file, format, offset, reason) open_model gives for
// refusing `model`; a test failure when the model is accepted.
inline std::string refusal_message(const std::filesystem::path& model) {
  try {
    open_model(model);
  } catch (const ModelError& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted";
  return {};
}

}  // namespace modelfs::test
