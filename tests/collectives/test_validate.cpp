// validate(): a schedule that reads or writes outside its buffers, names a
// peer that is not another rank, reduces partial elements or depends on a
// later step is a bug in its algorithm, reported as Error(internal) before
// anything runs.
#include <catch2/catch.hpp>

#include <cstdint>

#include "collectives/schedule.hpp"

namespace braid {
namespace {

ErrorCode validate_error(const Schedule& s, BufferSizes sizes, int rank) {
  try {
    validate(s, sizes, rank);
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode{0};
}

TEST_CASE("validate() rejects broken schedules with an internal error", "[schedule]") {
  // A correct two-step schedule of rank 0 of 2: send 8 bytes of input, then
  // receive-and-reduce 8 bytes into the output.
  Schedule good;
  good.algorithm = "hand-made";
  good.type = DataType::f32;
  good.ranks = 2;
  good.add(Step{.kind = StepKind::send, .peer = 1, .src = {BufferId::input, 0, 8}});
  good.add(Step{.kind = StepKind::recv_reduce, .peer = 1, .src = {BufferId::input, 8, 8}, .dst = {BufferId::output, 8, 8},
                .deps = {0}});
  const BufferSizes sizes{16, 16};
  REQUIRE_NOTHROW(validate(good, sizes, 0));

  auto broken = [&](auto change) {
    Schedule s = good;
    change(s);
    return validate_error(s, sizes, 0);
  };
  CHECK(broken([](Schedule& s) { s.steps[0].src.offset = 12; }) == ErrorCode::internal);  // reads past the input
  CHECK(broken([](Schedule& s) { s.steps[1].dst.bytes = 12; s.steps[1].src.bytes = 12; }) == ErrorCode::internal);
  CHECK(broken([](Schedule& s) { s.steps[0].src.offset = SIZE_MAX; }) == ErrorCode::internal);  // no wrap-around
  CHECK(broken([](Schedule& s) { s.steps[1].dst.buffer = BufferId::scratch; }) == ErrorCode::internal);  // no scratch
  CHECK(broken([](Schedule& s) { s.steps[0].deps = {1}; }) == ErrorCode::internal);  // a forward dependency
  CHECK(broken([](Schedule& s) { s.steps[1].deps = {1}; }) == ErrorCode::internal);  // on itself
  CHECK(broken([](Schedule& s) { s.steps[0].peer = 0; }) == ErrorCode::internal);    // to itself
  CHECK(broken([](Schedule& s) { s.steps[0].peer = 2; }) == ErrorCode::internal);    // no such rank
  CHECK(broken([](Schedule& s) { s.steps[1].peer = -1; }) == ErrorCode::internal);
  CHECK(broken([](Schedule& s) { s.steps[1].src.bytes = 4; }) == ErrorCode::internal);  // unequal reduction
  CHECK(broken([](Schedule& s) {
          s.steps[1].src.bytes = 6;
          s.steps[1].dst.bytes = 6;
        }) == ErrorCode::internal);  // partial elements
  CHECK(broken([](Schedule& s) {
          s.add(Step{.kind = StepKind::copy, .src = {BufferId::input, 0, 8}, .dst = {BufferId::output, 0, 4}});
        }) == ErrorCode::internal);  // unequal copy
}

}  // namespace
}  // namespace braid
