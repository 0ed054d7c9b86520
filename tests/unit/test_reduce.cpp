// Reduction kernels against references written independently of them: f16
// and bf16 are decoded and rounded with ldexp/nearbyint in double rather than
// with bit tricks, integer wrap-around goes through uint64_t, and the float
// min/max rules are spelled out on doubles. Every kernel build the CPU has
// (baseline, AVX2+F16C) runs the same cases.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "braid/types.hpp"
#include "core/reduce.hpp"
#include "core/reduce_dispatch.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TEST_X86 1
#endif

using namespace braid;

namespace {

using Rng = std::mt19937_64;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr ReduceOp kOps[] = {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};

std::vector<KernelIsa> supported_isas() {
  std::vector<KernelIsa> isas;
  for (KernelIsa isa : {KernelIsa::baseline, KernelIsa::avx2})
    if (kernel_isa_supported(isa)) isas.push_back(isa);
  return isas;
}

const char* isa_name(KernelIsa isa) { return isa == KernelIsa::avx2 ? "avx2" : "baseline"; }

// A binary floating-point format with `mant_bits` stored mantissa bits and
// `exp_bits` exponent bits, decoded and rounded by arithmetic on doubles.
struct MiniFloat {
  int mant_bits;
  int exp_bits;

  int bias() const { return (1 << (exp_bits - 1)) - 1; }
  std::uint16_t inf_bits() const { return static_cast<std::uint16_t>(((1 << exp_bits) - 1) << mant_bits); }
  std::uint16_t sign_bit() const { return static_cast<std::uint16_t>(1 << (mant_bits + exp_bits)); }
  bool is_nan(std::uint16_t bits) const {
    return (bits & inf_bits()) == inf_bits() && (bits & ((1 << mant_bits) - 1)) != 0;
  }
  double max_finite() const { return std::ldexp((1 << (mant_bits + 1)) - 1, bias() - mant_bits); }

  double decode(std::uint16_t bits) const {
    const int exponent = (bits >> mant_bits) & ((1 << exp_bits) - 1);
    const int mantissa = bits & ((1 << mant_bits) - 1);
    double magnitude;
    if (exponent == (1 << exp_bits) - 1) magnitude = mantissa != 0 ? kNaN : kInf;
    else if (exponent == 0) magnitude = std::ldexp(mantissa, 1 - bias() - mant_bits);
    else magnitude = std::ldexp(mantissa + (1 << mant_bits), exponent - bias() - mant_bits);
    return (bits & sign_bit()) != 0 ? -magnitude : magnitude;
  }

  // Round to nearest, ties to even: scale so one unit is one ulp at v's
  // exponent (exact: a power of two), round with nearbyint, scale back.
  std::uint16_t encode(double v) const {
    const std::uint16_t sign = std::signbit(v) ? sign_bit() : 0;
    if (std::isnan(v)) return static_cast<std::uint16_t>(sign | inf_bits() | (1 << (mant_bits - 1)));
    const double magnitude = std::fabs(v);
    const int emin = 1 - bias();
    const int e = magnitude == 0 ? emin : std::max(std::ilogb(magnitude), emin);
    const double units = std::nearbyint(std::ldexp(magnitude, mant_bits - e));
    const double rounded = std::ldexp(units, e - mant_bits);
    if (rounded > max_finite()) return static_cast<std::uint16_t>(sign | inf_bits());
    if (rounded < std::ldexp(1.0, emin)) return static_cast<std::uint16_t>(sign | static_cast<int>(units));
    const int re = std::ilogb(rounded);
    const int mantissa = static_cast<int>(std::ldexp(rounded, mant_bits - re)) - (1 << mant_bits);
    return static_cast<std::uint16_t>(sign | ((re + bias()) << mant_bits) | mantissa);
  }
};
constexpr MiniFloat kHalf{10, 5};
constexpr MiniFloat kBrain{7, 8};

// IEEE 754-2019 minimum/maximum, the rule the kernels document.
double ref_min(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
double ref_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
double ref_apply(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return a + b;
    case ReduceOp::prod: return a * b;
    case ReduceOp::min: return ref_min(a, b);
    case ReduceOp::max: return ref_max(a, b);
  }
  return kNaN;
}

template <typename T>
bool same_float(T got, T want) {
  using Bits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  if (std::isnan(want)) return std::isnan(got);
  return std::bit_cast<Bits>(got) == std::bit_cast<Bits>(want);  // tells -0 from +0
}

// One element type's test case: storage, random values, reference results.
template <const MiniFloat& format, DataType data_type>
struct HalfCase {
  using Storage = std::uint16_t;
  static constexpr DataType type = data_type;

