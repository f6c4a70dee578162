#pragma once
// NumPy .npy headers (docs/formats.md, "NumPy .npy headers") for the .npy views: magic, version,
// header length, then the dict literal padded with spaces and '\n' so the
// data that follows starts 64-byte aligned, as numpy's own writer does.
// The data itself is never copied: the view is this header followed by the
// tensor's mapped bytes.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace modelfs {

// Version 1.0 when the header fits a u16 length, 2.0 otherwise.
std::string npy_header(std::string_view descr, std::span<const uint64_t> shape,
                       bool fortran_order);

}  // namespace modelfs
