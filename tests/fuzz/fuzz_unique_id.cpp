// The unique id (src/rendezvous.hpp decode_unique_id, and UniqueId::from_hex):
// every rank of a job started with a UniqueId decodes bytes that came from
// whoever handed them out, then parses the store address inside them before
// it connects. Each input is tried both as id bytes and as the hex text a
// launcher passes around.
//
// Checked: only braid errors come out; an accepted id encodes back to the
// bytes it was read from (the padding after the address aside); accepted hex
// prints back as the same digits, lower-case.
#include <cctype>
#include <cstdint>
#include <string>

#include "braid/braid.hpp"
#include "core/socket.hpp"
#include "finding.hpp"
#include "comm/rendezvous.hpp"

using namespace braid;

namespace {

void id_bytes(std::span<const std::byte> in) {
  UniqueIdContents id;
  try {
    id = decode_unique_id(in);
  } catch (const Error& e) {
    fuzz::expect_refusal(e);
    return;
  }
  std::size_t used = 8 + id.comm_id.bytes.size() + 4 + id.store.size();
  BRAID_FUZZ_EXPECT(used <= in.size() && used <= UniqueId::kBytes);
  auto again = encode_unique_id(id);
  BRAID_FUZZ_EXPECT(again.size() == UniqueId::kBytes);
  BRAID_FUZZ_EXPECT(fuzz::same_bytes(std::span(again).first(used), in.first(used)));
  // What rendezvous_by_id does with the address before it resolves it.
  try {
    HostPort hp = parse_host_port(id.store, "braid store address");
    BRAID_FUZZ_EXPECT(!hp.host.empty() && hp.host.size() < id.store.size());
  } catch (const Error& e) {
    fuzz::expect_refusal(e);
  }
}

void id_hex(std::span<const std::byte> in) {
  std::string_view text(reinterpret_cast<const char*>(in.data()), in.size());
  UniqueId id;
  try {
    id = UniqueId::from_hex(text);
  } catch (const Error& e) {
    fuzz::expect_refusal(e);
    return;
  }
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  BRAID_FUZZ_EXPECT(id.to_hex() == lower);
  id_bytes(id.bytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto in = fuzz::input_bytes(data, size);
  id_bytes(in);
  id_hex(in);
  return 0;
}