  static Storage random(Rng& rng) {
    const std::uint16_t inf = format.inf_bits();
    const std::uint16_t kSpecial[] = {
        0x0000, 0x8000,                                                     // zeros
        inf, static_cast<std::uint16_t>(inf | 0x8000),                      // infinities
        static_cast<std::uint16_t>(inf | 1), static_cast<std::uint16_t>(inf | 0x8000 | 1 << (format.mant_bits - 1)),  // NaNs
        0x0001, 0x8001, static_cast<std::uint16_t>((1 << format.mant_bits) - 1),  // subnormals
        static_cast<std::uint16_t>(1 << format.mant_bits),                  // smallest normal
        static_cast<std::uint16_t>(inf - 1), static_cast<std::uint16_t>((inf - 1) | 0x8000)};  // largest finite
    switch (rng() % 8) {
      case 0: return static_cast<Storage>(rng());
      case 1: return kSpecial[rng() % std::size(kSpecial)];
      default: return format.encode(std::uniform_real_distribution<double>(-8, 8)(rng));
    }
  }
  static Storage reference(ReduceOp op, Storage a, Storage b) {
    return format.encode(ref_apply(op, format.decode(a), format.decode(b)));
  }
  static Storage reference_average(Storage sum, int ranks) { return format.encode(format.decode(sum) / ranks); }
  static bool same(Storage got, Storage want) { return format.is_nan(want) ? format.is_nan(got) : got == want; }
};
using F16Case = HalfCase<kHalf, DataType::f16>;
using BF16Case = HalfCase<kBrain, DataType::bf16>;

template <typename T>
struct FloatCase {
  using Storage = T;
  static constexpr DataType type = std::is_same_v<T, float> ? DataType::f32 : DataType::f64;

  static T random(Rng& rng) {
    static const T kSpecial[] = {T{0},
                                 -T{0},
                                 std::numeric_limits<T>::infinity(),
                                 -std::numeric_limits<T>::infinity(),
                                 std::numeric_limits<T>::quiet_NaN(),
                                 std::numeric_limits<T>::denorm_min(),
                                 -std::numeric_limits<T>::denorm_min(),
                                 std::numeric_limits<T>::max(),
                                 std::numeric_limits<T>::lowest(),
                                 std::numeric_limits<T>::min()};
    switch (rng() % 8) {
      case 0:
        if constexpr (sizeof(T) == 4) return std::bit_cast<T>(static_cast<std::uint32_t>(rng()));
        else return std::bit_cast<T>(static_cast<std::uint64_t>(rng()));
      case 1: return kSpecial[rng() % std::size(kSpecial)];
      default: return static_cast<T>(std::uniform_real_distribution<double>(-8, 8)(rng));
    }
  }
  // For f32, double holds sums and products of two f32 values with 53 >=
  // 2*24+2 bits, so rounding the double result to f32 is correctly rounded.
  static T reference(ReduceOp op, T a, T b) { return static_cast<T>(ref_apply(op, a, b)); }
  static T reference_average(T sum, int ranks) { return static_cast<T>(static_cast<double>(sum) / ranks); }
  static bool same(T got, T want) { return same_float(got, want); }
};

template <typename T>
struct IntCase {
  using Storage = T;
  static constexpr DataType type = data_type_of<T>;

