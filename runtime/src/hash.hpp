// SHA-256 (content addresses of artifacts) and CRC-32 (chunk checksums of artifact files).
// Private to runtime/ (sha256_hex is public: weir/runtime/sha256.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace weir::detail {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t n);
  std::array<std::uint8_t, 32> finish();

 private:
  void block(const std::uint8_t* p);
  std::uint32_t h_[8];
  std::uint8_t buf_[64];
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::uint32_t crc32(const void* data, std::size_t n, std::uint32_t crc = 0);

}  // namespace weir::detail
