#include "perf_case.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>

#include "expected_values.hpp"

namespace braid::perf {

// The count argument of the call for a row of `bytes`: whole elements, at
// least one (per rank where there are blocks) unless the row is empty.
std::size_t count_for(const CaseSpec& s, int n, std::size_t bytes) {
  const std::size_t blocks = s.collective->blocked ? static_cast<std::size_t>(n) : 1;
  return bytes == 0 ? 0 : std::max<std::size_t>(1, bytes / braid::size_of(s.type) / blocks);
}

Case::Case(const CaseSpec& o, braid::Comm& comm, PerfBuffers& buffers, std::size_t bytes)
    : o_(o), comm_(comm), buffers_(buffers), kind_(even_form(o.collective->kind)), call_(o.collective->kind),
      rank_(comm.rank()), n_(comm.size()), element_(braid::size_of(o.type)) {
  HostBuffer& send = buffers.send;
  HostBuffer& recv = buffers.recv;
  const std::size_t blocks = o.collective->blocked ? static_cast<std::size_t>(n_) : 1;
  count_ = count_for(o, n_, bytes);
  total_ = count_ * blocks;
  const std::size_t block_bytes = count_ * element_;
  const std::size_t mine = block_bytes * static_cast<std::size_t>(rank_);
  in_ = send.data();
  out_ = o.in_place ? send.data() : recv.data();
  switch (kind_) {
    case Kind::all_gather:
    case Kind::gather:
      out_ = recv.data();
      in_ = o.in_place ? recv.data() + mine : send.data();
      out_elements_ = total_;
      break;
    case Kind::reduce_scatter:
    case Kind::scatter:
      out_ = o.in_place ? send.data() + mine : recv.data();
      out_elements_ = count_;
      break;
    case Kind::all_to_all: out_elements_ = total_; break;
    default: out_elements_ = count_; break;
  }
  call_in_ = buffers.target(in_);
  call_out_ = buffers.target(out_);
  counts_.assign(static_cast<std::size_t>(n_), count_);
}

void Case::run_once() {
  const auto t = o_.type;
  const auto op = o_.op;
  const int root = o_.root;
  if (call_ != kind_) {
    start_uneven(nullptr);
    return;
  }
  switch (kind_) {
    case Kind::all_reduce: comm_.all_reduce(call_in_, call_out_, count_, t, op); break;
    case Kind::broadcast: comm_.broadcast(call_in_, call_out_, count_, t, root); break;
    case Kind::reduce: comm_.reduce(call_in_, call_out_, count_, t, op, root); break;
    case Kind::all_gather: comm_.all_gather(call_in_, call_out_, count_, t); break;
    case Kind::reduce_scatter: comm_.reduce_scatter(call_in_, call_out_, count_, t, op); break;
    case Kind::all_to_all: comm_.all_to_all(call_in_, call_out_, count_, t); break;
    case Kind::gather: comm_.gather(call_in_, call_out_, count_, t, root); break;
    case Kind::scatter: comm_.scatter(call_in_, call_out_, count_, t, root); break;
    case Kind::sendrecv:
      // A communicator runs its operations one at a time in the order they
      // were started, and a receive posted first holds up a send posted
      // after it: even ranks send first, odd ranks receive first, so the
      // ring never waits on itself (for any n >= 2).
      if (rank_ % 2 == 0) {
        comm_.send(call_in_, count_, t, next());
        comm_.recv(call_out_, count_, t, previous());
      } else {
        comm_.recv(call_out_, count_, t, previous());
        comm_.send(call_in_, count_, t, next());
      }
      break;
    default: break;  // the uneven kinds run as their even form
  }
}

// The same call started in the background (-z 0); the communicator runs
// its operations in the order they were started.
void Case::start(std::vector<braid::Work>& works) {
  const auto t = o_.type;
  const auto op = o_.op;
  const int root = o_.root;
  if (call_ != kind_) {
    start_uneven(&works);
    return;
  }
  switch (kind_) {
    case Kind::all_reduce: works.push_back(comm_.all_reduce_async(call_in_, call_out_, count_, t, op)); break;
    case Kind::broadcast: works.push_back(comm_.broadcast_async(call_in_, call_out_, count_, t, root)); break;
    case Kind::reduce: works.push_back(comm_.reduce_async(call_in_, call_out_, count_, t, op, root)); break;
    case Kind::all_gather: works.push_back(comm_.all_gather_async(call_in_, call_out_, count_, t)); break;
    case Kind::reduce_scatter: works.push_back(comm_.reduce_scatter_async(call_in_, call_out_, count_, t, op)); break;
    case Kind::all_to_all: works.push_back(comm_.all_to_all_async(call_in_, call_out_, count_, t)); break;
    case Kind::gather: works.push_back(comm_.gather_async(call_in_, call_out_, count_, t, root)); break;
    case Kind::scatter: works.push_back(comm_.scatter_async(call_in_, call_out_, count_, t, root)); break;
    case Kind::sendrecv:
      if (rank_ % 2 == 0) {
        works.push_back(comm_.send_async(call_in_, count_, t, next()));
        works.push_back(comm_.recv_async(call_out_, count_, t, previous()));
      } else {
        works.push_back(comm_.recv_async(call_out_, count_, t, previous()));
        works.push_back(comm_.send_async(call_in_, count_, t, next()));
      }
      break;
    default: break;  // the uneven kinds run as their even form
  }
}

// The uneven call with equal counts (blocks packed in rank order): blocking,
// or started into `works`.
void Case::start_uneven(std::vector<braid::Work>* works) {
  const auto t = o_.type;
  const int root = o_.root;
  const std::span<const std::size_t> counts = counts_, packed;
  std::optional<braid::Work> w;
  switch (call_) {
    case Kind::all_to_allv:
      if (works) w = comm_.all_to_allv_async(call_in_, counts, packed, call_out_, counts, packed, t);
      else comm_.all_to_allv(call_in_, counts, packed, call_out_, counts, packed, t);
      break;
    case Kind::all_gatherv:
      if (works) w = comm_.all_gatherv_async(call_in_, count_, call_out_, counts, packed, t);
      else comm_.all_gatherv(call_in_, count_, call_out_, counts, packed, t);
      break;
    case Kind::reduce_scatterv:
      if (works) w = comm_.reduce_scatterv_async(call_in_, call_out_, counts, t, o_.op);
      else comm_.reduce_scatterv(call_in_, call_out_, counts, t, o_.op);
      break;
    case Kind::gatherv:
      if (works) w = comm_.gatherv_async(call_in_, count_, call_out_, counts, packed, t, root);
      else comm_.gatherv(call_in_, count_, call_out_, counts, packed, t, root);
      break;
    case Kind::scatterv:
      if (works) w = comm_.scatterv_async(call_in_, counts, packed, call_out_, count_, t, root);
      else comm_.scatterv(call_in_, counts, packed, call_out_, count_, t, root);
      break;
    default: break;
  }
  if (works != nullptr && w) works->push_back(std::move(*w));
}

// Poisons the output, then writes this rank's input (which in place
// overlaps the output).
void Case::prepare() {
  namespace check = braid::check;
  std::memset(out_, 0xcd, out_elements_ * element_);
  const auto t = o_.type;
  switch (kind_) {
    case Kind::all_reduce:
    case Kind::reduce: check::fill_reduce_input(t, o_.op, rank_, in_, count_); break;
    case Kind::reduce_scatter: check::fill_reduce_input(t, o_.op, rank_, in_, total_); break;
    case Kind::broadcast:
      if (rank_ == o_.root) check::fill_broadcast_input(t, o_.root, in_, count_);
      break;
    case Kind::all_gather:
    case Kind::gather: check::fill_block(t, rank_, rank_, in_, count_); break;
    case Kind::all_to_all: check::fill_all_to_all_input(t, rank_, n_, in_, count_); break;
    case Kind::scatter:
      if (rank_ == o_.root) check::fill_all_to_all_input(t, o_.root, n_, in_, count_);
      break;
    case Kind::sendrecv: check::fill_block(t, rank_, next(), in_, count_); break;
    default: break;  // the uneven kinds run as their even form
  }
  buffers_.to_device(size_bytes());
}

// Elements of this rank's output that differ from the expected values
// (only the root's output counts for reduce and gather).
std::size_t Case::count_wrong() const {
  namespace check = braid::check;
  buffers_.to_host(size_bytes());
  const auto t = o_.type;
  const bool root = rank_ == o_.root;
  switch (kind_) {
    case Kind::all_reduce: return check::count_wrong_reduce(t, o_.op, n_, out_, count_);
    case Kind::reduce: return root ? check::count_wrong_reduce(t, o_.op, n_, out_, count_) : 0;
    case Kind::broadcast: return check::count_wrong_broadcast(t, o_.root, out_, count_);
    case Kind::all_gather: return check::count_wrong_gather(t, n_, out_, count_);
    case Kind::gather: return root ? check::count_wrong_gather(t, n_, out_, count_) : 0;
    case Kind::reduce_scatter: return check::count_wrong_reduce_scatter(t, o_.op, rank_, n_, out_, count_);
    case Kind::all_to_all: return check::count_wrong_all_to_all(t, rank_, n_, out_, count_);
    case Kind::scatter: return check::count_wrong_block(t, o_.root, rank_, out_, count_);
    case Kind::sendrecv: return check::count_wrong_block(t, previous(), rank_, out_, count_);
    default: break;  // the uneven kinds run as their even form
  }
  return 0;
}

}  // namespace braid::perf