  static T random(Rng& rng) {
    static const T kSpecial[] = {0, 1, static_cast<T>(-1), std::numeric_limits<T>::min(),
                                 std::numeric_limits<T>::max()};
    if (rng() % 8 == 0) return kSpecial[rng() % std::size(kSpecial)];
    return static_cast<T>(rng());
  }
  static T reference(ReduceOp op, T a, T b) {
    const auto wa = static_cast<std::uint64_t>(a);  // sign-extends: congruent mod 2^bits
    const auto wb = static_cast<std::uint64_t>(b);
    switch (op) {
      case ReduceOp::sum:
      case ReduceOp::avg: return static_cast<T>(wa + wb);
      case ReduceOp::prod: return static_cast<T>(wa * wb);
      case ReduceOp::min: return std::min(a, b);
      case ReduceOp::max: return std::max(a, b);
    }
    return 0;
  }
  static T reference_average(T sum, int ranks) {
    if constexpr (std::is_signed_v<T>) return static_cast<T>(static_cast<std::int64_t>(sum) / ranks);
    else return static_cast<T>(static_cast<std::uint64_t>(sum) / static_cast<std::uint64_t>(ranks));
  }
  static bool same(T got, T want) { return got == want; }
};

enum class Aliasing { apart, dst_is_a, dst_is_b, all_same, inputs_same };
constexpr Aliasing kAliasings[] = {Aliasing::apart, Aliasing::dst_is_a, Aliasing::dst_is_b, Aliasing::all_same,
                                   Aliasing::inputs_same};
const char* aliasing_name(Aliasing aliasing) {
  switch (aliasing) {
    case Aliasing::apart: return "apart";
    case Aliasing::dst_is_a: return "dst==a";
    case Aliasing::dst_is_b: return "dst==b";
    case Aliasing::all_same: return "dst==a==b";
    case Aliasing::inputs_same: return "a==b";
  }
  return "?";
}

template <typename T>
bool same_bits(const T& x, const T& y) {
  return std::memcmp(&x, &y, sizeof(T)) == 0;
}

// Runs one reduction (and for avg its finish_average) on buffers that start
// one element past a vector's start, so the loops see unaligned pointers,
// with a guard band after them. Returns "" or what went wrong first.
template <typename Case>
std::string check_one(KernelIsa isa, ReduceOp op, std::size_t n, Aliasing aliasing, int ranks, Rng& rng) {
  using S = typename Case::Storage;
  constexpr std::size_t kGuard = 9;
  std::vector<S> buffers[3];  // a, b, dst
  for (auto& buffer : buffers) {
    buffer.resize(n + 1 + kGuard);
    for (auto& x : buffer) x = Case::random(rng);
  }
  const std::vector<S> before[3] = {buffers[0], buffers[1], buffers[2]};
  int a = 0, b = 1, d = 2;
  switch (aliasing) {
    case Aliasing::apart: break;
    case Aliasing::dst_is_a: d = a; break;
    case Aliasing::dst_is_b: d = b; break;
    case Aliasing::all_same: b = d = a; break;
    case Aliasing::inputs_same: b = a; break;
  }
  std::vector<S> want(n);
  for (std::size_t i = 0; i < n; ++i) {
    want[i] = Case::reference(op, before[a][1 + i], before[b][1 + i]);
    if (op == ReduceOp::avg) want[i] = Case::reference_average(want[i], ranks);
  }

  S* pd = buffers[d].data() + 1;
  const S* pa = buffers[a].data() + 1;
  const S* pb = buffers[b].data() + 1;
  if (isa == best_kernel_isa()) {  // the public entry points
    reduce(Case::type, op, pd, pa, pb, n);
    if (op == ReduceOp::avg) finish_average(Case::type, pd, n, ranks);
  } else {
    reduce_with(isa, Case::type, op, pd, pa, pb, n);
    if (op == ReduceOp::avg) finish_average_with(isa, Case::type, pd, n, ranks);
  }

  for (int k = 0; k < 3; ++k) {
    for (std::size_t i = 0; i < buffers[k].size(); ++i) {
      const bool result = k == d && i >= 1 && i < 1 + n;
      const bool ok = result ? Case::same(buffers[k][i], want[i - 1]) : same_bits(buffers[k][i], before[k][i]);
      if (!ok) {
        std::ostringstream out;
        out << (result ? "wrong result" : "touched memory outside dst") << " in buffer " << k << " at index "
            << i;
        if (result) {
          out << ": inputs " << +before[a][i] << ", " << +before[b][i] << "; got " << +buffers[k][i] << ", want "
              << +want[i - 1];
        }
        return out.str();
      }
    }
  }
  return "";
}

}  // namespace

