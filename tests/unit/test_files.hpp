#pragma once
// Helpers for unit tests: temporary files and hand-made safetensors bytes.
#include <cstdint>
#include <filesystem>
#include <string>

namespace modelfs::test {

// A fresh folder under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path write(const std::string& name, const std::string& bytes) const;

 private:
  std::filesystem::path path_;
};

// u64 LE length + header + data, exactly as the format lays them out.
std::string safetensors_bytes(const std::string& header, const std::string& data);

}  // namespace modelfs::test
