#include <array>
#include <string>

#include "braid/types.hpp"
#include "core/reduce.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

struct TypeRow {
  DataType type;
  std::size_t size;
  std::string_view name;
};
constexpr std::array<TypeRow, kDataTypeCount> kTypes = {{
    {DataType::f16, 2, "f16"},
    {DataType::bf16, 2, "bf16"},
    {DataType::f32, 4, "f32"},
    {DataType::f64, 8, "f64"},
    {DataType::i8, 1, "i8"},
    {DataType::u8, 1, "u8"},
    {DataType::i32, 4, "i32"},
    {DataType::u32, 4, "u32"},
    {DataType::i64, 8, "i64"},
    {DataType::u64, 8, "u64"},
}};
constexpr std::array<std::string_view, kReduceOpCount> kOps = {"sum", "prod", "min", "max", "avg"};

const TypeRow& row(DataType type) {
  auto index = static_cast<std::size_t>(type);
  if (index >= kTypes.size()) throw InvalidArgument(cat("unknown data type value ", index));
  return kTypes[index];
}

}  // namespace

std::size_t size_of(DataType type) { return row(type).size; }
std::string_view name_of(DataType type) { return row(type).name; }

std::string_view name_of(ReduceOp op) {
  auto index = static_cast<std::size_t>(op);
  if (index >= kOps.size()) throw InvalidArgument(cat("unknown reduction operator value ", index));
  return kOps[index];
}

DataType parse_data_type(std::string_view text) {
  for (const auto& r : kTypes)
    if (r.name == text) return r.type;
  struct Alias {
    std::string_view name;
    DataType type;
  };
  static constexpr Alias kAliases[] = {
      {"half", DataType::f16},     {"float16", DataType::f16},  {"bfloat16", DataType::bf16},
      {"float", DataType::f32},    {"float32", DataType::f32},  {"double", DataType::f64},
      {"float64", DataType::f64},  {"int8", DataType::i8},      {"uint8", DataType::u8},
      {"int", DataType::i32},      {"int32", DataType::i32},    {"uint32", DataType::u32},
      {"int64", DataType::i64},    {"uint64", DataType::u64},
  };
  for (const auto& a : kAliases)
    if (a.name == text) return a.type;
  throw InvalidArgument(cat("unknown data type '", text, "' (expected f16, bf16, f32, f64, i8, u8, i32, u32, i64 or u64)"));
}

ReduceOp parse_reduce_op(std::string_view text) {
  for (std::size_t i = 0; i < kOps.size(); ++i)
    if (kOps[i] == text) return static_cast<ReduceOp>(i);
  throw InvalidArgument(cat("unknown reduction operator '", text, "' (expected sum, prod, min, max or avg)"));
}

std::string_view name_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::invalid_usage: return "invalid usage";
    case ErrorCode::timeout: return "timeout";
    case ErrorCode::peer_lost: return "peer lost";
    case ErrorCode::protocol: return "protocol mismatch";
    case ErrorCode::system: return "system error";
    case ErrorCode::aborted: return "aborted";
    case ErrorCode::internal: return "internal error";
    case ErrorCode::unsupported: return "unsupported";
  }
  return "unknown error";
}

Float16 Float16::from_float(float value) { return Float16{f32_to_f16(value)}; }
float Float16::to_float() const { return f16_to_f32(bits); }
BFloat16 BFloat16::from_float(float value) { return BFloat16{f32_to_bf16(value)}; }
float BFloat16::to_float() const { return bf16_to_f32(bits); }

}  // namespace braid