TEMPLATE_TEST_CASE("reduce matches the reference for every operator, length and aliasing", "[reduce]", F16Case,
                   BF16Case, FloatCase<float>, FloatCase<double>, IntCase<std::int8_t>, IntCase<std::uint8_t>,
                   IntCase<std::int32_t>, IntCase<std::uint32_t>, IntCase<std::int64_t>, IntCase<std::uint64_t>) {
  Rng rng(20261121 + static_cast<int>(TestType::type));
  // Lengths below, at and between vector widths (up to 32 elements per
  // unrolled AVX2 iteration), odd so that every vector loop runs its scalar
  // tail and bf16 and f16 with F16C their zero-padded last word or block.
  constexpr std::size_t kLengths[] = {0, 1, 7, 33, 64, 1001, 5003};
  for (KernelIsa isa : supported_isas()) {
    for (ReduceOp op : kOps) {
      for (std::size_t n : kLengths) {
        for (Aliasing aliasing : kAliasings) {
          INFO("type " << name_of(TestType::type) << ", op " << name_of(op) << ", build " << isa_name(isa)
                       << ", count " << n << ", " << aliasing_name(aliasing));
          CHECK(check_one<TestType>(isa, op, n, aliasing, 3, rng) == "");
        }
      }
    }
  }
}

TEST_CASE("integer sum and prod wrap modulo 2^bits", "[reduce]") {
  auto combine = [](ReduceOp op, auto x, auto y) {
    using T = decltype(x);
    T out{};
    reduce(data_type_of<T>, op, &out, &x, &y, 1);
    return out;
  };
  using i8 = std::int8_t;
  using i32 = std::int32_t;
  using i64 = std::int64_t;
  constexpr i32 kI32Min = std::numeric_limits<i32>::min();
  constexpr i64 kI64Min = std::numeric_limits<i64>::min();
  CHECK(combine(ReduceOp::sum, i8{127}, i8{1}) == i8{-128});
  CHECK(combine(ReduceOp::sum, i8{-128}, i8{-1}) == i8{127});
  CHECK(combine(ReduceOp::prod, i8{16}, i8{16}) == i8{0});
  CHECK(combine(ReduceOp::prod, i8{-128}, i8{-1}) == i8{-128});
  CHECK(combine(ReduceOp::prod, i8{100}, i8{3}) == i8{44});  // 300 - 256
  CHECK(combine(ReduceOp::sum, std::uint8_t{255}, std::uint8_t{1}) == std::uint8_t{0});
  CHECK(combine(ReduceOp::sum, i32{2147483647}, i32{1}) == kI32Min);
  CHECK(combine(ReduceOp::sum, kI32Min, i32{-1}) == i32{2147483647});
  CHECK(combine(ReduceOp::prod, i32{65536}, i32{65536}) == i32{0});
  CHECK(combine(ReduceOp::prod, kI32Min, i32{-1}) == kI32Min);
  CHECK(combine(ReduceOp::prod, i32{100000}, i32{100000}) == i32{1410065408});  // 10^10 mod 2^32
  CHECK(combine(ReduceOp::sum, std::numeric_limits<i64>::max(), i64{1}) == kI64Min);
  CHECK(combine(ReduceOp::prod, i64{1} << 32, i64{1} << 32) == i64{0});
  CHECK(combine(ReduceOp::prod, kI64Min, i64{-1}) == kI64Min);
  CHECK(combine(ReduceOp::prod, i64{3037000500}, i64{3037000500}) == i64{-9223372036709301616});
  CHECK(combine(ReduceOp::sum, std::uint64_t{0} - 1, std::uint64_t{2}) == std::uint64_t{1});
}

