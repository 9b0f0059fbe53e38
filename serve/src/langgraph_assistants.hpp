// The LangGraph API's created assistants (POST /assistants): a graph with settings of its own
// (name, description, config, metadata), each change a new version, kept in a graph::Store under
// one namespace, one item per assistant holding its current settings and its versions. The
// store is the thread list's (langgraph_book.hpp): in-process a memory store, with --db the
// PostgreSQL store every server on that database shares. A graph's default assistant (its
// graph id, or LangGraph's uuid5 of it) is not kept here: it is the graph itself.
//
// Thread safety: every method may be called from any thread; calls may block (PostgreSQL):
// call them off an I/O thread. A create, update or set_latest is one atomic read-modify-write
// of the assistant's item (graph::Store::update).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "langgraph_request.hpp"
#include "weir/graph/store.hpp"
#include "weir/runtime/error.hpp"

namespace weir::serve {

struct LangGraphAssistant {
  std::string id, graph_id, name;
  boost::json::value description;  // a string or null
  boost::json::object config, metadata;
  std::int64_t version = 1;
  std::int64_t created_ms = 0, updated_ms = 0;  // updated_ms: when this version was made
};

// The assistant as the SDK reads it (the shape of assistant_json).
boost::json::object assistant_object(const LangGraphAssistant& a);

class LangGraphAssistants {
 public:
  static constexpr std::size_t kMaxAssistants = 1000;  // one store page: all() reads them at once
  static constexpr std::size_t kVersionsKept = 100;    // the oldest beyond are dropped

  explicit LangGraphAssistants(std::shared_ptr<graph::Store> store);

  Result<std::optional<LangGraphAssistant>> get(const std::string& id) const;
  // Every created assistant (at most kMaxAssistants).
  Result<std::vector<LangGraphAssistant>> all() const;
  // Adds `a` (version 1). When its id is taken: `existing` holds that assistant and the answer
  // is false. Errors: overloaded (kMaxAssistants), the store's.
  Result<bool> create(const LangGraphAssistant& a, LangGraphAssistant& existing);
  // A new version with the fields `w` gives (metadata merged into the current one's, the rest
  // replaced). Errors: not_found, the store's.
  Result<LangGraphAssistant> update(const std::string& id, const LangGraphAssistantWrite& w,
                                    std::int64_t now_ms);
  // Makes version `version` the current one. Errors: not_found (the assistant, or a version it
  // does not keep: the message lists those it does).
  Result<LangGraphAssistant> set_latest(const std::string& id, std::int64_t version,
                                        std::int64_t now_ms);
  // Newest first.
  Result<std::vector<LangGraphAssistant>> versions(const std::string& id) const;
  Status erase(const std::string& id);

 private:
  std::shared_ptr<graph::Store> store_;
};

}  // namespace weir::serve
