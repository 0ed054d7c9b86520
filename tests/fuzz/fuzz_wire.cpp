// WireReader (src/core/wire.hpp), the bounds-checked reader under the TCP
// handshake, RankInfo and the unique id, checked against a plain reference.
//
// The input is a program and the bytes it reads: byte 0 gives the program's
// length (mod 64), the program's bytes follow, and the rest is the data. Each
// program byte is an operation (low 3 bits) and an argument (the other 5):
// u8, u16, u32, u64, bytes(n), str(max), left(), expect_end(). Every read must
// return what the reference reads at the same place, or throw
// ProtocolMismatch exactly when the reference runs out (and then the program
// stops, as a parser would). Finally the values read, written again with
// WireWriter, must give back the bytes consumed.
#include <cstdint>
#include <limits>

#include "core/wire.hpp"
#include "finding.hpp"

using namespace braid;

namespace {

// bytes(n) and str(max) arguments: small counts, and the edges of size_t.
std::size_t count_for(unsigned arg) {
  switch (arg) {
    case 31: return std::numeric_limits<std::size_t>::max();
    case 30: return std::numeric_limits<std::size_t>::max() / 2 + 1;
    case 29: return std::numeric_limits<std::uint32_t>::max();
    case 28: return 1000;
    default: return arg;
  }
}

class Reference {
 public:
  explicit Reference(std::span<const std::byte> in) : in_(in) {}
  bool has(std::size_t n) const { return n <= in_.size() - pos_; }
  std::uint64_t le(std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= std::uint64_t{static_cast<std::uint8_t>(in_[pos_ + i])} << (8 * i);
    pos_ += n;
    return v;
  }
  std::span<const std::byte> take(std::size_t n) {
    auto out = in_.subspan(pos_, n);
    pos_ += n;
    return out;
  }
  std::size_t left() const { return in_.size() - pos_; }
  std::size_t pos() const { return pos_; }

 private:
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

// Runs `read`; true if it returned, false if it refused (which must be a
// ProtocolMismatch, and only when `fits` is false).
template <typename Read>
bool attempt(bool fits, Read&& read) {
  try {
    read();
  } catch (const ProtocolMismatch&) {
    BRAID_FUZZ_EXPECT(!fits);
    return false;
  }
  BRAID_FUZZ_EXPECT(fits);
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::size_t program_length = std::min<std::size_t>(data[0] % 64, size - 1);
  std::span<const std::uint8_t> program(data + 1, program_length);
  auto in = fuzz::input_bytes(data + 1 + program_length, size - 1 - program_length);

  WireReader reader(in, "fuzz input");
  Reference ref(in);
  WireWriter again;
  for (std::uint8_t step : program) {
    unsigned op = step & 7, arg = step >> 3;
    bool ok = true;
    switch (op) {
      case 0: case 1: case 2: case 3: {
        std::size_t width = std::size_t{1} << op;
        bool fits = ref.has(width);
        std::uint64_t got = 0;
        ok = attempt(fits, [&] {
          got = op == 0 ? reader.u8() : op == 1 ? reader.u16() : op == 2 ? reader.u32() : reader.u64();
        });
        if (!ok) break;
        BRAID_FUZZ_EXPECT(got == ref.le(width));
        if (op == 0) again.u8(static_cast<std::uint8_t>(got));
        if (op == 1) again.u16(static_cast<std::uint16_t>(got));
        if (op == 2) again.u32(static_cast<std::uint32_t>(got));
        if (op == 3) again.u64(got);
        break;
      }
      case 4: {
        std::size_t n = count_for(arg);
        std::span<const std::byte> got;
        ok = attempt(ref.has(n), [&] { got = reader.bytes(n); });
        if (!ok) break;
        BRAID_FUZZ_EXPECT(fuzz::same_bytes(got, ref.take(n)));
        again.bytes(got);
        break;
      }
      case 5: {
        std::size_t max = count_for(arg);
        bool fits = false;
        std::size_t n = 0;
        if (ref.has(4)) {
          Reference peek = ref;
          n = peek.le(4);
          fits = n <= max && peek.has(n);
        }
        std::string got;
        ok = attempt(fits, [&] { got = reader.str(max); });
        if (!ok) break;
        ref.le(4);
        BRAID_FUZZ_EXPECT(fuzz::same_bytes(std::as_bytes(std::span(got)), ref.take(n)));
        again.str(got);
        break;
      }
      case 6: BRAID_FUZZ_EXPECT(reader.left() == ref.left()); break;
      case 7: ok = attempt(ref.left() == 0, [&] { reader.expect_end(); }); break;
    }
    if (!ok) break;
  }
  BRAID_FUZZ_EXPECT(fuzz::same_bytes(again.take(), in.first(ref.pos())));
  return 0;
}
