// A program of another project, using an installed braid through its C++ API
// (see this folder's Makefile and meson.build). Under braid-run:
//
//   braid-run -n 2 ./all_reduce_cpp
//
// Each rank all-reduces rank + 1 into every element, checks the sum, and
// checks that an error thrown inside libbraid is caught here by its class.
#include <braid/braid.hpp>

#include <cstdio>
#include <span>
#include <vector>

int main() {
  try {
    braid::Comm comm = braid::Comm::from_env();
    const int n = comm.size();
    std::vector<float> grad(1000, static_cast<float>(comm.rank() + 1));
    comm.all_reduce(std::span(grad), braid::ReduceOp::sum);
    const float expected = static_cast<float>(n * (n + 1) / 2);
    int wrong = 0;
    for (float x : grad) wrong += x != expected;

    bool caught = false;
    try {
      comm.broadcast(std::span(grad), /*root=*/n);  // no such rank
    } catch (const braid::InvalidArgument&) {
      caught = true;
    }
    std::printf("all_reduce_cpp: rank %d of %d: sum %g (expected %g), %d wrong, %s\n", comm.rank(), n,
                static_cast<double>(grad[0]), static_cast<double>(expected), wrong,
                caught ? "InvalidArgument caught" : "InvalidArgument NOT caught");
    return wrong == 0 && caught ? 0 : 1;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "all_reduce_cpp: braid error: %s\n", e.what());
    return 1;
  }
}
