// A JSON Schema subset: enough to describe and check tool arguments.
//
// Supported keywords: type (object, array, string, number, integer, boolean, null, or a list of
// them), properties, required, additionalProperties (boolean or a schema), items (a schema),
// enum, minimum, maximum, minLength, maxLength (in Unicode code points), minItems, maxItems.
// Other keywords (description, default, title, ...) are ignored. "integer" accepts any number
// with an integral value (3 and 3.0); "number" accepts every number.
//
// Messages start with the JSON pointer of the offending value ("(root)" for the document
// itself): "/expression: expected string, got number".
//
// Thread safety: free functions over values.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "weir/runtime/error.hpp"

namespace weir::tools {

// Checks `v` against `schema`; the first violation (depth first, in document order) is an
// Errc::invalid_argument whose message is "pointer: problem". REQUIRES: check_schema(schema)
// passed (a malformed keyword is otherwise ignored).
Status validate(const boost::json::value& schema, const boost::json::value& v);

// Checks that supported keywords have the right types ("minimum" a number, "required" an array
// of strings, ...), recursively through properties/items/additionalProperties. Unknown
// keywords are ignored. Errors: invalid_argument, "schema /properties/k/minimum: expected a
// number, got string".
Status check_schema(const boost::json::object& schema);

// "string", "number", "object", ... : the JSON type of `v` as messages name it (integral
// numbers are "number" too).
const char* json_type_name(const boost::json::value& v) noexcept;

}  // namespace weir::tools
