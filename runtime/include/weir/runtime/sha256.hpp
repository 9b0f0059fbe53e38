// SHA-256 as 64 lowercase hex digits: the content address of artifacts (ArtifactStore), of the
// workflow a queued run carries, and of the input that started a run on a thread (the graph's
// continuation rule). One implementation (runtime/src/hash.cpp).
//
// Thread safety: a pure function.
#pragma once

#include <string>
#include <string_view>

namespace weir {

std::string sha256_hex(std::string_view data);

}  // namespace weir
