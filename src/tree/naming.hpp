// SPDX-License-Identifier: Apache-2.0
#pragma once
// How tensor names become paths (docs/design.md, "Names and paths").
//
// A name is split at '.' and '/' into components: "model.layers.0.weight"
// -> model/layers/0/weight. With -o flat it stays whole. Each component is
// then made a valid, unambiguous file name:
//
//   '%'            -> %25      (so every escape below is unambiguous)
//   NUL            -> %00
//   '/'            -> %2F      (flat mode; split mode splits there)
//   ""  (empty)    -> %        ("a..b" -> a/%/b; ".x" -> %/x)
//   "." and ".."   -> %2E and %2E%2E (flat mode)
//   over 240 bytes -> its first 200 bytes, "%%", and 16 hex digits of the
//                     FNV-1a 64 hash of the whole component
//
// Clashes left after that (a tensor file named like a folder, a tensor
// named like another's sidecar) are resolved by the tree builder, which
// appends "~1", "~2", ... to the later tensor's file name. The index
// (.modelfs/index.json) maps every name to its path.
#include <string>
#include <string_view>
#include <vector>

namespace modelfs {

inline constexpr size_t kMaxComponentBytes = 240;  // leaves room for "~N.json" under NAME_MAX

std::string escape_component(std::string_view component);
// `text` split at each of `separators`, each piece escaped.
std::vector<std::string> escaped_components(std::string_view text, std::string_view separators);
std::vector<std::string> tensor_path_components(std::string_view name, bool flat);

}  // namespace modelfs
