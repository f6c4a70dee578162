// SPDX-License-Identifier: Apache-2.0
#include "cli/commands.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/list.hpp"
#include "cli/options.hpp"
#include "io/budget_charge.hpp"
#include "io/terminal_text.hpp"
#include "modelfs/check.hpp"
#include "modelfs/error.hpp"
#include "modelfs/formats.hpp"
#include "remote/remote.hpp"

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
    f["offset"] =
        fault->offset() ? nlohmann::ordered_json(*fault->offset()) : nlohmann::ordered_json(nullptr);
    f["reason"] = fault->reason();
    f["message"] = fault->message();  // whole: what() cuts long names for stderr
  }
  return doc;
}

void print(const nlohmann::ordered_json& doc, std::ostream& out) {
  // Names from the model may hold bytes that are not UTF-8: replaced, as
  // --list --json does.
  out << json_for_terminal(doc.dump(2, ' ', false, nlohmann::json::error_handler_t::replace)) << "\n";
}

// `--check [--json]` once the model is open: verifies it (modelfs/check.hpp)
// and prints the summary or one JSON object.
int check_command(const std::string& model, const Catalog& catalog, const IntegrityChecks& checks, bool json,
                  std::ostream& out) {
  CheckSummary summary;
  try {
    ProgressBar bar(::isatty(STDERR_FILENO) != 0, "checking");
    check_model(
        catalog, checks, [&](uint64_t done, uint64_t total) { bar.update(done, total); }, summary);
  } catch (const ModelError& fault) {
    if (json) print(report(model, catalog.format, summary, &fault), out);
    spdlog::error("{}", fault.what());
    return kExitBadModel;
  }
  if (json)
    print(report(model, catalog.format, summary, nullptr), out);
  else
    out << model << ": ok: " << catalog.format << ", " << summary.tensors << " tensors, "
        << summary.bytes_read << " bytes read back, " << summary.integrity_checks
        << " integrity checks passed\n";
  return kExitOk;
}

}  // namespace

int unmount_command(const std::string& mountpoint) {
  const char* argv[] = {"fusermount3", "-u", "--", mountpoint.c_str(), nullptr};
  std::fflush(nullptr);
  ::execvp(argv[0], const_cast<char* const*>(argv));
  spdlog::error(
      "cannot run fusermount3 ({}); install it with: sudo apt-get install fuse3 "
      "(as root, umount {} works too)",
      std::strerror(errno), mountpoint);
  return 1;
}

int query_command(const Options& options, Budget& budget) {
  if (options.positional > 1) {
    spdlog::error("{} takes only MODEL, not a mountpoint", options.list   ? "--list"
                                                           : options.info ? "--info"
                                                                          : "--check");
    return kExitUsage;
  }
  try {
    IntegrityChecks checks;
    auto catalog = open_model(
        options.model,
        {.budget = &budget, .checks = options.check ? &checks : nullptr, .remote = *remote_options(options)});
    if (options.check) return check_command(options.model, catalog, checks, options.json != 0, std::cout);
    // What printing copies of the metadata is the model's to pay for too.
    within_budget(budget, options.model, catalog.format, "printing the model", [&] {
      if (options.info)
        print_info(catalog, options.json != 0, std::cout);
      else if (options.json)
        print_json(catalog, std::cout);
      else
        print_table(catalog, std::cout);
    });
    return kExitOk;
  } catch (const ModelError& e) {
    // A model that cannot even be opened: nothing checked, the fault.
    if (options.check && options.json) print(report(options.model, nullptr, CheckSummary{}, &e), std::cout);
    spdlog::error("{}", e.what());
    return kExitBadModel;
  }
}

ProgressBar::ProgressBar(bool enabled, const char* label)
    : enabled_(enabled),
      label_(label),
      fetched_at_start_(remote::fetched_bytes()),
      start_(std::chrono::steady_clock::now()) {}

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
  // A remote model's bytes as they come from the server, and their rate.
  if (const uint64_t fetched = remote::fetched_bytes() - fetched_at_start_; fetched > 0) {
    const double seconds = std::max(1e-3, std::chrono::duration<double>(now - start_).count());
    std::fprintf(stderr, ", fetched %llu MiB at %.0f MiB/s", static_cast<unsigned long long>(fetched >> 20),
                 static_cast<double>(fetched) / (1 << 20) / seconds);
  }
  drawn_ = true;
}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputs("\n", stderr);
}

}  // namespace modelfs::cli
