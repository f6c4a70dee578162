// SPDX-License-Identifier: Apache-2.0
#include "csi/volumes.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "csi/mounts.hpp"
#include "csi/records.hpp"

extern char** environ;

namespace modelfs::csi {
namespace {

// Kubelet gives each call two minutes; a model's metadata is fetched well
// within that or the publish fails with what modelfs said.
constexpr std::chrono::seconds kMountLimit{100};
// A daemon that serves answers statfs at once, unless every thread of it
// waits on a remote that stalls.
constexpr std::chrono::seconds kAnswerLimit{10};

// fuse_opt splits -o lists at commas; a backslash keeps one literal.
std::string escape_option(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == ',' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// The plugin's own environment (endpoints, proxies, region), with the
// volume's secrets over it: in the daemon's environment only, never on its
// command line, which every user can read in /proc.
std::vector<std::string> daemon_environment(const std::map<std::string, std::string>& secrets) {
  std::vector<std::string> env;
  for (char** var = environ; *var != nullptr; ++var) {
    const std::string entry = *var;
    if (!secrets.contains(entry.substr(0, entry.find('=')))) env.push_back(entry);
  }
  for (const auto& [key, value] : secrets) env.push_back(key + "=" + value);
  return env;
}

// modelfs's message: its last line that says something.
std::string last_line(const std::string& output) {
  size_t end = output.find_last_not_of("\n ");
  if (end == std::string::npos) return "modelfs failed without a message";
  const size_t start = output.rfind('\n', end);
  return output.substr(start == std::string::npos ? 0 : start + 1,
                       end + 1 - (start == std::string::npos ? 0 : start + 1));
}

bool same_publish(const Record& record, const Publish& publish) {
  return record.volume_id == publish.volume_id && record.source == publish.source &&
         record.options == publish.options;
}

// Undoes what a failed publish left: a mount (a daemon that mounted before
// failing) and the folder it made.
void clean_up(const std::string& target, bool made_target) {
  if (mount_state(target) == MountState::kModelfs) {
    if (const auto why = unmount(target); !why.empty()) spdlog::error("{}: cannot unmount: {}", target, why);
  }
  if (made_target && ::rmdir(target.c_str()) != 0)
    spdlog::warn("{}: cannot remove: {}", target, std::strerror(errno));
}

}  // namespace

Volumes::TargetLock::TargetLock(Volumes& volumes, const std::string& target)
    : volumes_(volumes), target_(target) {
  {
    std::lock_guard guard(volumes_.locks_mutex_);
    auto& slot = volumes_.locks_[target_];
    if (!slot) slot = std::make_shared<std::mutex>();
    mutex_ = slot;
  }
  mutex_->lock();
}

Volumes::TargetLock::~TargetLock() {
  mutex_->unlock();
  std::lock_guard guard(volumes_.locks_mutex_);
  // The map's reference and this one: nobody else holds or waits for it.
  if (mutex_.use_count() == 2) volumes_.locks_.erase(target_);
}

grpc::Status Volumes::publish(const v1::NodePublishVolumeRequest& request) {
  Publish publish;
  if (auto status = read_publish(request, config_, publish); !status.ok()) {
    spdlog::warn("publish of {} at {} refused: {}", request.volume_id(), request.target_path(),
                 status.error_message());
    return status;
  }
  TargetLock lock(*this, publish.target);
  const auto record = read_record(config_.state_dir, publish.target);
  switch (mount_state(publish.target)) {
    case MountState::kModelfs:
      if (!record || !same_publish(*record, publish))
        return {grpc::StatusCode::ALREADY_EXISTS,
                publish.target + " already serves " +
                    (record ? "volume " + record->volume_id + " (" + shown_source(record->source) + ")"
                            : "another modelfs mount")};
      switch (ask_daemon(publish.target, kAnswerLimit)) {
        case Daemon::kAnswers:
          return grpc::Status::OK;
        case Daemon::kSilent:
          return {grpc::StatusCode::UNAVAILABLE,
                  "the modelfs daemon serving " + publish.target + " does not answer; try again"};
        case Daemon::kGone:
          // Killed with the plugin's container, or crashed: mounted afresh.
          spdlog::warn("{}: the daemon serving it has exited; mounting again", publish.target);
          if (const auto why = unmount(publish.target); !why.empty())
            return {grpc::StatusCode::INTERNAL, publish.target + ": cannot unmount the dead mount: " + why};
          remove_record(config_.state_dir, publish.target);
      }
      break;
    case MountState::kOther:
      return {grpc::StatusCode::ALREADY_EXISTS,
              publish.target + " is already a mount point of another file system"};
    case MountState::kNone:
      break;
  }
  return mount(publish);
}

grpc::Status Volumes::mount(const Publish& publish) {
  const std::string& target = publish.target;
  // Recorded before the daemon starts: a plugin stopped between the two
  // finds, once restarted, the mount it made and what it serves.
  if (!write_record(config_.state_dir, {publish.volume_id, target, publish.source, publish.options}))
    return {grpc::StatusCode::INTERNAL,
            config_.state_dir + ": cannot record the publish: " + std::strerror(errno)};
  bool made_target = false;
  if (::mkdir(target.c_str(), 0750) == 0) {
    made_target = true;
  } else if (errno != EEXIST) {
    const std::string why = std::strerror(errno);
    remove_record(config_.state_dir, target);
    return {grpc::StatusCode::INTERNAL, target + ": cannot create: " + why};
  }
  std::string options = "ro,allow_other,log_file=" + escape_option(log_path(config_.state_dir, target));
  if (!config_.cache_dir.empty()) options += ",cache_dir=" + escape_option(config_.cache_dir);
  for (const auto& option : publish.options) options += "," + option;
  const auto finished = run_program({config_.modelfs, publish.model, target, "-o", options},
                                    daemon_environment(publish.secrets), kMountLimit);
  grpc::Status status = grpc::Status::OK;
  if (finished.exit_code != 0)
    status = {grpc::StatusCode::FAILED_PRECONDITION, last_line(finished.output)};
  else if (mount_state(target) != MountState::kModelfs)
    status = {grpc::StatusCode::INTERNAL, target + ": modelfs exited 0 but nothing is mounted there"};
  if (!status.ok()) {
    clean_up(target, made_target);
    remove_record(config_.state_dir, target);
    spdlog::warn("publish of {} ({}) at {} failed: {}", publish.volume_id, shown_source(publish.source),
                 target, status.error_message());
    return status;
  }
  spdlog::info("published {} ({}) at {}", publish.volume_id, shown_source(publish.source), target);
  return grpc::Status::OK;
}

grpc::Status Volumes::unpublish(const v1::NodeUnpublishVolumeRequest& request) {
  if (request.volume_id().empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "volume_id is missing"};
  const std::string target = normal_target(request.target_path());
  if (target.empty() || target == "/")
    return {grpc::StatusCode::INVALID_ARGUMENT, "target_path " + request.target_path() + " is not absolute"};
  TargetLock lock(*this, target);
  switch (mount_state(target)) {
    case MountState::kOther:
      return {grpc::StatusCode::FAILED_PRECONDITION,
              target + " is a mount point of another file system, not a modelfs volume; left alone"};
    case MountState::kModelfs:
      // Asks nothing of the daemon, which may be gone or hung.
      if (const auto why = unmount(target); !why.empty())
        return {grpc::StatusCode::INTERNAL, target + ": cannot unmount: " + why};
      break;
    case MountState::kNone:
      break;
  }
  if (::rmdir(target.c_str()) != 0 && errno != ENOENT)
    return {grpc::StatusCode::INTERNAL, target + ": cannot remove: " + std::strerror(errno)};
  remove_record(config_.state_dir, target);
  spdlog::info("unpublished {} from {}", request.volume_id(), target);
  return grpc::Status::OK;
}

}  // namespace modelfs::csi
