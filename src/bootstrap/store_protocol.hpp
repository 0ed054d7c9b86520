// The wire format of the TCP store: requests and replies as pure functions on
// byte spans, so the parsers can be unit-tested and fuzzed without sockets.
//
// Every frame (request or reply) is an 8-byte header and a body:
//
//   byte 0     magic 0xB7          a stranger's bytes (HTTP, TLS, noise) fail here
//   byte 1     version 6           another braid version fails here, by name
//   byte 2     op                  1 set, 2 get, 3 add, 4 check, 5 wait, 6 hello, 7 auth (a reply echoes it)
//   byte 3     status              0 in a request; in a reply 0 ok, 1 timeout,
//                                  2 invalid argument, 3 protocol error, 4 authentication failed,
//                                  5 another job, 6 communicator already formed (sealed)
//   bytes 4-7  body length         u32, little-endian, at most kMaxBodyBytes
//
// Integers in bodies are little-endian. A key is a u32 length (at most
// kMaxKeyBytes) and its bytes; a key list is a u32 count (at most kMaxKeys)
// and that many keys; a value is a u32 length (at most kMaxValueBytes) and its
// bytes; a timeout is a u64 of milliseconds (at most kMaxTimeout). Nonces and
// proofs are 32 bytes without a length.
//
//   request  set    key, value               reply ok  set    (empty)
//            get    key, timeout                       get    value
//            add    key, i64 delta                     add    i64 new value
//            check  key list                           check  u8 (1: every key exists)
//            wait   key list, timeout                  wait   (empty)
//            hello  u8 auth (1: has a key),            hello  u8 challenge (0 or 1), then the server nonce if 1
//                   job id (u32 length, at most kMaxJobBytes), u32 claimed rank (0xffffffff: none),
//                   member token (u32 length, at most kMaxMemberBytes; empty: none),
//                   u32 world size (0: none), u32 the client's pid
//            auth   client nonce, client proof         auth   server proof
//   reply timeout (get, wait only)   key list: the keys still missing
//   reply invalid argument / protocol error / authentication failed, another job, sealed (hello, auth only)
//                                    a message (u32 length, at most kMaxMessageBytes)
//
// A connection opens with a handshake: the client sends hello; without a key
// on either side the server answers hello ok (no challenge) and requests
// follow. With a key on both, the server answers with a challenge, the client
// sends auth with its proof, and the server answers with its own proof
// (core/auth.hpp; the transcript's hello is the client's hello frame). A key on
// one side only, or a wrong proof, is answered "authentication failed" and the
// connection closed; any other request before the handshake is done is a
// protocol error.
//
// The hello names the client's job (BRAID_JOB_ID and friends; empty when the
// launcher set none) and the rank it means to join as. A store serves one job:
// a hello with another job id is answered "another job" at once, and a hello
// that reaches a store whose communicator has already formed (sealed by the
// rank hosting it) is answered "sealed", so a second job or a restarted rank
// never mixes into a running one; a member of that communicator that has to
// reconnect (its connection dropped after a reply came late) passes the seal
// with the token the store was sealed with (the communicator's id, which only
// its members know). The claimed rank, the world size and the pid are not
// trusted for anything but keeping apart the ranks of two jobs that share an
// address without job ids: a hello whose world size differs from the one the
// job's first rank gave, or one that claims, after the communicator formed,
// a rank a member of it holds from another process, is answered "another job"
// naming both claims (tcp_store_server.cpp), and naming a refused rank to the
// others.
//
// A connection carries requests one after another; the server answers them in
// order. Decoding checks every length against both its cap and the bytes that
// are there, rejects trailing bytes, and throws ProtocolMismatch describing
// what is wrong; it allocates no more than the input's size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/auth.hpp"
#include "core/deadline.hpp"