TEST_CASE("float min and max propagate NaN and order -0 below +0 in either operand order", "[reduce]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto combine = [](ReduceOp op, float x, float y) {
    float out = 0;
    reduce(DataType::f32, op, &out, &x, &y, 1);
    return out;
  };
  for (ReduceOp op : {ReduceOp::min, ReduceOp::max}) {
    CHECK(std::isnan(combine(op, nan, 1.0f)));
    CHECK(std::isnan(combine(op, 1.0f, nan)));
    CHECK(std::isnan(combine(op, nan, -INFINITY)));
    CHECK(std::isnan(combine(op, INFINITY, nan)));
  }
  CHECK(std::signbit(combine(ReduceOp::min, 0.0f, -0.0f)));
  CHECK(std::signbit(combine(ReduceOp::min, -0.0f, 0.0f)));
  CHECK_FALSE(std::signbit(combine(ReduceOp::max, 0.0f, -0.0f)));
  CHECK_FALSE(std::signbit(combine(ReduceOp::max, -0.0f, 0.0f)));
  CHECK(combine(ReduceOp::min, -INFINITY, 3.0f) == -INFINITY);
  CHECK(combine(ReduceOp::max, -INFINITY, 3.0f) == 3.0f);

  // The same rules hold for f16 (computed in f32 and narrowed).
  const std::uint16_t pos_zero = 0x0000, neg_zero = 0x8000, one = 0x3c00, f16_nan = 0x7e00;
  std::uint16_t out = 0;
  reduce(DataType::f16, ReduceOp::min, &out, &pos_zero, &neg_zero, 1);
  CHECK(out == neg_zero);
  reduce(DataType::f16, ReduceOp::max, &out, &neg_zero, &pos_zero, 1);
  CHECK(out == pos_zero);
  reduce(DataType::f16, ReduceOp::max, &out, &one, &f16_nan, 1);
  CHECK(kHalf.is_nan(out));
}

TEST_CASE("finish_average truncates integers toward zero and divides floats", "[reduce]") {
  std::vector<std::int32_t> i32s = {-7, 7, -1, 5, std::numeric_limits<std::int32_t>::min(), 2147483647};
  finish_average(DataType::i32, i32s.data(), i32s.size(), 2);
  CHECK(i32s == std::vector<std::int32_t>{-3, 3, 0, 2, -1073741824, 1073741823});

  std::vector<std::int8_t> i8s = {-128, 127, -5};
  finish_average(DataType::i8, i8s.data(), i8s.size(), 3);
  CHECK(i8s == std::vector<std::int8_t>{-42, 42, -1});

  std::vector<std::uint64_t> u64s = {std::numeric_limits<std::uint64_t>::max(), 10};
  finish_average(DataType::u64, u64s.data(), u64s.size(), 3);
  CHECK(u64s == std::vector<std::uint64_t>{6148914691236517205u, 3});

  std::vector<std::int64_t> i64s = {std::numeric_limits<std::int64_t>::min(), -9};
  finish_average(DataType::i64, i64s.data(), i64s.size(), 4);
  CHECK(i64s == std::vector<std::int64_t>{-2305843009213693952, -2});

  // The average of equal values is that value: sum / ranks is exact when the
  // sum is, where multiplying by a rounded 1/ranks is not always (49 * 49 *
  // (1/49.0) is 48.999...).
  for (int ranks = 1; ranks <= 64; ++ranks) {
    std::vector<float> values, sums;
    std::vector<std::int32_t> quotients, multiples;
    for (int k = 1; k < 2000; k += 7) {
      values.push_back(static_cast<float>(k) * 0x1p-7f);
      sums.push_back(values.back() * static_cast<float>(ranks));  // exact: at most 17 bits
      quotients.push_back(k - 1000);
      multiples.push_back((k - 1000) * ranks);
    }
    finish_average(DataType::f32, sums.data(), sums.size(), ranks);
    finish_average(DataType::i32, multiples.data(), multiples.size(), ranks);
    INFO("ranks " << ranks);
    CHECK(sums == values);
    CHECK(multiples == quotients);
  }
  std::vector<double> f64s = {21.0, -1.0, 1e308};
  finish_average(DataType::f64, f64s.data(), f64s.size(), 7);
  CHECK(f64s == std::vector<double>{3.0, -1.0 / 7.0, 1e308 / 7.0});

  std::uint16_t f16 = 0x4a00;  // 12
  finish_average(DataType::f16, &f16, 1, 3);
  CHECK(f16 == 0x4400);  // 4
  std::uint16_t bf16 = 0x3f80;  // 1
  finish_average(DataType::bf16, &bf16, 1, 3);
  CHECK(bf16 == kBrain.encode(1.0 / 3.0));
  CHECK(bf16 == 0x3eab);
}

