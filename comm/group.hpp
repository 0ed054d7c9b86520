// The calling thread's open group (group.cpp): how the C++ and C calls defer
// their operations while braid_group_start/end (braid::group) is open.
#pragma once

#include <exception>
#include <memory>

namespace braid {

class CommImpl;
class Operation;

/// True between the calling thread's outermost group start and its end.
bool group_open();
/// Defers `op` (made by `comm`, not submitted) to the end of the group and
/// returns what its Work tracks: the communicator's fused send/receive
/// operation for a send or receive, else `op` itself. `blocking`: the group's
/// end waits for it.
std::shared_ptr<Operation> group_defer(CommImpl& comm, std::shared_ptr<Operation> op, bool blocking);
/// Drops what the calling thread's open group holds for `comm` (which is
/// being destroyed), failing its operations.
void group_forget(CommImpl& comm);
/// A call of the calling thread's open group failed its checks with `error`:
/// the group is issued not at all (group_end).
void group_fail(std::exception_ptr error);

}  // namespace braid
