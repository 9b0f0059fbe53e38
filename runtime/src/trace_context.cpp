// Trace and span ids and the W3C trace context header (no threads, no exporters: the fuzz
// target of `weir trace` links this file alone).
#include <random>

#include "weir/runtime/trace.hpp"

namespace weir::trace {

namespace {

constexpr char kHex[] = "0123456789abcdef";

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

template <std::size_t N>
std::string to_hex(const std::array<std::uint8_t, N>& b) {
  std::string s(2 * N, '0');
  for (std::size_t i = 0; i < N; ++i) {
    s[2 * i] = kHex[b[i] >> 4];
    s[2 * i + 1] = kHex[b[i] & 15];
  }
  return s;
}

template <std::size_t N>
bool from_hex(std::string_view s, std::array<std::uint8_t, N>& out) {
  if (s.size() != 2 * N) return false;
  for (std::size_t i = 0; i < N; ++i) {
    const int hi = hex_value(s[2 * i]), lo = hex_value(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return true;
}

template <std::size_t N>
bool nonzero(const std::array<std::uint8_t, N>& b) {
  for (auto x : b)
    if (x) return true;
  return false;
}

std::mt19937_64& rng() {
  thread_local std::mt19937_64 g([] {
    std::random_device rd;
    return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  }());
  return g;
}

template <std::size_t N>
void fill_random(std::array<std::uint8_t, N>& b) {
  do {
    for (std::size_t i = 0; i < N; i += 8) {
      std::uint64_t x = rng()();
      for (std::size_t k = 0; k < 8 && i + k < N; ++k)
        b[i + k] = static_cast<std::uint8_t>(x >> (8 * k));
    }
  } while (!nonzero(b));
}

bool lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

}  // namespace

bool TraceId::valid() const noexcept {
  return nonzero(bytes);
}
bool SpanId::valid() const noexcept {
  return nonzero(bytes);
}
std::string TraceId::hex() const {
  return to_hex(bytes);
}
std::string SpanId::hex() const {
  return to_hex(bytes);
}

Result<TraceId> parse_trace_id(std::string_view hex) {
  TraceId id;
  if (!from_hex(hex, id.bytes) || !id.valid())
    return Error(Errc::invalid_argument, "a trace id is 32 hex digits, not all zero; got '" +
                                             std::string(hex.substr(0, 64)) + "'");
  return id;
}

Result<SpanId> parse_span_id(std::string_view hex) {
  SpanId id;
  if (!from_hex(hex, id.bytes) || !id.valid())
    return Error(Errc::invalid_argument, "a span id is 16 hex digits, not all zero; got '" +
                                             std::string(hex.substr(0, 32)) + "'");
  return id;
}

TraceId random_trace_id() {
  TraceId id;
  fill_random(id.bytes);
  return id;
}

SpanId random_span_id() {
  SpanId id;
  fill_random(id.bytes);
  return id;
}

std::optional<SpanContext> parse_traceparent(std::string_view tp, std::string_view tracestate) {
  // version "-" trace-id "-" parent-id "-" trace-flags, lower-case hex (W3C Trace Context).
  while (!tp.empty() && (tp.front() == ' ' || tp.front() == '\t')) tp.remove_prefix(1);
  while (!tp.empty() && (tp.back() == ' ' || tp.back() == '\t')) tp.remove_suffix(1);
  if (tp.size() < 55 || tp[2] != '-' || tp[35] != '-' || tp[52] != '-') return std::nullopt;
  const std::string_view version = tp.substr(0, 2);
  if (!lower_hex(version) || version == "ff") return std::nullopt;
  // Version 00 is exactly 55 characters; a later version may append "-..." fields.
  if (version == "00" ? tp.size() != 55 : (tp.size() > 55 && tp[55] != '-')) return std::nullopt;
  const std::string_view trace = tp.substr(3, 32), span = tp.substr(36, 16),
                         flags = tp.substr(53, 2);
  if (!lower_hex(trace) || !lower_hex(span) || !lower_hex(flags)) return std::nullopt;
  SpanContext c;
  std::array<std::uint8_t, 1> f{};
  if (!from_hex(trace, c.trace_id.bytes) || !from_hex(span, c.span_id.bytes) ||
      !from_hex(flags, f) || !c.valid())
    return std::nullopt;
  c.flags = f[0];
  bool printable = tracestate.size() <= 512;
  for (char ch : tracestate)
    if (ch < 0x20 || ch > 0x7e) printable = false;
  if (printable) c.trace_state = std::string(tracestate);
  return c;
}

std::string format_traceparent(const SpanContext& ctx) {
  std::array<std::uint8_t, 1> f{ctx.flags};
  return "00-" + ctx.trace_id.hex() + "-" + ctx.span_id.hex() + "-" + to_hex(f);
}

const AttributeValue* SpanData::attribute(std::string_view key) const {
  for (const auto& a : attributes)
    if (a.key == key) return &a.value;
  return nullptr;
}

}  // namespace weir::trace
