#include "langgraph_assistants.hpp"

#include <algorithm>
#include <utility>

#include <boost/json.hpp>

#include "langgraph_shapes.hpp"

namespace weir::serve {

namespace json = boost::json;

namespace {

const graph::Namespace& assistants_namespace() {
  static const graph::Namespace ns{"weir_langgraph_assistants"};
  return ns;
}

// One version as the item keeps it.
json::object version_of(const LangGraphAssistant& a) {
  return json::object{{"graph_id", a.graph_id},       {"name", a.name},
                      {"description", a.description}, {"config", a.config},
                      {"metadata", a.metadata},       {"version", a.version},
                      {"created_ms", a.created_ms},   {"updated_ms", a.updated_ms}};
}

LangGraphAssistant assistant_of(const std::string& id, const json::object& v) {
  LangGraphAssistant a;
  a.id = id;
  auto str = [&](const char* k) {
    const auto* x = v.if_contains(k);
    return x && x->is_string() ? std::string(x->as_string()) : std::string();
  };
  auto num = [&](const char* k) {
    const auto* x = v.if_contains(k);
    return x && x->is_int64() ? x->as_int64() : std::int64_t{0};
  };
  auto obj = [&](const char* k) {
    const auto* x = v.if_contains(k);
    return x && x->is_object() ? x->as_object() : json::object{};
  };
  a.graph_id = str("graph_id");
  a.name = str("name");
  if (const auto* d = v.if_contains("description"); d && d->is_string()) a.description = *d;
  a.config = obj("config");
  a.metadata = obj("metadata");
  a.version = std::max<std::int64_t>(1, num("version"));
  a.created_ms = num("created_ms");
  a.updated_ms = num("updated_ms");
  return a;
}

// The item's versions, newest first.
std::vector<LangGraphAssistant> versions_in(const std::string& id, const json::object& item) {
  std::vector<LangGraphAssistant> out;
  if (const auto* vs = item.if_contains("versions"); vs && vs->is_array())
    for (const auto& v : vs->as_array())
      if (v.is_object()) out.push_back(assistant_of(id, v.as_object()));
  return out;
}

// An item whose current version is `a`, its versions `a` and `older`'s, newest first (the
// newest kVersionsKept).
json::object item_of(const LangGraphAssistant& a, std::vector<LangGraphAssistant> older) {
  json::object item = version_of(a);
  std::erase_if(older, [&](const LangGraphAssistant& o) { return o.version == a.version; });
  older.push_back(a);
  std::sort(older.begin(), older.end(),
            [](const auto& x, const auto& y) { return x.version > y.version; });
  json::array vs;
  for (const auto& o : older) {
    if (vs.size() >= LangGraphAssistants::kVersionsKept) break;
    vs.push_back(version_of(o));
  }
  item["versions"] = std::move(vs);
  return item;
}

Error unknown(const std::string& id) {
  return Error(Errc::not_found, "Assistant '" + id + "' not found");
}

}  // namespace

json::object assistant_object(const LangGraphAssistant& a) {
  return json::object{{"assistant_id", a.id},
                      {"graph_id", a.graph_id},
                      {"config", a.config},
                      {"context", json::object{}},
                      {"metadata", a.metadata},
                      {"name", a.name},
                      {"description", a.description},
                      {"version", a.version},
                      {"created_at", iso_time(a.created_ms)},
                      {"updated_at", iso_time(a.updated_ms)}};
}

LangGraphAssistants::LangGraphAssistants(std::shared_ptr<graph::Store> store)
    : store_(std::move(store)) {}

Result<std::optional<LangGraphAssistant>> LangGraphAssistants::get(const std::string& id) const {
  auto item = store_->get(assistants_namespace(), id);
  if (!item) return std::move(item).error();
  if (!*item) return std::optional<LangGraphAssistant>();
  return std::optional<LangGraphAssistant>(assistant_of(id, (**item).value));
}

Result<std::vector<LangGraphAssistant>> LangGraphAssistants::all() const {
  graph::StoreSearch q;
  q.namespace_prefix = assistants_namespace();
  q.limit = kMaxAssistants;
  auto items = store_->search(q);
  if (!items) return std::move(items).error();
  std::vector<LangGraphAssistant> out;
  out.reserve(items->size());
  for (const auto& it : *items) out.push_back(assistant_of(it.key, it.value));
  return out;
}

Result<bool> LangGraphAssistants::create(const LangGraphAssistant& a,
                                         LangGraphAssistant& existing) {
  auto have = all();
  if (!have) return std::move(have).error();
  if (have->size() >= kMaxAssistants &&
      std::none_of(have->begin(), have->end(), [&](const auto& x) { return x.id == a.id; }))
    return Error(Errc::overloaded, "this server keeps at most " + std::to_string(kMaxAssistants) +
                                       " assistants; delete some first");
  bool created = false;
  auto s = store_->update(assistants_namespace(), a.id,
                          [&](const std::optional<graph::StoreItem>& now) -> Result<json::value> {
                            created = !now;
                            if (now) {
                              existing = assistant_of(a.id, now->value);
                              return json::value(now->value);  // left as it is
                            }
                            return json::value(item_of(a, {}));
                          });
  if (!s) return std::move(s).error();
  return created;
}

Result<LangGraphAssistant> LangGraphAssistants::update(const std::string& id,
                                                       const LangGraphAssistantWrite& w,
                                                       std::int64_t now_ms) {
  LangGraphAssistant out;
  auto s = store_->update(assistants_namespace(), id,
                          [&](const std::optional<graph::StoreItem>& now) -> Result<json::value> {
                            if (!now) return unknown(id);
                            const auto older = versions_in(id, now->value);
                            LangGraphAssistant a = assistant_of(id, now->value);
                            std::int64_t top = a.version;
                            for (const auto& o : older) top = std::max(top, o.version);
                            if (w.graph_id) a.graph_id = *w.graph_id;
                            if (w.name) a.name = *w.name;
                            if (w.description) a.description = *w.description;
                            if (w.config) a.config = *w.config;
                            if (w.metadata)
                              for (const auto& kv : *w.metadata) a.metadata[kv.key()] = kv.value();
                            a.version = top + 1;
                            a.updated_ms = now_ms;
                            out = a;
                            return json::value(item_of(a, older));
                          });
  if (!s) return std::move(s).error();
  return out;
}

Result<LangGraphAssistant> LangGraphAssistants::set_latest(const std::string& id,
                                                           std::int64_t version,
                                                           std::int64_t now_ms) {
  LangGraphAssistant out;
  auto s = store_->update(assistants_namespace(), id,
                          [&](const std::optional<graph::StoreItem>& now) -> Result<json::value> {
                            if (!now) return unknown(id);
                            const auto older = versions_in(id, now->value);
                            std::string kept;
                            for (const auto& o : older) {
                              if (o.version == version) {
                                out = o;
                                out.created_ms = assistant_of(id, now->value).created_ms;
                                out.updated_ms = now_ms;
                                return json::value(item_of(out, older));
                              }
                              kept += (kept.empty() ? "" : ", ") + std::to_string(o.version);
                            }
                            return Error(Errc::not_found, "assistant '" + id + "' has no version " +
                                                              std::to_string(version) +
                                                              " (it keeps " + kept + ")");
                          });
  if (!s) return std::move(s).error();
  return out;
}

Result<std::vector<LangGraphAssistant>> LangGraphAssistants::versions(const std::string& id) const {
  auto item = store_->get(assistants_namespace(), id);
  if (!item) return std::move(item).error();
  if (!*item) return unknown(id);
  return versions_in(id, (**item).value);
}

Status LangGraphAssistants::erase(const std::string& id) {
  auto item = store_->get(assistants_namespace(), id);
  if (!item) return std::move(item).error();
  if (!*item) return unknown(id);
  return store_->remove(assistants_namespace(), id);
}

}  // namespace weir::serve