TEST_CASE("f16 and bf16 decode exactly and round-trip every bit pattern", "[reduce][convert]") {
  int f16_bad = 0, bf16_bad = 0;
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = f16_to_f32(h);
    const float bf = bf16_to_f32(h);
    if (kHalf.is_nan(h)) {
      // A NaN stays a NaN both ways, and a quiet one keeps its bits.
      f16_bad += !std::isnan(f) || !kHalf.is_nan(f32_to_f16(f)) || ((h & 0x200) != 0 && f32_to_f16(f) != h);
    } else {
      f16_bad += !same_bits(static_cast<double>(f), kHalf.decode(h)) || f32_to_f16(f) != h;
    }
    if (kBrain.is_nan(h)) {
      bf16_bad += !std::isnan(bf) || !kBrain.is_nan(f32_to_bf16(bf)) || ((h & 0x40) != 0 && f32_to_bf16(bf) != h);
    } else {
      bf16_bad += !same_bits(static_cast<double>(bf), kBrain.decode(h)) || f32_to_bf16(bf) != h;
    }
  }
  CHECK(f16_bad == 0);
  CHECK(bf16_bad == 0);
}

TEST_CASE("f32 to f16 and bf16 rounds to nearest even at every rounding boundary", "[reduce][convert]") {
  // Between each finite value h and its successor (inf after the largest),
  // the midpoint ties to the even one, and one f32 ulp either side of it
  // goes to the nearer one. This walks every subnormal, every binade edge and
  // the overflow threshold.
  auto check_format = [](const MiniFloat& format, std::uint16_t (*narrow)(float)) {
    int bad = 0;
    std::uint16_t first_bad = 0;
    for (std::uint16_t h = 0; h < format.inf_bits(); ++h) {
      const auto next = static_cast<std::uint16_t>(h + 1);
      const double hi = next == format.inf_bits() ? std::ldexp(1.0, format.bias() + 1) : format.decode(next);
      const auto mid = static_cast<float>((format.decode(h) + hi) / 2);  // exact in f32
      const std::uint16_t even = (h & 1) == 0 ? h : next;
      for (std::uint16_t sign : {std::uint16_t{0}, format.sign_bit()}) {
        const float s = sign != 0 ? -1.0f : 1.0f;
        const bool ok = narrow(s * mid) == (sign | even) &&
                        narrow(s * std::nextafter(mid, 0.0f)) == (sign | h) &&
                        narrow(s * std::nextafter(mid, INFINITY)) == (sign | next);
        if (!ok && bad++ == 0) first_bad = h;
      }
    }
    INFO("first failure at 0x" << std::hex << first_bad);
    CHECK(bad == 0);
  };
  check_format(kHalf, f32_to_f16);
  check_format(kBrain, f32_to_bf16);

  // Named cases, for a reader.
  CHECK(f32_to_f16(1.0f + 0x1p-11f) == 0x3c00);        // tie, to even (down)
  CHECK(f32_to_f16(1.0f + 0x3p-11f) == 0x3c02);        // tie, to even (up)
  CHECK(f32_to_f16(65519.996f) == 0x7bff);             // just below the overflow midpoint
  CHECK(f32_to_f16(65520.0f) == 0x7c00);               // the midpoint ties to inf
  CHECK(f32_to_f16(1e6f) == 0x7c00);
  CHECK(f32_to_f16(-1e6f) == 0xfc00);
  CHECK(f32_to_f16(0x1p-24f) == 0x0001);               // smallest subnormal
  CHECK(f32_to_f16(0x1p-25f) == 0x0000);               // tie between 0 and it: 0
  CHECK(f32_to_f16(0x1.8p-25f) == 0x0001);
  CHECK(f32_to_f16(0x3p-25f) == 0x0002);               // tie between 1 and 2 ulps: 2
  CHECK(f32_to_f16(0x1.ffcp-15f) == 0x0400);           // largest subnormal rounds up to the smallest normal
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  CHECK(f32_to_f16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  CHECK(f32_to_f16(INFINITY) == 0x7c00);
  CHECK(kHalf.is_nan(f32_to_f16(std::bit_cast<float>(0x7f800001u))));  // a signalling NaN whose payload is all low bits
  CHECK(f32_to_f16(std::bit_cast<float>(0x7f800001u)) == 0x7e00);      // quiet
  CHECK(f32_to_bf16(1.0f + 0x1p-8f) == 0x3f80);
  CHECK(f32_to_bf16(1.0f + 0x3p-8f) == 0x3f82);
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(f32_to_bf16(std::bit_cast<float>(0x7f800001u)) == 0x7fc0);
  CHECK(f32_to_bf16(std::bit_cast<float>(0xff812345u)) == 0xffc1);
  CHECK(f32_to_bf16(std::numeric_limits<float>::denorm_min()) == 0x0000);
}

TEST_CASE("f32 to f16 and bf16 match the reference rounding across the f32 range", "[reduce][convert]") {
  int f16_bad = 0, bf16_bad = 0;
  std::uint32_t first_f16 = 0, first_bf16 = 0;
  for (std::uint64_t bits = 0; bits <= 0xffffffffu; bits += 4093) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    const std::uint16_t h = f32_to_f16(x), b = f32_to_bf16(x);
    const bool f16_ok = std::isnan(x) ? kHalf.is_nan(h) : h == kHalf.encode(x);
    const bool bf16_ok = std::isnan(x) ? kBrain.is_nan(b) : b == kBrain.encode(x);
    if (!f16_ok && f16_bad++ == 0) first_f16 = static_cast<std::uint32_t>(bits);
    if (!bf16_ok && bf16_bad++ == 0) first_bf16 = static_cast<std::uint32_t>(bits);
  }
  INFO("first f16 failure 0x" << std::hex << first_f16 << ", first bf16 failure 0x" << first_bf16);
  CHECK(f16_bad == 0);
  CHECK(bf16_bad == 0);
}

