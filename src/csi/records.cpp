// SPDX-License-Identifier: Apache-2.0
#include "csi/records.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace modelfs::csi {
namespace {

// A target path can be longer than a file name may be: the record is named
// by a hash of it (FNV-1a, 64 bits) and holds the path, which a read checks.
std::string state_file(const std::string& state_dir, const std::string& target, const char* suffix) {
  uint64_t hash = 14695981039346656037ull;
  for (const unsigned char c : target) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  char name[32];
  std::snprintf(name, sizeof name, "%016llx", static_cast<unsigned long long>(hash));
  return state_dir + "/" + name + suffix;
}

std::string record_path(const std::string& state_dir, const std::string& target) {
  return state_file(state_dir, target, ".json");
}

}  // namespace

std::string log_path(const std::string& state_dir, const std::string& target) {
  return state_file(state_dir, target, ".log");
}

std::optional<Record> read_record(const std::string& state_dir, const std::string& target) {
  std::ifstream in(record_path(state_dir, target));
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  const auto json = nlohmann::json::parse(text.str(), nullptr, false);
  if (!json.is_object() || json.value("target", "") != target) return std::nullopt;
  Record record{json.value("volume_id", ""), target, json.value("source", ""), {}};
  if (const auto options = json.find("options"); options != json.end() && options->is_array())
    for (const auto& option : *options)
      if (option.is_string()) record.options.push_back(option.get<std::string>());
  return record;
}

bool write_record(const std::string& state_dir, const Record& record) {
  const nlohmann::json json = {{"volume_id", record.volume_id},
                               {"target", record.target},
                               {"source", record.source},
                               {"options", record.options}};
  const std::string path = record_path(state_dir, record.target);
  const std::string temporary = path + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const std::string text = json.dump() + "\n";
  const bool written =
      ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!written || ::rename(temporary.c_str(), path.c_str()) != 0) {
    ::unlink(temporary.c_str());
    return false;
  }
  return true;
}

void remove_record(const std::string& state_dir, const std::string& target) {
  for (const auto& path : {record_path(state_dir, target), log_path(state_dir, target)}) {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      spdlog::warn("{}: cannot remove the state of {}: {}", path, target, std::strerror(errno));
  }
}

}  // namespace modelfs::csi
