// BRAID_CHECK: the one way to state an internal invariant. A failure is a bug
// in braid, reported as ErrorCode::internal with the file and line.
#pragma once

#include "braid/types.hpp"
#include "core/text.hpp"

#define BRAID_CHECK(cond, ...)                                                                  \
  do {                                                                                          \
    if (!(cond)) [[unlikely]]                                                                   \
      throw ::braid::Error(::braid::ErrorCode::internal,                                        \
                           ::braid::cat("internal error at ", __FILE__, ":", __LINE__, ": ",   \
                                        #cond " failed" __VA_OPT__(, ": ", ) __VA_ARGS__));    \
  } while (0)
