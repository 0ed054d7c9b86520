// Tally: the cases one rank of a multi-process check ran, and which failed
// (each failure printed with the rank as it happens).
#pragma once

#include <cstdio>
#include <string>

namespace braid::check {

struct Tally {
  int rank = 0;
  int cases = 0;
  int failed = 0;
  void record(bool ok, const std::string& what) {
    ++cases;
    if (!ok) {
      ++failed;
      std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what.c_str());
    }
  }
};

}  // namespace braid::check
