// BRAID_CHECK: the one way to state an internal invariant. A failure is a bug
// in braid, reported as ErrorCode::internal with the file and line.
#pragma once

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {

/// Throws the Error subclass that `code` names (ProtocolMismatch for
/// protocol, ...), so a message can be reworded on its way up without the
/// caller's `catch (const PeerLost&)` missing it.
[[noreturn]] inline void throw_error(ErrorCode code, const std::string& message) {
  switch (code) {
    case ErrorCode::invalid_argument: throw InvalidArgument(message);
    case ErrorCode::invalid_usage: throw InvalidUsage(message);
    case ErrorCode::timeout: throw Timeout(message);
    case ErrorCode::peer_lost: throw PeerLost(message);
    case ErrorCode::protocol: throw ProtocolMismatch(message);
    case ErrorCode::system: throw SystemError(message);
    case ErrorCode::aborted: throw Aborted(message);
    default: throw Error(code, message);
  }
}

}  // namespace braid

#define BRAID_CHECK(cond, ...)                                                                  \
  do {                                                                                          \
    if (!(cond)) [[unlikely]]                                                                   \
      throw ::braid::Error(::braid::ErrorCode::internal,                                        \
                           ::braid::cat("internal error at ", __FILE__, ":", __LINE__, ": ",   \
                                        #cond " failed" __VA_OPT__(, ": ", ) __VA_ARGS__));    \
  } while (0)
