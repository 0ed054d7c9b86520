// A strict JSON reader (RFC 8259) for the JSON that braid reads from its
// environment, such as TensorFlow's TF_CONFIG. Small texts from users, not
// network bytes, but read as untrusted all the same (tests/fuzz/fuzz_tf_config.cpp):
// nesting is limited, strings must be valid UTF-8, duplicate keys and
// trailing text are errors, and every error names the byte offset.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace braid {

/// One JSON value. Arrays and objects hold their elements in `items`, in the
/// order of the text; an object's keys are in `keys`, parallel to `items`.
struct JsonValue {
  enum class Kind { null, boolean, number, string, array, object };

  Kind kind = Kind::null;
  bool boolean = false;
  double number = 0;
  std::string text;  ///< a string's value (UTF-8, escapes decoded); a number's literal
  std::vector<JsonValue> items;
  std::vector<std::string> keys;
  std::size_t offset = 0;  ///< where the value starts in the text, for messages

  /// An object's member named `key`, or null (also when this is no object).
  const JsonValue* find(std::string_view key) const;
  /// A number written without fraction or exponent that fits a long long.
  std::optional<long long> integer() const;
};

/// "a string", "an array", ...: what a value is, for messages.
std::string_view describe(JsonValue::Kind kind);

/// The deepest nesting of arrays and objects accepted: far beyond any
/// configuration, and a bound on the reader's recursion.
inline constexpr int kJsonMaxDepth = 64;

/// Parses exactly one JSON value (surrounded by optional whitespace). Throws
/// InvalidArgument "<what> is not JSON at offset N: <why>" otherwise.
JsonValue parse_json(std::string_view text, std::string_view what);

}  // namespace braid
