// Request bodies, paths and Last-Event-IDs of the LangGraph Server API
// (serve/src/langgraph_request.cpp) and its message mapping (langgraph_messages.cpp): no crash, and
// every refusal is one of the codes its callers map to a status (400, 413, 422, 501) with a message
// to show; what is accepted holds together.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "langgraph_messages.hpp"
#include "langgraph_request.hpp"
#include "weir/http/client.hpp"

namespace {

void check(const weir::Error& e) {
  if (!e.is(weir::Errc::corrupt_data) && !e.is(weir::Errc::invalid_argument) &&
      !e.is(weir::Errc::unsupported) && !e.is(weir::Errc::memory_budget_exceeded))
    std::abort();
  if (e.message.empty()) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace weir::serve;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto& seg : langgraph_segments(text))
    if (seg.size() > text.size()) std::abort();  // decoding never grows a segment
  {  // an encoded id is one segment that decodes back to it
    const auto segs = langgraph_segments("/threads/" + encode_segment(text));
    if (!text.empty() && (segs.size() != 2 || segs[1] != text)) std::abort();
  }
  if (auto id = read_last_event_id(text); !id) {
    check(id.error());
  } else if (!id->checkpoint.empty() && id->checkpoint != "end" && id->index < 0) {
    std::abort();
  }
  // A webhook URL: a target that is a path, and an origin parse_url takes again.
  if (auto w = read_webhook_url(text); !w) {
    check(w.error());
  } else if (w->target.empty() || w->target[0] != '/' || !weir::http::parse_url(w->origin)) {
    std::abort();
  }
  if (auto batch = langgraph_batch(text); !batch) {
    check(batch.error());
  } else if (batch->empty() || batch->size() > kMaxBatch) {
    std::abort();
  }
  auto body = langgraph_body(text);
  if (!body) {
    check(body.error());
    return 0;
  }
  if (auto r = read_langgraph_run(*body, "POST /runs/wait"); !r) {
    check(r.error());
  } else if (r->assistant_id.empty() || (r->resume && !r->input.empty()) || r->after.count() < 0 ||
             r->after > weir::cluster::kMaxRunDelay ||
             (!r->webhook.empty() && !read_webhook_url(r->webhook))) {
    std::abort();
  }
  if (auto t = read_langgraph_thread_create(*body); !t) check(t.error());
  if (auto p = read_langgraph_page(*body); !p) {
    check(p.error());
  } else if (p->limit < 1 || p->limit > 1000) {
    std::abort();
  }
  if (auto b = read_langgraph_before(*body); !b) check(b.error());
  if (auto q = read_langgraph_thread_search(*body); !q) {
    check(q.error());
  } else if (q->ids && q->ids->size() > 1000) {
    std::abort();
  }
  if (auto q = read_langgraph_assistant_search(*body); !q) check(q.error());
  if (auto w = read_langgraph_assistant_write(*body, "POST /assistants"); !w) check(w.error());
  if (auto v = read_langgraph_assistant_version(*body); !v) check(v.error());
  if (auto c = read_langgraph_checkpoint(*body); !c) check(c.error());
  if (auto u = read_langgraph_state_update(*body); !u) check(u.error());
  if (auto p = read_langgraph_prune(*body); !p) {
    check(p.error());
  } else if (p->ids.size() > 1000) {
    std::abort();
  }
  if (auto c = read_langgraph_cancel_many(*body); !c) {
    check(c.error());
  } else if (c->thread_id.empty() && c->run_ids.empty()) {
    std::abort();
  }
  (void)json_contains(boost::json::value(*body), boost::json::value(*body));
  // Messages both ways: what comes in as LangChain's shape and is kept goes back out as it.
  if (auto in = input_from_langchain(*body); !in) {
    check(in.error());
  } else {
    (void)values_to_langchain(*in);
  }
  (void)values_to_langchain(*body);
  return 0;
}
