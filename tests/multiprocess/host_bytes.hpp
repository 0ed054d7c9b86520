// Host buffers of the multi-process checks: heap memory, or, with
// --shared-memory, braid::mem_alloc's, whose messages above 64K the ranks of
// a host copy or reduce in place (transport/shm/shared_memory.hpp).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "braid/braid.hpp"

namespace braid::check {

inline bool g_shared_memory = false;

class HostBytes {
 public:
  explicit HostBytes(std::size_t bytes, std::byte fill = std::byte{0}) : bytes_(bytes) {
    if (g_shared_memory) {
      data_ = static_cast<std::byte*>(braid::mem_alloc(std::max<std::size_t>(bytes, 1)));
    } else {
      heap_.resize(bytes);
      data_ = heap_.data();
    }
    std::fill_n(data_, bytes, fill);
  }
  ~HostBytes() {
    if (g_shared_memory) braid::mem_free(data_);
  }
  HostBytes(const HostBytes&) = delete;
  HostBytes& operator=(const HostBytes&) = delete;
  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  std::size_t size() const { return bytes_; }
  std::byte operator[](std::size_t i) const { return data_[i]; }

 private:
  std::vector<std::byte> heap_;
  std::byte* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace braid::check
