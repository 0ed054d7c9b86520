// A recursive-descent reader over the grammar of RFC 8259, one function per
// production. It reads ahead one byte at most, so the offset in an error is
// the byte where the text stopped making sense.
#include "core/json.hpp"

#include <charconv>
#include <cstdint>
#include <set>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Reader {
 public:
  Reader(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  JsonValue document() {
    skip_space();
    JsonValue v = value(0);
    skip_space();
    if (!at_end()) fail(cat("unexpected ", found(), " after the JSON value"));
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const { fail_at(pos_, why); }
  [[noreturn]] void fail_at(std::size_t at, const std::string& why) const {
    throw InvalidArgument(cat(what_, " is not JSON at offset ", at, ": ", why));
  }

  bool at_end() const { return pos_ >= text_.size(); }
  char peek() const { return at_end() ? '\0' : text_[pos_]; }

  // What stands at the current offset, for messages.
  std::string found() const {
    if (at_end()) return "end of the text";
    unsigned char c = static_cast<unsigned char>(text_[pos_]);
    if (c >= 0x20 && c < 0x7f) return cat("'", text_[pos_], "'");
    static constexpr char kHex[] = "0123456789abcdef";
    return cat("byte 0x", kHex[c >> 4], kHex[c & 15]);
  }

  void skip_space() {
    while (!at_end() && (peek() == ' ' || peek() == '\t' || peek() == '\n' || peek() == '\r')) ++pos_;
  }

  void expect(char c, std::string_view context) {
    if (peek() != c) fail(cat("expected '", c, "' ", context, ", found ", found()));
    ++pos_;
  }

  JsonValue value(int depth) {
    JsonValue v;
    v.offset = pos_;
    switch (peek()) {
      case '{': object(v, depth); break;
      case '[': array(v, depth); break;
      case '"':
        v.kind = JsonValue::Kind::string;
        v.text = string();
        break;
      case 't':
      case 'f':
        v.kind = JsonValue::Kind::boolean;
        v.boolean = peek() == 't';
        literal(v.boolean ? "true" : "false");
        break;
      case 'n': literal("null"); break;
      default:
        if (peek() == '-' || is_digit(peek())) number(v);
        else fail(cat("expected a value, found ", found()));
    }
    return v;
  }

  // Steps over an object's or array's opening bracket; false when the
  // closing one follows at once (and is stepped over too): it is empty.
  bool open(int depth, char close) {
    if (depth >= kJsonMaxDepth) fail(cat("arrays and objects nest deeper than ", kJsonMaxDepth, " levels"));
    ++pos_;
    skip_space();
    if (peek() != close) return true;
    ++pos_;
    return false;
  }

  // After a member or element: true past a ',' (another follows), false past
  // the closing bracket.
  bool next(char close, std::string_view context) {
    skip_space();
    if (peek() == ',') {
      ++pos_;
      skip_space();
      return true;
    }
    expect(close, context);
    return false;
  }

  void object(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::object;
    if (!open(depth, '}')) return;
    std::set<std::string, std::less<>> seen;
    do {
      if (peek() != '"') fail(cat("expected a string key, found ", found()));
      const std::size_t key_at = pos_;
      std::string key = string();
      if (!seen.insert(key).second) fail_at(key_at, cat("duplicate key \"", key, "\""));
      skip_space();
      expect(':', "after an object key");
      skip_space();
      v.keys.push_back(std::move(key));
      v.items.push_back(value(depth + 1));
    } while (next('}', "or ',' after an object member"));
  }

  void array(JsonValue& v, int depth) {
    v.kind = JsonValue::Kind::array;
    if (!open(depth, ']')) return;
    do {
      v.items.push_back(value(depth + 1));
    } while (next(']', "or ',' after an array element"));
  }

  void literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) fail(cat("expected a value, found ", found()));
    pos_ += word.size();
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
  void number(JsonValue& v) {
    const std::size_t start = pos_;
    auto digits = [&](std::string_view where) {
      if (!is_digit(peek())) fail(cat("expected a digit ", where, ", found ", found()));
      while (is_digit(peek())) ++pos_;
    };
    if (peek() == '-') ++pos_;
    if (peek() == '0') ++pos_;
    else digits("in a number");
    if (peek() == '.') {
      ++pos_;
      digits("after the decimal point");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      if (peek() == '+' || peek() == '-') ++pos_;
      digits("in the exponent");
    }
    v.kind = JsonValue::Kind::number;
    v.text = std::string(text_.substr(start, pos_ - start));
    auto [end, ec] = std::from_chars(v.text.data(), v.text.data() + v.text.size(), v.number);
    if (ec != std::errc() || end != v.text.data() + v.text.size())
      fail_at(start, cat("the number ", v.text, " is out of range"));
  }

  unsigned hex4() {
    unsigned value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = peek();
      int digit = -1;
      if (is_digit(c)) digit = c - '0';
      else if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') digit = c - 'A' + 10;
      if (digit < 0) fail(cat("expected 4 hex digits after \\u, found ", found()));
      value = value * 16 + static_cast<unsigned>(digit);
      ++pos_;
    }
    return value;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  // \uXXXX, or a surrogate pair \uD8xx\uDCxx: one code point.
  unsigned unicode_escape() {
    const std::size_t at = pos_ - 2;
    unsigned cp = hex4();
    if (cp >= 0xdc00 && cp <= 0xdfff) fail_at(at, "a low surrogate \\u escape without a high one before it");
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (text_.substr(pos_, 2) != "\\u") fail_at(at, "a high surrogate \\u escape without a low one after it");
      pos_ += 2;
      unsigned low = hex4();
      if (low < 0xdc00 || low > 0xdfff) fail_at(at, "a high surrogate \\u escape without a low one after it");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
    }
    return cp;
  }

  // One UTF-8 sequence, copied: no overlong forms, surrogates or code points
  // above U+10FFFF (RFC 3629).
  void utf8_sequence(std::string& out) {
    const std::size_t at = pos_;
    auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text_[at + i]); };
    const unsigned char lead = byte(0);
    std::size_t length = 0;
    unsigned char lo = 0x80, hi = 0xbf;  // range of the second byte
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      if (lead == 0xe0) lo = 0xa0;  // else overlong
      if (lead == 0xed) hi = 0x9f;  // else a surrogate
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      if (lead == 0xf0) lo = 0x90;  // else overlong
      if (lead == 0xf4) hi = 0x8f;  // else above U+10FFFF
    }
    bool ok = length > 0 && at + length <= text_.size() && byte(1) >= lo && byte(1) <= hi;
    for (std::size_t i = 2; ok && i < length; ++i) ok = byte(i) >= 0x80 && byte(i) <= 0xbf;
    if (!ok) fail_at(at, "a string holds bytes that are not UTF-8");
    out.append(text_.substr(at, length));
    pos_ += length;
  }

  std::string string() {
    const std::size_t start = pos_;
    ++pos_;  // the opening quote
    std::string out;
    while (true) {
      if (at_end()) fail_at(start, "a string is not terminated");
      const unsigned char c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail(cat("a string holds the control character ", found(), " (write it as an escape)"));
      if (c >= 0x80) {
        utf8_sequence(out);
        continue;
      }
      ++pos_;
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      const char e = peek();
      ++pos_;
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, unicode_escape()); break;
        default:
          --pos_;
          fail(cat("invalid escape: \\ followed by ", found()));
      }
    }
  }

  std::string_view text_;
  std::string_view what_;
  std::size_t pos_ = 0;
};

}  // namespace

const JsonValue* JsonValue::find(std::string_view key) const {
  if (kind != Kind::object) return nullptr;
  for (std::size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &items[i];
  return nullptr;
}

std::optional<long long> JsonValue::integer() const {
  if (kind != Kind::number || text.find_first_of(".eE") != std::string::npos) return std::nullopt;
  long long value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::string_view describe(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::null: return "null";
    case JsonValue::Kind::boolean: return "a boolean";
    case JsonValue::Kind::number: return "a number";
    case JsonValue::Kind::string: return "a string";
    case JsonValue::Kind::array: return "an array";
    case JsonValue::Kind::object: return "an object";
  }
  return "a value";
}

JsonValue parse_json(std::string_view text, std::string_view what) { return Reader(text, what).document(); }

}  // namespace braid
