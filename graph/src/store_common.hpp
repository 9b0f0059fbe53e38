// What the store backends share (store.hpp): a namespace's stored form, the one search and
// list_namespaces algorithm over rows a backend reads, and the error texts every backend uses.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "weir/graph/store.hpp"

namespace weir::graph::store_detail {

// ["a", "b"] <-> "a.b": labels hold no '.', so the joined form is one-to-one and a prefix range
// of it is a namespace prefix (see prefix_range).
std::string join_namespace(const Namespace& ns);
Namespace split_namespace(std::string_view joined);

// The stored namespaces under `prefix` (joined, non-empty) are the one equal to it and those in
// [prefix + ".", prefix + "/") in byte order ('/' follows '.').
struct PrefixRange {
  std::string exact, low, high;
};
PrefixRange prefix_range(const std::string& joined_prefix);

// The leading labels of a NamespaceQuery prefix before its first "*" (what a backend can narrow
// its read with).
Namespace literal_prefix(const Namespace& prefix);

// One stored row as a backend reads it: the value still as its JSON text.
struct StoredRow {
  std::string ns;  // joined
  std::string key;
  std::string value;
  int64_t created_at_ms = 0, updated_at_ms = 0, seq = 0;
};

// The value's JSON text read back (an object, within kMaxJsonDepth); corrupt_data naming `where`
// ("sqlite store '/p'"), the namespace and the key otherwise.
Result<StoreItem> item_of(StoredRow row, std::string_view where);

// Reads rows under the prefix in descending seq order, `batch` at a time, each after `below`
// (nullopt: from the newest); an empty answer ends the scan.
using FetchRows =
    std::function<Result<std::vector<StoredRow>>(std::optional<int64_t> below, std::size_t batch)>;
// search() for a backend that can read rows newest first: filters and pages them. REQUIRES: q
// passed check_store_search.
Result<std::vector<StoreItem>> search_rows(const StoreSearch& q, const FetchRows& fetch,
                                           std::string_view where);

// list_namespaces() over the distinct stored namespaces (joined): matches, cuts, sorts, dedups and
// pages them. REQUIRES: q passed check_namespace_query.
std::vector<Namespace> select_namespaces(const std::vector<std::string>& joined,
                                         const NamespaceQuery& q);

// "namespace 'a.b' key 'k'" for messages.
std::string describe_item(const Namespace& ns, std::string_view key);

}  // namespace weir::graph::store_detail
