// Checks of the numpy arrays given to collectives (see arrays.hpp).
#include "arrays.hpp"

#include <string_view>

namespace braid::python {

namespace {

const char* kTypesHelp =
    "braid's types are float16, float32, float64, int8, uint8, int32, uint32, int64 and uint64 "
    "(and bf16: pass a uint16 array with dtype='bf16')";

std::string dtype_name(const py::dtype& dtype) { return dtype.attr("name").cast<std::string>(); }

std::string type_name(const py::handle& object) {
  return py::str(py::type::handle_of(object).attr("__name__")).cast<std::string>();
}

ArrayArg array_arg(const py::object& object, ArgName name, std::optional<DataType> type, bool writable) {
  if (object.is_none()) invalid(name, std::string("argument '") + name.arg + "' is required (got None)");
  if (!py::isinstance<py::array>(object))
    invalid(name, std::string("argument '") + name.arg + "' must be a numpy.ndarray, not " + type_name(object));
  auto array = py::reinterpret_borrow<py::array>(object);
  if (!(array.flags() & py::array::c_style))
    invalid(name, std::string("argument '") + name.arg +
                      "' is not C-contiguous (braid reads and writes arrays in place; pass "
                      "numpy.ascontiguousarray(...) and copy the result back)");
  if (writable && !array.writeable())
    invalid(name, std::string("argument '") + name.arg + "' is read-only, but braid writes the result into it");
  std::optional<DataType> own = data_type_of_dtype(array.dtype());
  DataType chosen;
  if (type) {
    if (size_of(*type) != static_cast<std::size_t>(array.itemsize()))
      invalid(name, std::string("argument '") + name.arg + "' has dtype " + dtype_name(array.dtype()) + " (" +
                        std::to_string(array.itemsize()) + " bytes per element), which cannot hold " +
                        std::string(name_of(*type)) + " (" + std::to_string(size_of(*type)) + " bytes)");
    chosen = *type;
  } else if (own) {
    chosen = *own;
  } else {
    invalid(name, std::string("argument '") + name.arg + "' has dtype " + dtype_name(array.dtype()) +
                      ", which braid does not have; " + kTypesHelp);
  }
  ArrayArg arg;
  arg.data = writable ? array.mutable_data() : const_cast<void*>(array.data());
  arg.count = static_cast<std::size_t>(array.size());
  arg.type = chosen;
  arg.array = std::move(array);
  return arg;
}

}  // namespace

void invalid(ArgName name, const std::string& message) { throw InvalidArgument(std::string(name.op) + ": " + message); }

std::optional<DataType> data_type_of_dtype(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  if (kind == 'f') {
    if (size == 2) return DataType::f16;
    if (size == 4) return DataType::f32;
    if (size == 8) return DataType::f64;
  } else if (kind == 'i') {
    if (size == 1) return DataType::i8;
    if (size == 4) return DataType::i32;
    if (size == 8) return DataType::i64;
  } else if (kind == 'u') {
    if (size == 1) return DataType::u8;
    if (size == 4) return DataType::u32;
    if (size == 8) return DataType::u64;
  } else if (size == 2 && dtype_name(dtype) == "bfloat16") {
    return DataType::bf16;
  }
  return std::nullopt;
}

std::optional<DataType> parse_type_override(const py::object& dtype, const char* op) {
  if (dtype.is_none()) return std::nullopt;
  if (py::isinstance<DataType>(dtype)) return dtype.cast<DataType>();
  if (py::isinstance<py::str>(dtype)) {
    const auto text = dtype.cast<std::string>();
    try {
      return parse_data_type(text);
    } catch (const InvalidArgument&) {
      // numpy's names ("float32", "int64") are not all braid's; try them as a dtype below.
    }
  }
  py::dtype as_dtype;
  try {
    as_dtype = py::dtype::from_args(dtype);
  } catch (const py::error_already_set&) {
    invalid({op, "dtype"},
            "argument 'dtype' is " + py::repr(dtype).cast<std::string>() + ", not a braid type; " + kTypesHelp);
  }
  auto type = data_type_of_dtype(as_dtype);
  if (!type)
    invalid({op, "dtype"},
            "argument 'dtype' is " + dtype_name(as_dtype) + ", which braid does not have; " + kTypesHelp);
  return type;
}

ArrayArg input_array(const py::object& object, ArgName name, std::optional<DataType> type) {
  return array_arg(object, name, type, false);
}

ArrayArg output_array(const py::object& object, ArgName name, std::optional<DataType> type) {
  return array_arg(object, name, type, true);
}

void check_same_type(const ArrayArg& first, ArgName first_name, const ArrayArg& other, ArgName other_name) {
  if (first.type != other.type)
    invalid(other_name, std::string("argument '") + other_name.arg + "' holds " + std::string(name_of(other.type)) +
                            " but '" + first_name.arg + "' holds " + std::string(name_of(first.type)) +
                            " (both must have the same type)");
}

void check_count(const ArrayArg& arg, ArgName name, std::size_t expected, const std::string& why) {
  if (arg.count != expected)
    invalid(name, std::string("argument '") + name.arg + "' has " + std::to_string(arg.count) +
                      " elements but must have " + std::to_string(expected) + " (" + why + ")");
}

py::array new_array_like(const ArrayArg& like, const std::vector<py::ssize_t>& shape) {
  return py::array(like.array.dtype(), shape);
}

std::vector<std::size_t> size_list(const py::object& object, ArgName name) {
  std::vector<std::size_t> out;
  if (object.is_none()) return out;
  if (!py::isinstance<py::sequence>(object) && !py::isinstance<py::array>(object))
    invalid(name,
            std::string("argument '") + name.arg + "' must be a sequence of element counts, not " + type_name(object));
  for (const auto& item : py::iter(object)) {
    long long v = 0;
    try {
      v = py::int_(py::reinterpret_borrow<py::object>(item)).cast<long long>();
    } catch (const py::error_already_set&) {
      invalid(name, std::string("argument '") + name.arg + "' holds " + py::repr(item).cast<std::string>() +
                        ", not an integer");
    }
    if (v < 0) invalid(name, std::string("argument '") + name.arg + "' holds a negative count " + std::to_string(v));
    out.push_back(static_cast<std::size_t>(v));
  }
  return out;
}

void check_blocks_fit(const ArrayArg& arg, ArgName name, const std::vector<std::size_t>& counts,
                      const std::vector<std::size_t>& displs) {
  std::size_t packed = 0;
  for (std::size_t p = 0; p < counts.size(); ++p) {
    const std::size_t start = displs.empty() ? packed : (p < displs.size() ? displs[p] : 0);
    packed += counts[p];
    if (counts[p] == 0) continue;
    if (start > arg.count || counts[p] > arg.count - start)
      invalid(name, std::string("the block of rank ") + std::to_string(p) + " (" + std::to_string(counts[p]) +
                        " elements at " + std::to_string(start) + ") does not fit in argument '" + name.arg + "' of " +
                        std::to_string(arg.count) + " elements");
  }
}

}  // namespace braid::python
