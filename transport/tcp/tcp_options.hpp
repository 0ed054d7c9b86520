// What a TCP transport needs to know: who it speaks for, and the socket,
// timeout and security settings that every rank of the communicator shares.
#pragma once

#include <cstddef>
#include <optional>

#include "core/auth.hpp"
#include "core/comm_id.hpp"
#include "core/deadline.hpp"
#include "core/socket.hpp"
#include "core/tls.hpp"

namespace braid {

struct TcpOptions {
  int rank = 0;
  int world_size = 1;
  CommId comm_id;
  int streams = 1;
  std::size_t buffer_bytes = 0;
  Millis timeout{300000};
  SockAddr listen_address;  // the IP to advertise; the port is picked here
  std::optional<PortRange> port_range;  // BRAID_PORT_RANGE: the listener's port comes from it
  AuthKey auth_key;         // none: connections are not authenticated
  TlsContext tls;           // off: connections run in clear
};

}  // namespace braid
