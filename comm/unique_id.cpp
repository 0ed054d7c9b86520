#include <algorithm>

#include "braid/braid.hpp"
#include "core/text.hpp"
#include "core/wire.hpp"
#include "rendezvous.hpp"

namespace braid {
namespace {

constexpr std::uint64_t kIdMagic = 0x3144494449415242ull;  // "BRAIDID1"
constexpr std::size_t kIdBytes = 128;          // UniqueId::kBytes
constexpr std::size_t kMaxStoreAddress = 100;  // fits kIdBytes with the magic, id and length

}  // namespace

std::vector<std::byte> encode_unique_id(const UniqueIdContents& contents) {
  WireWriter w;
  w.u64(kIdMagic);
  w.bytes(contents.comm_id.bytes);
  w.str(contents.store);
  auto bytes = w.take();
  if (bytes.size() > kIdBytes) throw Error(ErrorCode::internal, cat("unique id does not fit in ", kIdBytes, " bytes"));
  bytes.resize(kIdBytes);
  return bytes;
}

UniqueIdContents decode_unique_id(std::span<const std::byte> id) {
  WireReader r(id, "braid unique id");
  if (r.u64() != kIdMagic)
    throw InvalidArgument("the unique id was not made by braid_get_unique_id / UniqueId::create (bad magic)");
  UniqueIdContents contents;
  auto idb = r.bytes(contents.comm_id.bytes.size());
  std::copy(idb.begin(), idb.end(), contents.comm_id.bytes.begin());
  contents.store = r.str(kMaxStoreAddress);
  return contents;
}

std::string UniqueId::to_hex() const { return braid::to_hex(bytes); }

UniqueId UniqueId::from_hex(std::string_view hex) {
  if (hex.size() != 2 * kBytes)
    throw InvalidArgument(cat("a braid unique id is ", 2 * kBytes, " hex digits, got ", hex.size()));
  auto digit = [&](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw InvalidArgument(cat("a braid unique id holds only hex digits, not '", c, "'"));
  };
  UniqueId id;
  for (std::size_t i = 0; i < kBytes; ++i)
    id.bytes[i] = static_cast<std::byte>(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  return id;
}

}  // namespace braid
