// A JSON Schema subset (draft 2020-12 keywords): enough to describe and check tool arguments
// and weir's own file formats (schemas/workflow.schema.json, schemas/crew.schema.json).
//
// Supported keywords:
//   type (object, array, string, number, integer, boolean, null, or a list of them), enum,
//   const; minimum, maximum, exclusiveMinimum, exclusiveMaximum, multipleOf; minLength,
//   maxLength (in Unicode code points), pattern; items, prefixItems, minItems, maxItems,
//   uniqueItems; properties, patternProperties, additionalProperties (boolean or a schema),
//   required, propertyNames, minProperties, maxProperties; allOf, anyOf, oneOf, not,
//   if/then/else; $ref to a local definition ("#", "#/$defs/x", "#/definitions/x" or any
//   "#/json/pointer" into the root schema; siblings of $ref apply too).
// A schema is an object or a boolean (true accepts everything, false nothing). Annotations and
// unknown keywords ($schema, $id, title, description, default, examples, ...) are ignored.
// "integer" accepts any number with an integral value (3 and 3.0); "number" every number;
// const, enum and uniqueItems compare numbers by value (1 equals 1.0).
//
// Patterns are ECMAScript regular expressions (std::regex, ECMAScript grammar) searched, not
// anchored, in the string's UTF-8 bytes: "." matches one byte. They run on libstdc++'s
// Thompson-NFA executor (no back-references, which check_schema reports; time linear in the
// input, stack bounded); strings longer than kMaxPatternInput bytes are refused, not matched.
//
// Messages start with the JSON pointer of the offending value ("(root)" for the document
// itself): "/expression: expected string, got number". oneOf and anyOf failures name each
// branch and its first problem (with full pointers), cut when long: "/e: matches none of the
// oneOf branches (0: /e/to: missing required property; 1: /e/route: missing required
// property)"; "exactly one" failures name the branches that matched.
//
// Limits: values nested deeper than kMaxValueDepth, more than kMaxRefDepth $refs in progress,
// or a $ref cycle that consumes no input (a $ref reached again for the same value) fail
// validation with a message that says so, instead of exhausting the stack.
//
// Thread safety: free functions over values; a Schema is immutable after compile() and may
// be shared between threads.
#pragma once

#include <cstddef>
#include <memory>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"
#include "weir/runtime/json_fields.hpp"

namespace weir::tools {

inline constexpr std::size_t kMaxValueDepth = 128;        // nesting of the validated value
inline constexpr std::size_t kMaxRefDepth = 512;          // $refs being expanded at once
inline constexpr std::size_t kMaxPatternInput = 1 << 20;  // bytes of a string matched to a pattern

// Checks `v` against `schema`, which is also the root that "$ref"s resolve against; the first
// violation (depth first, in document order) is an Errc::invalid_argument whose message is
// "pointer: problem". Patterns are compiled on use, once per call. REQUIRES:
// check_schema(schema) passed (a malformed keyword is otherwise ignored; an unresolvable $ref
// or a bad pattern is still reported).
Status validate(const boost::json::value& schema, const boost::json::value& v);

// As above, for a sub-schema of `root_schema` (what its "$ref"s resolve against). REQUIRES:
// `schema` is `root_schema` or lives inside it, and check_schema(root_schema) passed.
Status validate(const boost::json::value& schema, const boost::json::value& v,
                const boost::json::value& root_schema);

// Checks that supported keywords have the right types ("minimum" a number, "required" an array
// of strings, ...), recursively through every keyword that holds schemas (properties, items,
// $defs, allOf, if, ...); that patterns compile and "$ref"s resolve in `schema` (the root).
// Unknown keywords are ignored. Errors: invalid_argument, "schema /properties/k/minimum:
// expected a number, got string".
Status check_schema(const boost::json::object& schema);

// A checked schema with its patterns compiled once: for validating many values against one
// schema (a file format, a tool's parameters). Cheap to copy (shares the compiled form).
class Schema {
 public:
  // check_schema(schema), then compiles every pattern. Errors: check_schema's; a schema that
  // is not an object or a boolean.
  static Result<Schema> compile(boost::json::value schema);

  // As validate(json(), v), without compiling patterns again.
  Status validate(const boost::json::value& v) const;

  const boost::json::value& json() const noexcept;

 private:
  struct Compiled;
  explicit Schema(std::shared_ptr<const Compiled> c) : compiled_(std::move(c)) {}
  std::shared_ptr<const Compiled> compiled_;
};

// "string", "number", "object", ... : the JSON type of `v` as messages name it (integral
// numbers are "number" too). The runtime's (weir/runtime/json_fields.hpp), named here as before.
using weir::json_type_name;

}  // namespace weir::tools
