// run_schedules: the schedules of N ranks, one Executor each, run against each
// other over a MemoryFabric on one thread. Every schedule is validated first;
// then the driver calls advance() on the ranks in turn until all of them
// finish. Because the fabric and the executors are deterministic and take no
// input from outside, a whole pass in which no rank moved and the fabric did
// nothing means no rank will ever move again: the schedules are stuck (a
// deadlock, or a rank that never ran). A bound on the number of passes
// catches anything that keeps moving without finishing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collectives/executor.hpp"
#include "collectives/schedule.hpp"
#include "core/text.hpp"
#include "memory_link.hpp"

namespace braid::test {

struct RunOptions {
  std::vector<std::uint32_t> sequences;  // per rank; empty: every rank uses 1
  std::vector<int> absent;               // ranks whose schedule is not run at all
  bool reverse = false;                  // advance ranks from the last to the first
  std::size_t max_passes = 100000;
};

struct RunOutcome {
  std::vector<bool> finished;  // per rank
  bool stuck = false;          // a pass in which nothing could move
  bool out_of_passes = false;  // still moving after max_passes
  std::size_t passes = 0;
  std::exception_ptr error;  // the first exception out of validate() or advance()
  std::string error_text;    // "rank 3: ..."
  std::string pending;       // describe_pending() of every unfinished rank that ran

  bool all_finished() const { return std::all_of(finished.begin(), finished.end(), [](bool f) { return f; }); }
  std::string describe() const {
    if (error) return cat("error: ", error_text);
    if (out_of_passes) return cat("not finished after ", passes, " passes: ", pending);
    if (stuck) return cat("stuck after ", passes, " passes: ", pending);
    return cat("finished in ", passes, " passes");
  }
};

inline RunOutcome run_schedules(MemoryFabric& fabric, std::span<const Schedule> schedules,
                                std::span<const Buffers> buffers, const RunOptions& options = {}) {
  const int n = fabric.ranks();
  BRAID_CHECK(schedules.size() == static_cast<std::size_t>(n) && buffers.size() == schedules.size(),
              "one schedule and one set of buffers per rank");
  RunOutcome out{.finished = std::vector<bool>(static_cast<std::size_t>(n))};
  std::vector<bool> runs(static_cast<std::size_t>(n), true);
  for (int r : options.absent) runs[r] = false;

  std::vector<std::vector<Link*>> links(static_cast<std::size_t>(n));
  std::vector<std::unique_ptr<Executor>> executors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    if (!runs[r]) continue;
    try {
      validate(schedules[r], BufferSizes{buffers[r].input_bytes, buffers[r].output_bytes}, r);
      links[r] = fabric.links_of(r);
      const std::uint32_t sequence = options.sequences.empty() ? 1 : options.sequences[r];
      executors[r] = std::make_unique<Executor>(schedules[r], buffers[r], links[r], sequence);
    } catch (const std::exception& e) {
      out.error = std::current_exception();
      out.error_text = cat("rank ", r, ": ", e.what());
      return out;
    }
  }

  int calm_passes = 0;
  while (true) {
    if (out.passes == options.max_passes) {
      out.out_of_passes = true;
      break;
    }
    ++out.passes;
    const std::uint64_t activity = fabric.activity();
    bool moved = false;
    bool all_done = true;
    for (int k = 0; k < n; ++k) {
      const int r = options.reverse ? n - 1 - k : k;
      if (!runs[r]) {
        all_done = false;
        continue;
      }
      if (out.finished[r]) continue;
      try {
        out.finished[r] = executors[r]->advance();
      } catch (const std::exception& e) {
        out.error = std::current_exception();
        out.error_text = cat("rank ", r, ": ", e.what());
        return out;
      }
      moved = moved || executors[r]->moved();
      all_done = all_done && out.finished[r];
    }
    if (all_done) return out;
    calm_passes = (moved || fabric.activity() != activity) ? 0 : calm_passes + 1;
    if (calm_passes == 2) {
      out.stuck = true;
      break;
    }
  }
  for (int r = 0; r < n; ++r)
    if (runs[r] && !out.finished[r])
      out.pending += cat(out.pending.empty() ? "" : "; ", "rank ", r, ": ", executors[r]->describe_pending());
  return out;
}

}  // namespace braid::test
