// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by the fuzz targets: each input is written to a private file on
// tmpfs and opened by path, exactly as modelfs opens a model (the readers
// map files; some, like ONNX, also resolve names next to them).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace modelfs::fuzz {

inline const std::filesystem::path& work_dir() {
  static const std::filesystem::path dir = [] {
    auto base = std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                    : std::filesystem::temp_directory_path();
    auto made = base / ("modelfs-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(made);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(work_dir(), ec);  // a crash leaves it, with the input, for a look
    });
    spdlog::set_level(spdlog::level::off);  // readers' warnings would drown the fuzzer's output
    return made;
  }();
  return dir;
}

// Writes the input as `name` in the work folder and returns its path.
inline std::filesystem::path write_input(const uint8_t* data, size_t size, const std::string& name) {
  auto path = work_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

}  // namespace modelfs::fuzz
