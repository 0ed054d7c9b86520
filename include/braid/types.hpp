// braid — data types, reduction operators and the error hierarchy shared by
// every layer and by users of the C++ API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace braid {

/// Element types a collective can move and reduce.
enum class DataType : std::uint8_t {
  f16,   ///< IEEE 754 binary16
  bf16,  ///< bfloat16 (upper half of a binary32)
  f32,
  f64,
  i8,
  u8,
  i32,
  u32,
  i64,
  u64,
};
inline constexpr int kDataTypeCount = 10;

/// Reductions. Integer sum and prod wrap modulo 2^bits; avg is sum divided by
/// the number of ranks (integer division for integer types).
enum class ReduceOp : std::uint8_t { sum, prod, min, max, avg };
inline constexpr int kReduceOpCount = 5;

/// Size of one element in bytes.
std::size_t size_of(DataType type);
/// Lower-case name ("f32", "bf16", ...).
std::string_view name_of(DataType type);
/// Lower-case name ("sum", "avg", ...).
std::string_view name_of(ReduceOp op);
/// Parses a name as printed by name_of (also accepts "float", "half", "int" ...);
/// throws InvalidArgument naming the text otherwise.
DataType parse_data_type(std::string_view text);
ReduceOp parse_reduce_op(std::string_view text);

/// IEEE binary16 value stored as its bits.
struct Float16 {
  std::uint16_t bits = 0;
  static Float16 from_float(float value);  ///< round to nearest even
  float to_float() const;
};
/// bfloat16 value stored as its bits.
struct BFloat16 {
  std::uint16_t bits = 0;
  static BFloat16 from_float(float value);  ///< round to nearest even
  float to_float() const;
};

/// Maps a C++ element type to its DataType (used by the span overloads).
template <typename T> struct DataTypeOf;
template <> struct DataTypeOf<Float16> { static constexpr DataType value = DataType::f16; };
template <> struct DataTypeOf<BFloat16> { static constexpr DataType value = DataType::bf16; };
template <> struct DataTypeOf<float> { static constexpr DataType value = DataType::f32; };
template <> struct DataTypeOf<double> { static constexpr DataType value = DataType::f64; };
template <> struct DataTypeOf<std::int8_t> { static constexpr DataType value = DataType::i8; };
template <> struct DataTypeOf<std::uint8_t> { static constexpr DataType value = DataType::u8; };
template <> struct DataTypeOf<std::int32_t> { static constexpr DataType value = DataType::i32; };
template <> struct DataTypeOf<std::uint32_t> { static constexpr DataType value = DataType::u32; };
template <> struct DataTypeOf<std::int64_t> { static constexpr DataType value = DataType::i64; };
template <> struct DataTypeOf<std::uint64_t> { static constexpr DataType value = DataType::u64; };
template <typename T> inline constexpr DataType data_type_of = DataTypeOf<std::remove_cv_t<T>>::value;

/// What went wrong, in a form a program can branch on. The numeric values are
/// those of braid_result_t in the C ABI, which are NCCL's where the meaning
/// is the same.
enum class ErrorCode : int {
  system = 2,            ///< an operating-system call failed
  internal = 3,          ///< a broken invariant inside braid (a bug)
  invalid_argument = 4,  ///< the caller passed something wrong
  invalid_usage = 5,     ///< a call in the wrong state (an empty Comm, a group not open)
  peer_lost = 6,         ///< a peer closed, reset or stopped answering
  timeout = 16,          ///< a wait passed its deadline
  protocol = 17,         ///< bytes that are not braid's, or another job's
  aborted = 18,          ///< the communicator was aborted
  unsupported = 19,      ///< valid, but not built or not implemented here
};
std::string_view name_of(ErrorCode code);

/// Base of every exception braid throws. Messages name the rank, the peer,
/// the host and the operation where they are known.
class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

class InvalidArgument : public Error {
 public:
  explicit InvalidArgument(const std::string& m) : Error(ErrorCode::invalid_argument, m) {}

 protected:
  InvalidArgument(ErrorCode code, const std::string& m) : Error(code, m) {}
};
/// A call made in a state where it cannot be (NCCL's ncclInvalidUsage): a
/// kind of invalid argument, the argument being the communicator, work or
/// group, so that a handler of InvalidArgument catches it too.
class InvalidUsage : public InvalidArgument {
 public:
  explicit InvalidUsage(const std::string& m) : InvalidArgument(ErrorCode::invalid_usage, m) {}
};
class Timeout : public Error {
 public:
  explicit Timeout(const std::string& m) : Error(ErrorCode::timeout, m) {}
};
class PeerLost : public Error {
 public:
  explicit PeerLost(const std::string& m) : Error(ErrorCode::peer_lost, m) {}
};
class ProtocolMismatch : public Error {
 public:
  explicit ProtocolMismatch(const std::string& m) : Error(ErrorCode::protocol, m) {}
};
class SystemError : public Error {
 public:
  explicit SystemError(const std::string& m) : Error(ErrorCode::system, m) {}
};
class Aborted : public Error {
 public:
  explicit Aborted(const std::string& m) : Error(ErrorCode::aborted, m) {}
};

}  // namespace braid
