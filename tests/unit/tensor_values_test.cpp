// SPDX-License-Identifier: Apache-2.0
// The accumulators of --stats and --diff (src/cli/tensor_values.hpp)
// against the same figures computed directly here, in long double, from
// the whole run at once.
#include "cli/tensor_values.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace modelfs::cli {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> normal(size_t n, double mean, double sd, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(mean, sd);
  std::vector<double> out(n);
  for (auto& x : out) x = d(rng);
  return out;
}

TEST(StatsAccumulator, ChunksMergedMatchTheWholeRun) {
  // A large mean next to a small spread: a one-pass sum of squares loses
  // the variance; the merged per-chunk deviations keep it.
  auto v = normal(100003, 1e6, 0.5, 1);
  v[5] = kNaN;
  v[17] = kInf;
  v[18] = -kInf;
  v[40] = 0;
  v[41] = -0.0;
  StatsAccumulator s;
  for (size_t at = 0; at < v.size(); at += 777)
    s.add(std::span(v).subspan(at, std::min<size_t>(777, v.size() - at)));
  long double sum = 0, lo = kInf, hi = -kInf;
  size_t n = 0;
  for (double x : v)
    if (std::isfinite(x)) sum += x, ++n, lo = std::min<long double>(lo, x), hi = std::max<long double>(hi, x);
  const long double mean = sum / n;
  long double squares = 0;
  for (double x : v)
    if (std::isfinite(x)) squares += (x - mean) * (x - mean);
  EXPECT_EQ(s.values, v.size());
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.inf, 2u);
  EXPECT_EQ(s.zeros, 2u);
  EXPECT_EQ(s.finite, n);
  EXPECT_EQ(s.min, static_cast<double>(lo));
  EXPECT_EQ(s.max, static_cast<double>(hi));
  EXPECT_NEAR(s.mean, static_cast<double>(mean), 1e-9);
  EXPECT_NEAR(s.std_dev(), std::sqrt(static_cast<double>(squares / n)), 1e-9);
}

TEST(StatsAccumulator, MergeOfPartsIsTheWhole) {
  const auto v = normal(5000, -3, 2, 2);
  StatsAccumulator whole, a, b, c;
  whole.add(v);
  a.add(std::span(v).first(1));
  b.add(std::span(v).subspan(1, 2999));
  c.add(std::span(v).subspan(3000));
  StatsAccumulator merged;
  merged.merge(a);
  merged.merge(StatsAccumulator{});  // an empty part changes nothing
  merged.merge(b);
  merged.merge(c);
  EXPECT_EQ(merged.finite, whole.finite);
  EXPECT_EQ(merged.min, whole.min);
  EXPECT_EQ(merged.max, whole.max);
  EXPECT_NEAR(merged.mean, whole.mean, 1e-12);
  EXPECT_NEAR(merged.std_dev(), whole.std_dev(), 1e-12);
}

TEST(StatsAccumulator, NoFiniteValue) {
  const std::vector<double> v{kNaN, kInf, kNaN};
  StatsAccumulator s;
  s.add(v);
  EXPECT_EQ(s.finite, 0u);
  EXPECT_EQ(s.nan, 2u);
  EXPECT_EQ(s.inf, 1u);
  EXPECT_EQ(s.std_dev(), 0);
}

TEST(DiffAccumulator, FiguresOverFinitePairs) {
  const std::vector<double> a{1, 2, 3, kNaN, kInf, kNaN, kInf, 4};
  const std::vector<double> b{1, 2.5, 2, kNaN, kInf, 0, -kInf, 4};
  DiffAccumulator d;
  d.add(std::span(a).first(3), std::span(b).first(3), 0, 0);
  d.add(std::span(a).subspan(3), std::span(b).subspan(3), 0, 0);
  EXPECT_EQ(d.pairs, 8u);
  EXPECT_EQ(d.finite, 4u);
  EXPECT_EQ(d.nan_mismatch, 1u);
  EXPECT_EQ(d.inf_mismatch, 1u);
  EXPECT_EQ(d.unequal, 4u);  // 2 vs 2.5, 3 vs 2, and the two mismatches
  EXPECT_EQ(d.max_abs, 1.0);
  EXPECT_DOUBLE_EQ(d.rmse(), std::sqrt((0.25 + 1.0) / 4));
  EXPECT_DOUBLE_EQ(*d.nmse(), 1.25 / (1 + 6.25 + 4 + 16));
  EXPECT_DOUBLE_EQ(*d.cosine(), (1 + 5 + 6 + 16) / (std::sqrt(1 + 4 + 9 + 16.0) * std::sqrt(27.25)));
}

