// The LangGraph store routes' request bodies and query string
// (serve/src/langgraph_store_request.cpp) and the store's rules and filters
// (graph/src/store_common.cpp): no crash, every refusal is one of the codes its callers map to a
// status (400, 422, 501) with a message to show, and what is accepted holds together (it passes the
// store's own checks; a filter matches what it was read from, or not, without failing).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "langgraph_request.hpp"
#include "langgraph_store_request.hpp"

namespace {

void check(const weir::Error& e) {
  if (!e.is(weir::Errc::corrupt_data) && !e.is(weir::Errc::invalid_argument) &&
      !e.is(weir::Errc::unsupported))
    std::abort();
  if (e.message.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weir;
  using namespace weir::serve;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const graph::StoreLimits limits;
  // The input as a GET's target ("?namespace=...&key=..." or anything).
  if (auto g = read_store_get(text, limits); !g) {
    check(g.error());
  } else if (!graph::check_store_namespace(g->ns, limits, "namespace") ||
             !graph::check_store_key(g->key, limits)) {
    std::abort();
  }
  auto body = langgraph_body(text);
  if (!body) {
    check(body.error());
    return 0;
  }
  if (auto p = read_store_put(*body, limits); !p) {
    check(p.error());
  } else if (!graph::check_store_value(p->value, limits) ||
             !(p->value.is_null() || p->value.is_object())) {
    std::abort();
  } else if (p->value.is_object()) {
    // A value matches a filter made of itself (equality, field by field), when that filter is one
    // (a value with $-keys reads as operators).
    if (graph::check_store_filter(p->value.as_object()) &&
        !graph::store_filter_matches(p->value.as_object(), p->value.as_object()))
      std::abort();
  }
  if (auto d = read_store_delete(*body, limits); !d) check(d.error());
  if (auto q = read_store_search(*body, limits); !q) {
    check(q.error());
  } else {
    if (!graph::check_store_search(*q, limits) || q->limit < 1 || q->limit > graph::kMaxStorePage)
      std::abort();
    (void)graph::store_filter_matches(*body, q->filter);
  }
  if (auto n = read_store_namespaces(*body, limits); !n) {
    check(n.error());
  } else if (!graph::check_namespace_query(*n, limits)) {
    std::abort();
  }
  return 0;
}
