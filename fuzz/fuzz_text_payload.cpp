// The weir_text notifications a run service hears from workers (cluster/src/text_notify.hpp):
// any bytes are parsed without a crash; a payload that parses is written again as the
// publisher writes it, and its chunks read back to the same piece.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "../cluster/src/text_notify.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  auto p = weir::cluster::parse_text_payload(in);
  if (!p) return 0;
  std::string joined;
  std::uint64_t next = p->second.offset;
  for (const auto& chunk : weir::cluster::text_payloads(p->first, p->second)) {
    auto back = weir::cluster::parse_text_payload(chunk);
    if (!back || back->first != p->first || back->second.message_id != p->second.message_id ||
        back->second.step != p->second.step || back->second.offset != next)
      std::abort();
    next += back->second.text.size();
    joined += back->second.text;
  }
  if (joined != p->second.text) std::abort();
  return 0;
}
