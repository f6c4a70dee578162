// SPDX-License-Identifier: Apache-2.0
// The registry of format readers: each entry whole, and detection's
// messages built from it.
#include "formats/registry.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "test_files.hpp"

namespace modelfs {
namespace {

using test::TempDir;

std::string refusal(const std::filesystem::path& model) {
  try {
    (void)open_model(model);
  } catch (const ModelError& e) {
    return e.message();
  }
  return "(opened)";
}

TEST(Registry, EveryEntryTakesSomethingWithBothHalvesOfEachPair) {
  std::set<std::string_view> names;
  for (const auto& reader : format_readers()) {
    SCOPED_TRACE(std::string(reader.name));
    EXPECT_TRUE(names.insert(reader.name).second) << "two entries named alike";
    EXPECT_FALSE(reader.family.empty());
    EXPECT_EQ(reader.probe_file == nullptr, reader.open_file == nullptr);
    EXPECT_EQ(reader.probe_archive == nullptr, reader.open_archive == nullptr);
    EXPECT_EQ(reader.probe_folder == nullptr, reader.open_folder == nullptr);
    EXPECT_EQ(reader.probe_folder == nullptr, reader.folder_holds.empty());
    EXPECT_TRUE(reader.probe_file || reader.probe_archive || reader.probe_folder);
  }
}

TEST(Registry, AnUnknownFileIsRefusedNamingEveryFamily) {
  TempDir dir;
  const std::string message = refusal(dir.write("notes.txt", "just some text, no model\n"));
  for (const auto& reader : format_readers())
    EXPECT_NE(message.find(reader.family), std::string::npos) << message;
}

TEST(Registry, AFolderOfNoModelIsRefusedNamingWhatEachFolderReaderLooksFor) {
  TempDir dir;
  dir.write("notes.txt", "text");
  const std::string message = refusal(dir.path());
  for (const auto& reader : format_readers())
    if (reader.probe_folder) EXPECT_NE(message.find(reader.folder_holds), std::string::npos) << message;
}

TEST(Registry, AZipNoArchiveReaderClaimsIsRefusedByTheLastOne) {
  TempDir dir;
  const auto path = dir.write("plain.zip", test::zip_bytes({{.name = "readme.txt", .data = "hello"}}));
  const std::string message = refusal(path);
  EXPECT_NE(message.find("plain.zip"), std::string::npos) << message;
  EXPECT_EQ(message.find("not a model file"), std::string::npos) << message;
}

}  // namespace
}  // namespace modelfs
