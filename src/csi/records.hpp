// SPDX-License-Identifier: Apache-2.0
// The state folder: one record a published target, written once its mount is
// in place and removed once it is gone, so that a restarted plugin knows
// what it published where (its daemons outlive it). A record holds no secret.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace modelfs::csi {

struct Record {
  std::string volume_id;
  std::string target;
  std::string source;
  std::vector<std::string> options;
};

std::optional<Record> read_record(const std::string& state_dir, const std::string& target);
// Written whole or not at all (a temporary file renamed); false when it could not be.
bool write_record(const std::string& state_dir, const Record& record);
// The record and the daemon's log.
void remove_record(const std::string& state_dir, const std::string& target);
// Where the target's daemon logs (its syslog is nobody's in a container).
std::string log_path(const std::string& state_dir, const std::string& target);

}  // namespace modelfs::csi
