// SPDX-License-Identifier: Apache-2.0
// randread: 4 KiB random preads over a byte range of a file, timed one by
// one with clock_gettime, from N threads; prints p50/p99 in microseconds.
//
//   randread FILE OFFSET LENGTH THREADS [SEED]
//
// Every 4 KiB block of [OFFSET, OFFSET+LENGTH) is read exactly once, in a
// random order shared out between the threads, and each thread's fd is
// marked POSIX_FADV_RANDOM. So on a fresh FUSE mount every read misses the
// kernel's cache of the file and reaches the daemon as one 4 KiB request
// (no readahead, no repeats); on a page-cached local file it measures the
// page cache itself, the floor any mount can approach.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

namespace {

constexpr long kBlock = 4096;

double now_us() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s FILE OFFSET LENGTH THREADS [SEED]\n", argv[0]);
    return 1;
  }
  const char* path = argv[1];
  const long offset = std::atol(argv[2]);
  const long blocks = std::atol(argv[3]) / kBlock;
  const int threads = std::max(1, std::atoi(argv[4]));
  const unsigned seed = argc > 5 ? static_cast<unsigned>(std::atol(argv[5])) : 1;

  std::vector<long> order(static_cast<size_t>(blocks));
  for (long i = 0; i < blocks; ++i) order[static_cast<size_t>(i)] = offset + i * kBlock;
  std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));

  std::vector<std::vector<double>> latencies(static_cast<size_t>(threads));
  std::vector<std::thread> workers;
  int failures = 0;
  const double start = now_us();
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      int fd = ::open(path, O_RDONLY);
      if (fd < 0) return (void)__atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
      ::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
      alignas(4096) static thread_local char buffer[kBlock];
      auto& mine = latencies[static_cast<size_t>(t)];
      for (size_t i = static_cast<size_t>(t); i < order.size(); i += static_cast<size_t>(threads)) {
        const double begin = now_us();
        if (::pread(fd, buffer, kBlock, order[i]) != kBlock) __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
        mine.push_back(now_us() - begin);
      }
      ::close(fd);
    });
  }
  for (auto& w : workers) w.join();
  const double wall = now_us() - start;

  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  if (all.empty() || failures) {
    std::fprintf(stderr, "randread: %d failed reads or opens\n", failures);
    return 1;
  }
  std::sort(all.begin(), all.end());
  auto pct = [&](double p) { return all[std::min(all.size() - 1, static_cast<size_t>(p * all.size()))]; };
  std::printf("{\"reads\": %zu, \"p50_us\": %.2f, \"p99_us\": %.2f, \"wall_s\": %.4f}\n", all.size(),
              pct(0.50), pct(0.99), wall / 1e6);
  return 0;
}
