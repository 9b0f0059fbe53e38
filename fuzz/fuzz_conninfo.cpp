// The PostgreSQL connection-string wrapper (pg/src/conninfo.cpp) must never crash,
// and the description it builds for error messages must never hold the password libpq parsed.
#include <libpq-fe.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "weir/pg/conninfo.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto r = weir::pg::parse_conninfo(text);
  (void)weir::pg::scrub_password(std::string(text), text);
  if (!r) return 0;
  char* err = nullptr;
  PQconninfoOption* opts = PQconninfoParse(r->conninfo.c_str(), &err);
  PQfreemem(err);
  if (opts == nullptr) __builtin_trap();  // the wrapper accepted what libpq refuses
  for (PQconninfoOption* o = opts; o->keyword != nullptr; ++o) {
    const std::string_view key = o->keyword;
    // Passwords of 4+ bytes: a shorter one may occur by chance in a host or database name.
    if (key == "password" && o->val != nullptr && std::string_view(o->val).size() >= 4 &&
        r->description.find(o->val) != std::string::npos)
      __builtin_trap();
  }
  PQconninfoFree(opts);
  return 0;
}
