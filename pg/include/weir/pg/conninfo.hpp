// Checking and naming a PostgreSQL connection string without ever repeating its password.
//
// libpq parses the string (PQconninfoParse: key=value pairs or a postgres:// / postgresql:// URI);
// this wrapper refuses what libpq would misread (an embedded NUL, an empty string) and builds a
// description for error messages from the parsed options: user, host, port and database, never
// the password. libpq's own parse errors can quote the input, so any password-looking part of
// the input is scrubbed from them before they reach a message.
// Thread safety: pure functions, any thread.
#pragma once

#include <string>
#include <string_view>

#include "weir/runtime/error.hpp"

namespace weir::pg {

struct Conninfo {
  std::string conninfo;     // what to hand to PQconnectdb (the input, validated)
  std::string description;  // "postgres 'user@host:port/dbname'"; holds no password
};

// True when `s` is a URI for libpq (postgres:// or postgresql://, case as written).
bool is_postgres_uri(std::string_view s);

// invalid_argument when libpq cannot parse `conninfo` (the message is scrubbed of passwords).
Result<Conninfo> parse_conninfo(std::string_view conninfo);

// `text` with every occurrence of a password found in `conninfo` replaced by "***" (a password
// given as URI user info, a password= query parameter, or a password=value pair).
std::string scrub_password(std::string text, std::string_view conninfo);

}  // namespace weir::pg
