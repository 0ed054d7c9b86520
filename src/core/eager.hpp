// The contract between the transports and the schedules on which sends
// finish without their receive.
#pragma once

#include <cstddef>

namespace braid {

/// Every link completes a send of up to this many bytes without the peer's
/// receive (into a socket's buffer, a ring's slots, UCX's eager protocol),
/// and schedules may rely on it (collectives/direct.cpp's two-step form
/// waits for its send before it receives). A larger send may wait for the
/// receive (shm's single copies, UCX's rendezvous), so a schedule must not
/// make that receive wait for it.
inline constexpr std::size_t kEagerSendBytes = 64 * 1024;

}  // namespace braid
