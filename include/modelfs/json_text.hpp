#pragma once
// How modelfs prints the JSON files it makes (sidecars, index.json,
// metadata.json): one top-level key per line, values compact, and arrays of
// objects one element per line — readable with cat, greppable line by line,
// and small even for 100 000 tensors. Invalid UTF-8 in names (binary formats
// may store any bytes) is replaced, never thrown on.
#include <string>

#include <nlohmann/json.hpp>

namespace modelfs {

std::string readable_json(const nlohmann::ordered_json& value);

}  // namespace modelfs
