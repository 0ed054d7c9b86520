// Why an operation or a communicator failed, kept as a value (code and
// message) rather than as a std::exception_ptr. The driving thread records a
// failure; the rank's thread, a Work's waiter or a callback report it: each
// throws its own exception from the value. One exception object shared
// between threads would be freed by whichever thread drops the last
// reference, through reference counts inside the C++ runtime that the thread
// sanitizer cannot see, so its reports would hide real races behind false
// ones (docs/architecture.md, "Errors, time and trust").
#pragma once

#include <exception>
#include <string>

#include "braid/types.hpp"
#include "core/check.hpp"

namespace braid {

struct Failure {
  ErrorCode code = ErrorCode::internal;
  std::string what;  // empty: no failure

  explicit operator bool() const noexcept { return !what.empty(); }
  /// Throws a new exception of the class `code` names (check.hpp).
  [[noreturn]] void raise() const { throw_error(code, what); }
  /// A new exception object for this failure, or null when there is none.
  std::exception_ptr ptr() const {
    if (!*this) return nullptr;
    try {
      raise();
    } catch (...) {
      return std::current_exception();
    }
  }
  static Failure of(const Error& e) {
    std::string what = e.what();
    return {e.code(), what.empty() ? std::string("an error without a message") : std::move(what)};
  }
};

}  // namespace braid
