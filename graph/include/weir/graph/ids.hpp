// The one rule for the ids weir stores: thread ids (chosen by users at every door: the CLI's
// --thread, the runs API's thread_id, the library's RunOptions::thread_id), checkpoint ids and
// run ids. An id is 1 to kMaxIdBytes bytes of UTF-8 text without control characters (U+0000 to
// U+001F and U+007F), in every backend: what one store could not hold (PostgreSQL text stops at
// a NUL byte) or would show garbled (a newline in `weir runs`, a log line) is refused where it
// comes in, the same way everywhere, and never cut short or changed.
// Thread safety: pure functions, any thread.
#pragma once

#include <cstddef>
#include <string_view>

#include "weir/runtime/error.hpp"

namespace weir::graph {

// The longest id, in bytes (two fit in one PostgreSQL index entry with room to spare).
inline constexpr std::size_t kMaxIdBytes = 1024;

// {} when `id` follows the rule; else invalid_argument naming `what` (the field: "thread_id"),
// the first offending byte and where it is, e.g. "thread_id holds a control character (byte 0x00
// at offset 1, after 'a'); an id is 1 to 1024 bytes of UTF-8 text without control characters".
Status check_id(std::string_view what, std::string_view id);

}  // namespace weir::graph
