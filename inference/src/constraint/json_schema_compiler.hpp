// The JSON Schema compiler's private type: Compiler turns one schema into grammar rules
// (json_schema.cpp has the overview). Its members are defined in json_schema.cpp (the structure:
// $ref, allOf, anyOf / oneOf, enum / const, and which type a schema is) and
// json_schema_types.cpp (each JSON type's grammar: strings and their formats, numbers, objects,
// arrays, and any value).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <boost/json.hpp>

#include "constraint/grammar.hpp"

namespace weir::inference::constraint {

namespace json = boost::json;

struct Compiler {
  GrammarBuilder& b;
  const json::value& root;
  std::unordered_map<std::string, std::uint32_t> refs;
  std::deque<json::value> arena;  // merged schemas (allOf, siblings of anyOf)
  std::optional<Sym> any_value_, string_, json_char_, ws_;
  bool failed = false;
  Error err;

  Sym fail(std::string msg);
  static std::string at(const std::string& ptr) { return ptr.empty() ? "(root)" : ptr; }

  // --- each JSON type's grammar (json_schema_types.cpp) -----------------------------------

  Sym digits(int lo, int hi);
  Sym ws();
  Sym json_char();
  Sym string_any();
  Sym number_any();
  Sym int_part();  // 0 | [1-9][0-9]{0,17}
  Sym any_value();

  // Integers: "0", [1-9][0-9]{0,17} and their negatives (not "-0").
  Sym int_any();
  // An integer or a number with the schema's bounds (json_number.hpp) or without any.
  Sym bounded(const json::object& o, const std::string& ptr, bool integer);

  // A count keyword (minLength, maxItems, ...): a whole number (2.0 is 2), `def` when absent.
  // One past the grammar's size limit is refused by name (a repetition that long cannot fit).
  std::int64_t count_of(const json::object& o, const char* k, const std::string& ptr,
                        std::int64_t def);

  Sym string_schema(const json::object& o, const std::string& ptr);

  // Keys of additional properties: [A-Za-z0-9_-]* other than the declared names (a subset of
  // what the schema allows, chosen so that the complement of a finite set stays small).
  Sym extra_key(const std::vector<std::string>& names);

  Sym object_schema(const json::object& o, const std::string& ptr);

  Sym array_schema(const json::object& o, const std::string& ptr);

  // --- structure (json_schema.cpp) -------------------------------------------------------

  const json::value* resolve(const std::string& ref, const std::string& ptr);

  // Follows a chain of bare {"$ref": ...} objects (at most 32 hops, so a cycle is an error
  // rather than a hang). Returns nullptr, with the error recorded, when a reference is not a
  // string, does not resolve, or loops.
  const json::value* deref(const json::value* s, const std::string& ptr);

  static bool annotation(std::string_view k);
  static bool supported(std::string_view k);

  // Merges schema objects for allOf (and siblings of anyOf/oneOf). Errors when a keyword
  // cannot be combined.
  json::value merge(const json::value& a0, const json::value& b0, const std::string& ptr,
                    int depth = 0);

  // The JSON types a schema can produce (for oneOf disjointness); "any" for all.
  std::set<std::string> types_of(const json::value& s0, const std::string& ptr, int depth = 0);
  // A required property with a const (or single enum) value: its serialised value.
  std::map<std::string, std::string> discriminators(const json::value& s0, const std::string& ptr);
  bool disjoint(const json::value& x, const json::value& y, const std::string& ptr);

  // A schema, top to bottom: a boolean; otherwise its keywords checked, then the first of
  // these that it has decides its shape: $ref (a rule per reference), allOf (merged into one
  // schema), anyOf / oneOf (one branch each), enum / const (their values' text), type (each
  // type's grammar; without type, the types its keywords imply).
  Sym compile(const json::value& s, const std::string& ptr);

  // The first keyword weir cannot enforce, as the error to give; nullopt when all are known.
  std::optional<std::string> unsupported_keyword(const json::object& o, const std::string& ptr);
  // Has a keyword beyond annotations (a schema of annotations only allows any value).
  static bool constraining(const json::object& o);

  // {"$ref": "#/..."}: one rule per reference, so recursive schemas refer back to it.
  Sym ref_schema(const json::object& o, const std::string& ptr);

  // allOf: the branches and the siblings merged into one schema, compiled in their place.
  Sym all_of(const json::object& o, const json::object& siblings, const std::string& ptr);

  // anyOf / oneOf: one alternative per branch, the siblings merged into each; oneOf only
  // when its branches are provably disjoint.
  Sym any_of(const json::object& o, const json::object& siblings, const std::string& ptr);

  // enum / const: the values' compact JSON text (with `type` beside them, those of its types).
  Sym enum_values(const json::object& o, const std::string& ptr);

  // The schema's types (from `type`, or implied by its keywords), each by its own grammar.
  Sym typed(const json::object& o, const std::string& ptr);

  // No type: the keywords present say which (a subset of what the schema allows).
  static std::vector<std::string> implied_types(const json::object& o);
};

}  // namespace weir::inference::constraint
