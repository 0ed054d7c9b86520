#include "bootstrap/store_protocol.hpp"

#include <algorithm>
#include <array>
#include <utility>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid::store_protocol {
namespace {

constexpr std::uint8_t kLastOp = static_cast<std::uint8_t>(Op::auth);
constexpr std::uint8_t kLastStatus = static_cast<std::uint8_t>(Status::sealed);
constexpr std::uint32_t kNoRank = 0xffffffffu;
constexpr char kHex[] = "0123456789abcdef";

std::string_view frame_kind(bool is_reply) { return is_reply ? "store reply" : "store request"; }

bool takes_one_key(Op op) { return op == Op::set || op == Op::get || op == Op::add; }
bool is_handshake(Op op) { return op == Op::hello || op == Op::auth; }

// The first bytes a peer sent, as text a log can show: "GET / HTTP/1.1\r\n".
std::string preview(std::span<const std::byte> bytes) {
  std::string out = "'";
  for (std::byte b : bytes.first(std::min<std::size_t>(bytes.size(), 16))) {
    auto c = static_cast<unsigned char>(b);
    if (c == '\r') out += "\\r";
    else if (c == '\n') out += "\\n";
    else if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') out += static_cast<char>(c);
    else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (bytes.size() > 16) out += "...";
  return out + "'";
}

std::string hex_byte(std::uint8_t v) {
  return std::string{'0', 'x', kHex[v >> 4], kHex[v & 15]};
}

std::uint32_t load_u32(const std::byte* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

std::uint64_t load_u64(const std::byte* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

struct Header {
  Op op;
  Status status;
  std::size_t body_bytes;
};

// Checks whatever part of the header is present, so garbage is refused early.
std::optional<Header> check_header(std::span<const std::byte> bytes, bool is_reply) {
  auto kind = frame_kind(is_reply);
  auto at = [&](std::size_t i) { return static_cast<std::uint8_t>(bytes[i]); };
  if (!bytes.empty() && at(0) != kMagic)
    throw ProtocolMismatch(cat("not a braid ", kind, ": the first byte ", hex_byte(at(0)), " is not the magic ",
                               hex_byte(kMagic), "; the peer speaks another protocol (it sent ", preview(bytes), ")"));
  if (bytes.size() > 1 && at(1) != kVersion)
    throw ProtocolMismatch(cat(kind, " of protocol version ", int{at(1)}, ", but this braid speaks version ",
                               int{kVersion}, " (are two braid versions mixed in one job?)"));
  if (bytes.size() > 2 && (at(2) == 0 || at(2) > kLastOp))
    throw ProtocolMismatch(cat(kind, " with unknown op ", int{at(2)}));
  if (bytes.size() > 3) {
    if (!is_reply && at(3) != 0)
      throw ProtocolMismatch(cat(kind, " with status byte ", int{at(3)}, " (a request carries 0)"));
    if (is_reply && at(3) > kLastStatus) throw ProtocolMismatch(cat(kind, " with unknown status ", int{at(3)}));
  }
  if (bytes.size() < kHeaderBytes) return std::nullopt;
  Header h{static_cast<Op>(at(2)), static_cast<Status>(at(3)), load_u32(bytes.data() + 4)};
  if (h.body_bytes > kMaxBodyBytes)
    throw ProtocolMismatch(cat(kind, " (", name_of(h.op), ") announces a body of ", h.body_bytes,
                               " bytes, above the limit of ", kMaxBodyBytes));
  return h;
}

// Reads a body front to back; every read checks the bytes that remain.
class Reader {
 public:
  Reader(std::span<const std::byte> body, std::string context) : body_(body), context_(std::move(context)) {}

  std::span<const std::byte> take(std::size_t n, std::string_view field) {
    if (n > body_.size() - pos_)
      fail(cat("truncated ", field, " (needs ", n, " bytes, ", body_.size() - pos_, " remain)"));
    auto out = body_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::uint8_t u8(std::string_view field) { return static_cast<std::uint8_t>(take(1, field)[0]); }
  std::uint32_t u32(std::string_view field) { return load_u32(take(4, field).data()); }
  std::uint64_t u64(std::string_view field) { return load_u64(take(8, field).data()); }
  std::int64_t i64(std::string_view field) { return static_cast<std::int64_t>(u64(field)); }
  bool flag(std::string_view field) {
    std::uint8_t v = u8(field);
    if (v > 1) fail(cat(field, " ", int{v}, " is neither 0 nor 1"));
    return v == 1;
  }
  template <std::size_t N>
  std::array<std::byte, N> fixed(std::string_view field) {
    auto b = take(N, field);
    std::array<std::byte, N> out;
    std::copy(b.begin(), b.end(), out.begin());
    return out;
  }

  std::string text(std::size_t cap, std::string_view field) {
    std::uint32_t n = u32(field);
    if (n > cap) fail(cat(field, " of ", n, " bytes exceeds the limit of ", cap));
    auto b = take(n, field);
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  std::string key() { return text(kMaxKeyBytes, "key"); }

  std::vector<std::string> keys() {
    std::uint32_t count = u32("key count");
    if (count > kMaxKeys) fail(cat("a list of ", count, " keys exceeds the limit of ", kMaxKeys));
    if (count > (body_.size() - pos_) / 4)
      fail(cat("truncated key list (", count, " keys cannot fit in the ", body_.size() - pos_, " bytes that remain)"));
    std::vector<std::string> out;
    out.reserve(count);
    for (std::uint32_t i = 0; i < count; ++i) out.push_back(key());
    return out;
  }

  Bytes value() {
    std::uint32_t n = u32("value length");
    if (n > kMaxValueBytes) fail(cat("a value of ", n, " bytes exceeds the limit of ", kMaxValueBytes));
    auto b = take(n, "value");
    return Bytes(b.begin(), b.end());
  }

  Millis timeout() {
    std::uint64_t ms = u64("timeout");
    if (ms > static_cast<std::uint64_t>(kMaxTimeout.count()))
      fail(cat("a timeout of ", ms, " ms exceeds the limit of ", kMaxTimeout.count(), " ms"));
    return Millis(static_cast<Millis::rep>(ms));
  }

  void finish() {
    if (pos_ != body_.size()) fail(cat(body_.size() - pos_, " unexpected bytes after the end of the body"));
  }

  [[noreturn]] void fail(const std::string& why) const {
    throw ProtocolMismatch(cat("malformed ", context_, ": ", why));
  }

 private:
  std::span<const std::byte> body_;
  std::size_t pos_ = 0;
  std::string context_;
};

// Builds one frame; the header's length is filled in by finish().
class Writer {
 public:
  Writer(Op op, Status status) {
    out_.reserve(64);
    for (std::uint8_t b : {kMagic, kVersion, static_cast<std::uint8_t>(op), static_cast<std::uint8_t>(status)})
      out_.push_back(std::byte{b});
    u32(0);
  }

  void u8(std::uint8_t v) { out_.push_back(std::byte{v}); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(std::byte(static_cast<std::uint8_t>(v >> (8 * i))));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(std::byte(static_cast<std::uint8_t>(v >> (8 * i))));
  }
  void raw(std::span<const std::byte> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void bytes(std::span<const std::byte> b) {
    check_room(b.size());
    u32(static_cast<std::uint32_t>(b.size()));
    out_.insert(out_.end(), b.begin(), b.end());
  }
  void key(std::string_view k) {
    if (k.size() > kMaxKeyBytes)
      throw InvalidArgument(cat("a key of ", k.size(), " bytes exceeds the limit of ", kMaxKeyBytes, " bytes"));
    bytes(std::as_bytes(std::span(k.data(), k.size())));
  }
  void keys(const std::vector<std::string>& ks) {
    if (ks.size() > kMaxKeys)
      throw InvalidArgument(cat("a list of ", ks.size(), " keys exceeds the limit of ", kMaxKeys, " keys"));
    u32(static_cast<std::uint32_t>(ks.size()));
    for (const auto& k : ks) key(k);
  }
  void timeout(Millis t) { u64(static_cast<std::uint64_t>(std::clamp(t, Millis(0), kMaxTimeout).count())); }

  Bytes finish() {
    auto body = static_cast<std::uint32_t>(out_.size() - kHeaderBytes);
    for (std::size_t i = 0; i < 4; ++i) out_[4 + i] = std::byte(static_cast<std::uint8_t>(body >> (8 * i)));
    return std::move(out_);
  }

 private:
  void check_room(std::size_t more) {
    if (out_.size() - kHeaderBytes + 4 + more > kMaxBodyBytes)
      throw InvalidArgument(cat("the store message would exceed the frame limit of ", kMaxBodyBytes, " bytes"));
  }
  Bytes out_;
};

}  // namespace

std::string_view name_of(Op op) {
  switch (op) {
    case Op::set: return "set";
    case Op::get: return "get";
    case Op::add: return "add";
    case Op::check: return "check";
    case Op::wait: return "wait";
    case Op::hello: return "hello";
    case Op::auth: return "auth";
  }
  return "unknown op";
}

std::string_view name_of(Status status) {
  switch (status) {
    case Status::ok: return "ok";
    case Status::timeout: return "timeout";
    case Status::invalid_argument: return "invalid argument";
    case Status::protocol_error: return "protocol error";
    case Status::auth_failed: return "authentication failed";
    case Status::other_job: return "another job";
    case Status::sealed: return "communicator already formed";
  }
  return "unknown status";
}

Bytes encode(const Request& r) {
  if (takes_one_key(r.op) && r.keys.size() != 1)
    throw InvalidArgument(cat("a store ", name_of(r.op), " takes exactly one key, not ", r.keys.size()));
  if (r.op == Op::set && r.value.size() > kMaxValueBytes)
    throw InvalidArgument(cat("a value of ", r.value.size(), " bytes exceeds the limit of ", kMaxValueBytes, " bytes"));
  Writer w(r.op, Status::ok);
  switch (r.op) {
    case Op::set: w.key(r.keys[0]); w.bytes(r.value); break;
    case Op::get: w.key(r.keys[0]); w.timeout(r.timeout); break;
    case Op::add: w.key(r.keys[0]); w.u64(static_cast<std::uint64_t>(r.delta)); break;
    case Op::check: w.keys(r.keys); break;
    case Op::wait: w.keys(r.keys); w.timeout(r.timeout); break;
    case Op::hello:
      if (r.job.size() > kMaxJobBytes)
        throw InvalidArgument(cat("a job id of ", r.job.size(), " bytes exceeds the limit of ", kMaxJobBytes));
      w.u8(r.auth ? 1 : 0);
      w.bytes(std::as_bytes(std::span(r.job.data(), r.job.size())));
      w.u32(r.rank < 0 ? kNoRank : static_cast<std::uint32_t>(r.rank));
      if (r.member.size() > kMaxMemberBytes)
        throw InvalidArgument(cat("a member token of ", r.member.size(), " bytes exceeds the limit of ",
                                  kMaxMemberBytes));
      w.bytes(r.member);
      w.u32(static_cast<std::uint32_t>(std::max(r.world_size, 0)));
      w.u32(r.pid);
      break;
    case Op::auth: w.raw(r.nonce); w.raw(r.proof); break;
  }
  return w.finish();
}

Bytes encode(const Reply& r) {
  Writer w(r.op, r.status);
  switch (r.status) {
    case Status::ok:
      if (r.op == Op::get) {
        if (r.value.size() > kMaxValueBytes)
          throw InvalidArgument(
              cat("a value of ", r.value.size(), " bytes exceeds the limit of ", kMaxValueBytes, " bytes"));
        w.bytes(r.value);
      }
      if (r.op == Op::add) w.u64(static_cast<std::uint64_t>(r.number));
      if (r.op == Op::check) w.u8(r.all_present ? 1 : 0);
      if (r.op == Op::hello) {
        w.u8(r.challenge ? 1 : 0);
        if (r.challenge) w.raw(r.nonce);
      }
      if (r.op == Op::auth) w.raw(r.proof);
      break;
    case Status::timeout:
      if (r.op != Op::get && r.op != Op::wait)
        throw InvalidArgument(cat("a store ", name_of(r.op), " cannot time out"));
      w.keys(r.missing);
      break;
    case Status::auth_failed:
    case Status::other_job:
    case Status::sealed:
      if (!is_handshake(r.op))
        throw InvalidArgument(cat("a store ", name_of(r.op), " cannot be refused as ", name_of(r.status)));
      [[fallthrough]];
    case Status::invalid_argument:
    case Status::protocol_error: {
      std::string_view m = r.message;
      m = m.substr(0, kMaxMessageBytes);
      w.bytes(std::as_bytes(std::span(m.data(), m.size())));
      break;
    }
  }
  return w.finish();
}

std::optional<std::size_t> frame_size(std::span<const std::byte> bytes, bool is_reply) {
  auto h = check_header(bytes, is_reply);
  if (!h) return std::nullopt;
  return kHeaderBytes + h->body_bytes;
}

std::optional<Decoded<Request>> decode_request(std::span<const std::byte> bytes) {
  auto h = check_header(bytes, false);
  if (!h || bytes.size() - kHeaderBytes < h->body_bytes) return std::nullopt;
  Reader in(bytes.subspan(kHeaderBytes, h->body_bytes), cat("store ", name_of(h->op), " request"));
  Request r;
  r.op = h->op;
  switch (r.op) {
    case Op::set: r.keys.push_back(in.key()); r.value = in.value(); break;
    case Op::get: r.keys.push_back(in.key()); r.timeout = in.timeout(); break;
    case Op::add: r.keys.push_back(in.key()); r.delta = in.i64("delta"); break;
    case Op::check: r.keys = in.keys(); break;
    case Op::wait: r.keys = in.keys(); r.timeout = in.timeout(); break;
    case Op::hello: {
      r.auth = in.flag("auth flag");
      r.job = in.text(kMaxJobBytes, "job id");
      std::uint32_t rank = in.u32("claimed rank");
      if (rank != kNoRank && rank > kMaxClaimedRank) in.fail(cat("claimed rank ", rank, " is out of range"));
      r.rank = rank == kNoRank ? -1 : static_cast<int>(rank);
      std::string member = in.text(kMaxMemberBytes, "member token");
      r.member.assign(reinterpret_cast<const std::byte*>(member.data()),
                      reinterpret_cast<const std::byte*>(member.data()) + member.size());
      std::uint32_t size = in.u32("world size");
      if (size > kMaxClaimedRank + 1) in.fail(cat("world size ", size, " is out of range"));
      r.world_size = static_cast<int>(size);
      r.pid = in.u32("pid");
      break;
    }
    case Op::auth:
      r.nonce = in.fixed<kNonceBytes>("client nonce");
      r.proof = in.fixed<kDigestBytes>("client proof");
      break;
  }
  in.finish();
  return Decoded<Request>{std::move(r), kHeaderBytes + h->body_bytes};
}

std::optional<Decoded<Reply>> decode_reply(std::span<const std::byte> bytes) {
  auto h = check_header(bytes, true);
  if (!h || bytes.size() - kHeaderBytes < h->body_bytes) return std::nullopt;
  Reader in(bytes.subspan(kHeaderBytes, h->body_bytes),
            cat("store ", name_of(h->op), " reply (", name_of(h->status), ")"));
  Reply r;
  r.op = h->op;
  r.status = h->status;
  switch (r.status) {
    case Status::ok:
      if (r.op == Op::get) r.value = in.value();
      if (r.op == Op::add) r.number = in.i64("new value");
      if (r.op == Op::check) {
        std::uint8_t flag = in.u8("presence flag");
        if (flag > 1) in.fail(cat("presence flag ", int{flag}, " is neither 0 nor 1"));
        r.all_present = flag == 1;
      }
      if (r.op == Op::hello) {
        r.challenge = in.flag("challenge flag");
        if (r.challenge) r.nonce = in.fixed<kNonceBytes>("server nonce");
      }
      if (r.op == Op::auth) r.proof = in.fixed<kDigestBytes>("server proof");
      break;
    case Status::timeout:
      if (r.op != Op::get && r.op != Op::wait) in.fail("only get and wait can time out");
      r.missing = in.keys();
      if (r.missing.empty()) in.fail("a timeout must name the missing keys");
      if (r.op == Op::get && r.missing.size() != 1) in.fail("a get timeout names exactly one key");
      break;
    case Status::auth_failed:
    case Status::other_job:
    case Status::sealed:
      if (!is_handshake(r.op)) in.fail("only hello and auth can be refused");
      [[fallthrough]];
    case Status::invalid_argument:
    case Status::protocol_error:
      r.message = in.text(kMaxMessageBytes, "message");
      break;
  }
  in.finish();
  return Decoded<Reply>{std::move(r), kHeaderBytes + h->body_bytes};
}

}  // namespace braid::store_protocol
