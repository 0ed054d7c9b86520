// The numpy side of the binding: which numpy arrays a collective accepts and
// how they become the pointer, count and DataType of braid's C++ API, with
// errors that name the argument (braid.InvalidArgument) instead of a crash.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "braid/types.hpp"

namespace braid::python {

namespace py = pybind11;

/// One numpy array checked for a collective: C-contiguous, of a braid type,
/// and writable where braid writes into it. Holds a reference to the array,
/// so that an asynchronous operation keeps it alive.
struct ArrayArg {
  py::array array;
  void* data = nullptr;
  std::size_t count = 0;  ///< elements
  DataType type = DataType::f32;

  std::size_t bytes() const { return count * size_of(type); }
};

/// Where the checks report from: "all_reduce" and the argument's name.
struct ArgName {
  const char* op;
  const char* arg;
};

/// The DataType of a numpy dtype (float16..float64, int8, uint8, int32,
/// uint32, int64, uint64; a dtype named bfloat16, as ml_dtypes' is, for
/// bf16), or nullopt.
std::optional<DataType> data_type_of_dtype(const py::dtype& dtype);
/// A braid type given as an override: "bf16", braid.DataType.BF16 or a numpy dtype; nullopt for None.
std::optional<DataType> parse_type_override(const py::object& dtype, const char* op);

/// Checks `object` as an input (read only) or output (written) array of
/// `op`; `type` overrides the element type (same item size) when set.
ArrayArg input_array(const py::object& object, ArgName name, std::optional<DataType> type = std::nullopt);
ArrayArg output_array(const py::object& object, ArgName name, std::optional<DataType> type = std::nullopt);

/// Throws InvalidArgument unless `other` has the element type of `first`.
void check_same_type(const ArrayArg& first, ArgName first_name, const ArrayArg& other, ArgName other_name);
/// Throws InvalidArgument unless `arg` holds exactly `expected` elements.
void check_count(const ArrayArg& arg, ArgName name, std::size_t expected, const std::string& why);

/// A new C-contiguous array of `like`'s dtype and the given shape.
py::array new_array_like(const ArrayArg& like, const std::vector<py::ssize_t>& shape);

/// Per-rank counts or displacements (any sequence of non-negative integers); empty for None.
std::vector<std::size_t> size_list(const py::object& object, ArgName name);
/// Throws InvalidArgument unless blocks (counts[p] at displs[p], or packed
/// in rank order when displs is empty) fit in `arg`.
void check_blocks_fit(const ArrayArg& arg, ArgName name, const std::vector<std::size_t>& counts,
                      const std::vector<std::size_t>& displs);

/// Throws braid::InvalidArgument with "<op>: <message>".
[[noreturn]] void invalid(ArgName name, const std::string& message);

}  // namespace braid::python
