#include "core/comm_id.hpp"

#include <sys/random.h>

#include <cerrno>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {

CommId CommId::random() {
  CommId id;
  std::size_t got = 0;
  while (got < id.bytes.size()) {
    ssize_t n = ::getrandom(id.bytes.data() + got, id.bytes.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw SystemError(cat("getrandom failed: ", errno_text(errno)));
    got += static_cast<std::size_t>(n);
  }
  return id;
}

std::string CommId::to_hex() const { return braid::to_hex(bytes); }

}  // namespace braid