namespace braid::store_protocol {

using Bytes = std::vector<std::byte>;

inline constexpr std::uint8_t kMagic = 0xB7;
// Version 3 is skipped on purpose: a frame starting B7 03 reads to a TLS
// client (a process with BRAID_TLS=1 at a store without it) as a record of TLS
// major version 3, so it waited for more instead of saying "not TLS".
inline constexpr std::uint8_t kVersion = 6;
/// Names the protocol inside the authentication transcript.
inline constexpr std::string_view kAuthProtocol = "braid-store/4";
inline constexpr std::size_t kHeaderBytes = 8;
inline constexpr std::size_t kMaxKeyBytes = 4096;
inline constexpr std::size_t kMaxValueBytes = std::size_t{64} << 20;
inline constexpr std::size_t kMaxKeys = 65536;
inline constexpr std::size_t kMaxMessageBytes = 4096;
inline constexpr std::size_t kMaxJobBytes = 128;
inline constexpr std::size_t kMaxMemberBytes = 64;
inline constexpr std::uint32_t kMaxClaimedRank = 1u << 20;
/// Room for the largest set (key and value) plus its length fields.
inline constexpr std::size_t kMaxBodyBytes = kMaxValueBytes + kMaxKeyBytes + 64;
inline constexpr std::size_t kMaxFrameBytes = kHeaderBytes + kMaxBodyBytes;
/// Waits longer than this are sent as this (a year: "never", but bounded).
inline constexpr Millis kMaxTimeout = Millis(365LL * 24 * 3600 * 1000);

enum class Op : std::uint8_t { set = 1, get = 2, add = 3, check = 4, wait = 5, hello = 6, auth = 7 };
enum class Status : std::uint8_t {
  ok = 0,
  timeout = 1,
  invalid_argument = 2,
  protocol_error = 3,
  auth_failed = 4,
  other_job = 5,
  sealed = 6,
};

std::string_view name_of(Op op);
std::string_view name_of(Status status);

struct Request {
  Op op = Op::set;
  std::vector<std::string> keys;  // set, get, add: exactly one
  Bytes value;                    // set
  std::int64_t delta = 0;         // add
  Millis timeout{0};              // get, wait
  bool auth = false;              // hello: the client holds a key
  std::string job;                // hello: the client's job id ("" when none)
  int rank = -1;                  // hello: the rank the client joins as (-1: none, e.g. a unique-id creator)
  Bytes member;                   // hello: what the store sealed with, once the client's communicator formed
  int world_size = 0;             // hello: the number of ranks the client joins with (0: none)
  std::uint32_t pid = 0;          // hello: the client's process id, to name its claim
  Nonce nonce{};                  // auth: the client nonce
  Digest proof{};                 // auth: the client proof
};

struct Reply {
  Op op = Op::set;  // the op of the request this answers
  Status status = Status::ok;
  Bytes value;                       // ok to get
  std::int64_t number = 0;           // ok to add: the new value
  bool all_present = false;          // ok to check
  std::vector<std::string> missing;  // timeout: the keys still missing
  std::string message;               // invalid_argument, protocol_error and the refusals
  bool challenge = false;            // ok to hello: authenticate with `nonce`
  Nonce nonce{};                     // ok to hello with a challenge: the server nonce
  Digest proof{};                    // ok to auth: the server proof
};

template <typename Message>
struct Decoded {
  Message message;
  std::size_t consumed = 0;  // header and body
};

/// One frame. Throws InvalidArgument when a key, value, key list or message
/// exceeds its cap or a one-key op does not carry exactly one key; timeouts
/// are clamped to [0, kMaxTimeout].
Bytes encode(const Request& request);
Bytes encode(const Reply& reply);

/// Decodes the frame at the start of `bytes`. nullopt while the frame is
/// incomplete, but the header bytes present are checked at once, so a stranger
/// is refused on its first byte. Throws ProtocolMismatch on malformed input.
std::optional<Decoded<Request>> decode_request(std::span<const std::byte> bytes);
std::optional<Decoded<Reply>> decode_reply(std::span<const std::byte> bytes);

/// The size of the whole frame (header and body) a header announces, after
/// checking the header as above; nullopt while fewer than kHeaderBytes are
/// present. For readers that size a buffer before the body arrives.
std::optional<std::size_t> frame_size(std::span<const std::byte> bytes, bool is_reply);

}  // namespace braid::store_protocol