#ifdef TEST_X86
namespace {
[[gnu::target("f16c")]] std::uint16_t f16c_narrow(float x) {
  const __m128i h = _mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  return static_cast<std::uint16_t>(_mm_cvtsi128_si32(h));
}
[[gnu::target("f16c")]] float f16c_widen(std::uint16_t h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }
}  // namespace

TEST_CASE("the portable f16 conversions agree bit for bit with F16C", "[reduce][convert]") {
  if (!kernel_isa_supported(KernelIsa::avx2)) {  // the AVX2 build needs F16C
    WARN("this CPU has no F16C; nothing to compare against");
    return;
  }
  int widen_bad = 0, narrow_bad = 0;
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    widen_bad += !same_bits(f16_to_f32(h), f16c_widen(h));
  }
  for (std::uint64_t bits = 0; bits <= 0xffffffffu; bits += 3001) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    narrow_bad += f32_to_f16(x) != f16c_narrow(x);
  }
  for (std::uint32_t payload = 1; payload < (1u << 23); payload += 97) {  // every kind of NaN
    for (std::uint32_t sign : {0u, 0x80000000u}) {
      const float x = std::bit_cast<float>(sign | 0x7f800000u | payload);
      narrow_bad += f32_to_f16(x) != f16c_narrow(x);
    }
  }
  CHECK(widen_bad == 0);
  CHECK(narrow_bad == 0);
}
#endif

namespace {
bool is_nan_at(DataType type, const unsigned char* p) {
  std::uint16_t h;
  float f;
  double d;
  switch (type) {
    case DataType::f16: std::memcpy(&h, p, 2); return kHalf.is_nan(h);
    case DataType::bf16: std::memcpy(&h, p, 2); return kBrain.is_nan(h);
    case DataType::f32: std::memcpy(&f, p, 4); return std::isnan(f);
    case DataType::f64: std::memcpy(&d, p, 8); return std::isnan(d);
    default: return false;
  }
}

// Elements that differ, where any NaN matches any NaN: which NaN x + y gives
// when both are NaN depends on the order of the operands, which the compiler
// is free to swap.
std::size_t differences(DataType type, const void* x, const void* y, std::size_t count) {
  const std::size_t size = size_of(type);
  const auto* px = static_cast<const unsigned char*>(x);
  const auto* py = static_cast<const unsigned char*>(y);
  std::size_t n = 0;
  for (std::size_t i = 0; i < count; ++i, px += size, py += size)
    n += std::memcmp(px, py, size) != 0 && !(is_nan_at(type, px) && is_nan_at(type, py));
  return n;
}
}  // namespace

