// SPDX-License-Identifier: Apache-2.0
#include "commands.hpp"

#include <fcntl.h>
#include <grp.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "modelfs/check.hpp"

namespace modelfs::cli {
namespace {

nlohmann::ordered_json report(const std::string& model, const nlohmann::ordered_json& format,
                              const CheckSummary& summary, const ModelError* fault) {
  nlohmann::ordered_json doc;
  doc["model"] = model;
  doc["format"] = format;
  doc["ok"] = fault == nullptr;
  doc["tensors_checked"] = summary.tensors;
  doc["bytes_read"] = summary.bytes_read;
  doc["integrity_checks_passed"] = summary.integrity_checks;
  if (fault == nullptr) {
    doc["fault"] = nullptr;
  } else {
    auto& f = doc["fault"];
    f["file"] = fault->file();
    f["format"] = fault->format();
    f["offset"] = fault->offset() ? nlohmann::ordered_json(*fault->offset()) : nlohmann::ordered_json(nullptr);
    f["reason"] = fault->reason();
    f["message"] = fault->what();
  }
  return doc;
}

void print(const nlohmann::ordered_json& doc, std::ostream& out) {
  // Names from the model may hold bytes that are not UTF-8: replaced, as
  // --list --json does.
  out << doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
}

}  // namespace

int unmount_command(const std::string& mountpoint) {
  const char* argv[] = {"fusermount3", "-u", "--", mountpoint.c_str(), nullptr};
  std::fflush(nullptr);
  ::execvp(argv[0], const_cast<char* const*>(argv));
  spdlog::error("cannot run fusermount3 ({}); install it with: sudo apt-get install fuse3 "
                "(as root, umount {} works too)",
                std::strerror(errno), mountpoint);
  return 1;
}

int check_command(const std::string& model, const Catalog& catalog, bool json, std::ostream& out) {
  CheckSummary summary;
  try {
    ProgressBar bar(::isatty(STDERR_FILENO) != 0, "checking");
    check_model(catalog, [&](uint64_t done, uint64_t total) { bar.update(done, total); }, summary);
  } catch (const ModelError& fault) {
    if (json) print(report(model, catalog.format, summary, &fault), out);
    spdlog::error("{}", fault.what());
    return 2;
  }
  if (json)
    print(report(model, catalog.format, summary, nullptr), out);
  else
    out << model << ": ok: " << catalog.format << ", " << summary.tensors << " tensors, "
        << summary.bytes_read << " bytes read back, " << summary.integrity_checks
        << " integrity checks passed\n";
  return 0;
}

void print_check_fault(const std::string& model, const ModelError& fault, std::ostream& out) {
  print(report(model, nullptr, CheckSummary{}, &fault), out);
}

std::string fuse_device_problem() {
  if (::geteuid() == 0) return {};
  const int fd = ::open("/dev/fuse", O_RDWR | O_CLOEXEC);
  if (fd >= 0) {
    ::close(fd);
    return {};
  }
  if (errno != EACCES && errno != EPERM) return {};
  const std::string why = std::strerror(errno);
  struct stat st {};
  std::string owner = "root";
  unsigned mode = 0;
  if (::stat("/dev/fuse", &st) == 0) {
    mode = st.st_mode & 07777;
    if (const group* g = ::getgrgid(st.st_gid)) owner = g->gr_name;
  }
  char octal[8];
  std::snprintf(octal, sizeof octal, "%04o", mode);
  std::string hint = "cannot open /dev/fuse: " + why + " (mode " + octal + ", group " + owner + "). ";
  if (owner != "root" && (mode & 0060) == 0060)
    hint += "Members of the group " + owner + " may use FUSE: sudo usermod -aG " + owner +
            " \"$USER\", then log in again";
  else
    hint += "Only root may use FUSE here: let users in as Debian does (sudo chmod 0666 /dev/fuse), "
            "or through a group (sudo groupadd -f fuse; sudo chgrp fuse /dev/fuse; sudo chmod 0660 "
            "/dev/fuse; sudo usermod -aG fuse \"$USER\"; a udev rule keeps it after a reboot)";
  return hint;
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!enabled_ || total < (64u << 20)) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total && now - last_ < std::chrono::milliseconds(200)) return;
  last_ = now;
  const int percent = static_cast<int>(done * 100 / total);
  const int filled = percent * 40 / 100;
  std::fprintf(stderr, "\r%s [%s%s] %3d%% (%llu of %llu MiB)", label_, std::string(filled, '#').c_str(),
               std::string(40 - filled, ' ').c_str(), percent, static_cast<unsigned long long>(done >> 20),
               static_cast<unsigned long long>(total >> 20));
  drawn_ = true;
}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputs("\n", stderr);
}

}  // namespace modelfs::cli
