// SPDX-License-Identifier: Apache-2.0
#pragma once
// libmodelfs.so is built with every symbol hidden (-fvisibility=hidden):
// only what a declaration marks MODELFS_API is exported, so the library's
// ABI is its documented API and no internal is part of it. The program, the
// unit tests and the fuzzers link the same code statically (modelfs_internal
// in CMakeLists.txt), where the mark changes nothing.
#define MODELFS_API __attribute__((visibility("default")))