TEST_CASE("the baseline and AVX2 builds give the same results", "[reduce]") {
  if (!kernel_isa_supported(KernelIsa::avx2)) {
    WARN("this CPU lacks AVX2 or F16C: only the baseline build runs here");
    return;
  }
  // Every f16/bf16 bit pattern against a shuffled copy, through every
  // operator: this compares the F16C path with the portable one.
  Rng rng(7);
  std::vector<std::uint16_t> a(65536), b(65536);
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::uint16_t>(i);
  b = a;
  std::shuffle(b.begin(), b.end(), rng);
  for (DataType type : {DataType::f16, DataType::bf16}) {
    for (ReduceOp op : kOps) {
      std::vector<std::uint16_t> base(a.size()), avx2(a.size());
      reduce_with(KernelIsa::baseline, type, op, base.data(), a.data(), b.data(), a.size());
      reduce_with(KernelIsa::avx2, type, op, avx2.data(), a.data(), b.data(), a.size());
      if (op == ReduceOp::avg) {
        finish_average_with(KernelIsa::baseline, type, base.data(), base.size(), 3);
        finish_average_with(KernelIsa::avx2, type, avx2.data(), avx2.size(), 3);
      }
      INFO("type " << name_of(type) << ", op " << name_of(op));
      CHECK(differences(type, base.data(), avx2.data(), base.size()) == 0);
    }
  }
  // And the other types on random bits.
  std::vector<std::uint64_t> x(4099), y(4099);
  for (auto& v : x) v = rng();
  for (auto& v : y) v = rng();
  for (DataType type : {DataType::f32, DataType::f64, DataType::i8, DataType::u8, DataType::i32, DataType::u32,
                        DataType::i64, DataType::u64}) {
    const std::size_t count = x.size() * 8 / size_of(type);
    for (ReduceOp op : kOps) {
      std::vector<std::uint64_t> base(x.size()), avx2(x.size());
      reduce_with(KernelIsa::baseline, type, op, base.data(), x.data(), y.data(), count);
      reduce_with(KernelIsa::avx2, type, op, avx2.data(), x.data(), y.data(), count);
      if (op == ReduceOp::avg) {
        finish_average_with(KernelIsa::baseline, type, base.data(), count, 5);
        finish_average_with(KernelIsa::avx2, type, avx2.data(), count, 5);
      }
      INFO("type " << name_of(type) << ", op " << name_of(op));
      CHECK(differences(type, base.data(), avx2.data(), count) == 0);
    }
  }
}

namespace {
std::string invalid_argument_from(void (*call)()) {
  try {
    call();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument thrown)";
}
}  // namespace

TEST_CASE("unknown types, operators and rank counts are invalid arguments naming the value", "[reduce]") {
  CHECK_THAT(invalid_argument_from([] {
               float x = 0;
               reduce(static_cast<DataType>(42), ReduceOp::sum, &x, &x, &x, 1);
             }),
             Catch::Contains("data type") && Catch::Contains("42"));
  CHECK_THAT(invalid_argument_from([] {
               float x = 0;
               reduce(DataType::f32, static_cast<ReduceOp>(9), &x, &x, &x, 1);
             }),
             Catch::Contains("operator") && Catch::Contains("9"));
  CHECK_THAT(invalid_argument_from([] { reduce(DataType::f16, static_cast<ReduceOp>(200), nullptr, nullptr, nullptr, 0); }),
             Catch::Contains("200"));
  CHECK_THAT(invalid_argument_from([] { finish_average(static_cast<DataType>(10), nullptr, 0, 2); }),
             Catch::Contains("10"));
  CHECK_THAT(invalid_argument_from([] {
               float x = 4;
               finish_average(DataType::f32, &x, 1, 0);
             }),
             Catch::Contains("rank count") && Catch::Contains("0"));
}