TEST(DiffAccumulator, ToleranceIsNumpysAllclose) {
  // |a-b| <= atol + rtol*|b|: not symmetric in a and b.
  const std::vector<double> a{10, 100};
  const std::vector<double> b{12, 120};
  DiffAccumulator d;
  d.add(a, b, 0, 0.18);
  EXPECT_EQ(d.not_close, 0u);
  DiffAccumulator swapped;
  swapped.add(b, a, 0, 0.18);
  EXPECT_EQ(swapped.not_close, 2u);
  DiffAccumulator absolute;
  absolute.add(a, b, 2.5, 0);
  EXPECT_EQ(absolute.not_close, 1u);
}

TEST(DiffAccumulator, UndefinedFiguresAreNone) {
  const std::vector<double> zeros{0, 0};
  const std::vector<double> ones{1, 1};
  DiffAccumulator same;
  same.add(zeros, zeros, 0, 0);
  EXPECT_EQ(*same.nmse(), 0);
  EXPECT_FALSE(same.cosine());
  DiffAccumulator against_zero;
  against_zero.add(ones, zeros, 0, 0);
  EXPECT_FALSE(against_zero.nmse());
  DiffAccumulator merged;
  merged.merge(against_zero);
  merged.merge(same);
  EXPECT_EQ(merged.pairs, 4u);
  EXPECT_EQ(merged.max_abs, 1.0);
}

TEST(ToDoubles, HalfAndIntegers) {
  const uint16_t halves[] = {0x3c00, 0xc000, 0x0001, 0x7c00, 0xfc00, 0x7e00, 0x8000, 0x7bff};
  double out[8];
  to_doubles(DType::Float16, reinterpret_cast<const std::byte*>(halves), 8, out);
  EXPECT_EQ(out[0], 1.0);
  EXPECT_EQ(out[1], -2.0);
  EXPECT_EQ(out[2], std::ldexp(1.0, -24));
  EXPECT_EQ(out[3], kInf);
  EXPECT_EQ(out[4], -kInf);
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_TRUE(std::signbit(out[6]) && out[6] == 0);
  EXPECT_EQ(out[7], 65504.0);
  const int64_t big[] = {-(int64_t{1} << 40), 7};
  to_doubles(DType::Int64, reinterpret_cast<const std::byte*>(big), 2, out);
  EXPECT_EQ(out[0], -std::ldexp(1.0, 40));
  EXPECT_EQ(out[1], 7);
  const uint8_t flags[] = {0, 1, 2};
  to_doubles(DType::Bool, reinterpret_cast<const std::byte*>(flags), 3, out);
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(out[2], 1);
}

TEST(Rename, SedLikeSubstitution) {
  EXPECT_EQ(Rename::parse("s/^model\\.layers\\.([0-9]+)/blk.\\1/").apply("model.layers.12.w"), "blk.12.w");
  EXPECT_EQ(Rename::parse("s|a|<&>|").apply("banana"), "b<a>nana");
  EXPECT_EQ(Rename::parse("s|a|<&>|g").apply("banana"), "b<a>n<a>n<a>");
  EXPECT_EQ(Rename::parse("s/x/$1/").apply("x"), "$1");
  EXPECT_EQ(Rename::parse("s/\\//./g").apply("a/b/c"), "a.b.c");
  EXPECT_THROW(Rename::parse("s/a/b"), std::invalid_argument);
  EXPECT_THROW(Rename::parse("y/a/b/"), std::invalid_argument);
  EXPECT_THROW(Rename::parse("s/a/b/q"), std::invalid_argument);
  EXPECT_THROW(Rename::parse("s/(/b/"), std::invalid_argument);
}

}  // namespace
}  // namespace modelfs::cli
