#include "transport/ucx/ucx_context.hpp"

#include <unistd.h>
#include <uct/api/uct.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

[[noreturn]] void init_failed(std::string_view what, ucs_status_t status) {
  throw SystemError(cat("ucx: ", what, " failed: ", ucs_status_string(status),
                        "; UCX found no usable transport or device (check `ucx_info -d`, UCX_TLS and "
                        "UCX_NET_DEVICES), or leave ucx out of BRAID_TRANSPORT"));
}

// UCX_TLS as UCX read it (from the environment or its configuration file).
std::string configured_transports(const ucp_config_t* config) {
  char* text = nullptr;
  std::size_t size = 0;
  FILE* out = ::open_memstream(&text, &size);
  if (out == nullptr) return "";
  ucp_config_print(config, out, nullptr, UCS_CONFIG_PRINT_CONFIG);
  std::fclose(out);
  std::string all(text, size);
  std::free(text);
  auto at = all.find("UCX_TLS=");
  if (at == std::string::npos) return "";
  auto end = all.find('\n', at);
  return all.substr(at + 8, end == std::string::npos ? std::string::npos : end - at - 8);
}

// Whether UCX_TLS allows UCX's shared-memory transports.
bool may_use_shared_memory(const std::string& tls) {
  if (tls.empty()) return true;
  const bool negated = tls[0] == '^';
  for (std::string_view name : {"all", "sm", "shm", "mm", "posix", "sysv", "xpmem"})
    for (std::size_t i = 0; (i = tls.find(name, i)) != std::string::npos; i += name.size()) {
      const bool starts = i == 0 || tls[i - 1] == ',' || tls[i - 1] == '^';
      const bool ends = i + name.size() == tls.size() || tls[i + name.size()] == ',';
      if (starts && ends) return !negated;
    }
  return negated;
}

}  // namespace

std::shared_ptr<UcxContext> UcxContext::get() {
  static std::mutex mutex;
  static std::weak_ptr<UcxContext> current;
  std::lock_guard lock(mutex);
  auto context = current.lock();
  if (!context || context->pid_ != ::getpid()) {
    context = std::shared_ptr<UcxContext>(new UcxContext());
    current = context;
  }
  return context;
}

UcxContext::UcxContext() : pid_(::getpid()) {
  ucp_config_t* config = nullptr;
  if (auto s = ucp_config_read(nullptr, nullptr, &config); s != UCS_OK) init_failed("reading UCX's configuration", s);
  // UCX's shared-memory transports offer peer-failure handling only when
  // asked, and an endpoint in UCX's peer-failure mode cannot use them
  // otherwise. Endpoints to peers this process can watch through a pidfd go
  // without that mode (ucx_transport.cpp); this is for the others that
  // still share the machine, e.g. a peer in another PID namespace.
  // (Only where UCX_TLS lets it use them: UCX warns of the setting otherwise.)
  const std::string tls = configured_transports(config);
  shared_memory_ = may_use_shared_memory(tls);
  if (shared_memory_)
    if (auto s = ucp_config_modify(config, "MM_ERROR_HANDLING", "y"); s != UCS_OK)
      log_info("ucx: cannot ask for error handling on shared memory (", ucs_status_string(s), ")");
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = "braid";
  ucs_status_t s = ucp_init(&params, config, &context_);
  ucp_config_release(config);
  if (s != UCS_OK) init_failed("ucp_init", s);

  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  if (s = ucp_worker_create(context_, &wp, &worker_); s != UCS_OK) {
    ucp_cleanup(context_);
    init_failed("ucp_worker_create", s);
  }
  if (s = ucp_worker_get_efd(worker_, &efd_); s != UCS_OK) {
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
    init_failed("ucp_worker_get_efd", s);
  }
  ucp_am_handler_param_t handler{};
  handler.field_mask =
      UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG |
      UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
  handler.id = kUcxMessageId;
  handler.cb = &UcxContext::on_message;
  handler.arg = this;
  handler.flags = UCP_AM_FLAG_WHOLE_MSG;
  if (s = ucp_worker_set_am_recv_handler(worker_, &handler); s != UCS_OK) {
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
    init_failed("ucp_worker_set_am_recv_handler", s);
  }
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  if (s = ucp_worker_get_address(worker_, &address, &length); s != UCS_OK) {
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
    init_failed("ucp_worker_get_address", s);
  }
  const auto* bytes = reinterpret_cast<const std::byte*>(address);
  address_.assign(bytes, bytes + length);
  ucp_worker_release_address(worker_, address);
  transports_ = cat("UCX ", ucp_get_version_string(), ", UCX_TLS=", tls.empty() ? "?" : tls);
  log_info("ucx: worker ready (", transports_, ")");
}

UcxContext::~UcxContext() {
  if (pid_ != ::getpid()) return;  // a forked child's copy: the parent's to clean
  {
    std::lock_guard lock(mutex_);
    for (auto& [key, inbox] : inboxes_)
      inbox->arrivals.drain([&](UcxArrival& arrival) { release(arrival); });
    inboxes_.clear();
    routes_.assign(1, nullptr);
    last_inbox_ = nullptr;
    for (auto& op : orphans_)
      if (op->request != nullptr && !op->done) ucp_request_cancel(worker_, op->request);
    close_peers_locked();
    for (int i = 0; i < 100 && ucp_worker_progress(worker_) > 0; ++i) {
    }
    // Whatever is still unfinished goes back to UCX unfinished: the worker
    // refuses to go while it holds requests of ours.
    for (auto& op : orphans_)
      if (op->request != nullptr) ucp_request_free(op->request);
    orphans_.clear();
  }
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
}

std::shared_ptr<UcxInbox> UcxContext::inbox(const std::array<std::byte, 16>& comm_id, int to, int from) {
  auto& slot = inboxes_[Key{comm_id, to, from}];
  if (!slot) {
    slot = std::make_shared<UcxInbox>();
    slot->route = static_cast<std::uint32_t>(routes_.size());
    routes_.push_back(slot.get());
  }
  return slot;
}

UcxInbox& UcxContext::inbox_for(const UcxWireHeader& h) {
  if (last_inbox_ == nullptr || std::get<1>(last_key_) != h.to || std::get<2>(last_key_) != h.from ||
      std::get<0>(last_key_) != h.comm_id) {
    last_inbox_ = inbox(h.comm_id, h.to, h.from).get();
    last_key_ = Key{h.comm_id, h.to, h.from};
  }
  return *last_inbox_;
}

void UcxContext::drop_inbox(const std::array<std::byte, 16>& comm_id, int to, int from) {
  last_inbox_ = nullptr;
  auto it = inboxes_.find(Key{comm_id, to, from});
  if (it == inboxes_.end()) return;
  it->second->arrivals.drain([&](UcxArrival& arrival) { release(arrival); });
  routes_[it->second->route] = nullptr;
  inboxes_.erase(it);
}

namespace {

void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) { static_cast<UcxPeer*>(arg)->status = status; }

}  // namespace

std::shared_ptr<UcxPeer> UcxContext::peer(const std::vector<std::byte>& address, ucp_err_handling_mode_t mode,
                                          ucs_status_t& error) {
  const std::string key(reinterpret_cast<const char*>(address.data()), address.size());
  auto& slot = peers_[key];
  if (slot) return slot;
  auto p = std::make_shared<UcxPeer>();
  p->err_mode = mode;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = reinterpret_cast<const ucp_address_t*>(address.data());
  params.err_mode = mode;
  params.err_handler.cb = &on_endpoint_error;
  params.err_handler.arg = p.get();  // the map keeps it while the endpoint lives
  error = ucp_ep_create(worker_, &params, &p->ep);
  if (error != UCS_OK) {
    peers_.erase(key);
    return nullptr;
  }
  slot = std::move(p);
  return slot;
}

void UcxContext::close_peers_locked() {
  // Flushes what is still in flight to live peers over a peer-failure
  // endpoint (a socket or RDMA to another host), for at most a second in
  // all. The others are left for the worker to destroy: UCX refuses to
  // force an endpoint shut outside that mode and logs a flush to a peer
  // that is gone as an error (at the end of most jobs a peer exits first).
  std::vector<void*> closing;
  for (auto& [address, p] : peers_) {
    if (p->ep == nullptr || p->err_mode != UCP_ERR_HANDLING_MODE_PEER) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = p->status == UCS_OK ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(p->ep, &param);
    p->ep = nullptr;
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) closing.push_back(r);
  }
  const auto until = Clock::now() + std::chrono::seconds(1);
  while (!closing.empty() && Clock::now() < until) {
    ucp_worker_progress(worker_);
    std::erase_if(closing, [](void* r) {
      if (ucp_request_check_status(r) == UCS_INPROGRESS) return false;
      ucp_request_free(r);
      return true;
    });
  }
  for (void* r : closing) ucp_request_free(r);  // UCX frees it when it completes
}

void UcxContext::release(UcxArrival& arrival) {
  if (arrival.data != nullptr) ucp_am_data_release(worker_, arrival.data);
  arrival.data = nullptr;
}

namespace {

// How much of an eager payload the handler asks for ahead (on_message).
constexpr std::size_t kPrefetchBytes = 4096;

// Files a message's payload in its arrival: UCX's data kept (a rendezvous
// descriptor, or eager data past kInlineBytes that UCX lets braid hold),
// else a copy (into the arrival itself up to kInlineBytes: a short message
// then holds none of UCX's descriptors while it waits for its receive).
ucs_status_t keep_payload(UcxArrival& a, void* data, std::size_t length, const ucp_am_recv_param_t* param) {
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  const bool kept = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_DATA) != 0 && length > UcxArrival::kInlineBytes;
  a.length = length;
  a.rendezvous = rendezvous;
  if (rendezvous || kept) {
    a.data = data;
    return UCS_INPROGRESS;
  }
  if (length > 0) {
    const auto* bytes = static_cast<const std::byte*>(data);
    if (length <= UcxArrival::kInlineBytes) std::memcpy(a.inline_copy.data(), bytes, length);
    else a.copy.assign(bytes, bytes + length);
  }
  return UCS_OK;
}

}  // namespace

ucs_status_t UcxContext::on_message(void* arg, const void* header, std::size_t header_length, void* data,
                                    std::size_t length, const ucp_am_recv_param_t* param) {
  auto* self = static_cast<UcxContext*>(arg);
  const bool rendezvous = (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) != 0;
  // UCX puts braid's header after the payload: reading it first would wait
  // for its cache line from the sender's core, then for the payload's, one
  // after the other. The payload's lines are asked for first, so the two
  // waits overlap (2 ranks, posix,cma, 512-byte all-reduce, this VM's slow
  // state: 1.41 us against Open MPI's 1.04 without, 1.22-1.25 against
  // 1.11-1.32 with).
  if (!rendezvous && data != nullptr) {
    const auto* p = static_cast<const char*>(data);
    for (std::size_t at = 0; at < std::min<std::size_t>(length, kPrefetchBytes); at += 64) __builtin_prefetch(p + at);
  }
  if (header_length == sizeof(UcxShortHeader)) return self->on_short_message(header, data, length, param);
  if (header_length != sizeof(UcxWireHeader)) {
    log_warn("ucx: dropped a message with a ", header_length, "-byte header (not braid's, or another version)");
    return UCS_OK;
  }
  UcxWireHeader h;
  std::memcpy(&h, header, sizeof h);
  UcxInbox* inbox = &self->inbox_for(h);
  if (h.message.tag == kUcxHelloTag) {
    inbox->greeted = true;
    inbox->peer_route = static_cast<std::uint32_t>(h.sequence);  // a hello's number is its sender's route
    return UCS_OK;
  }
  if (h.message.tag == kGoodbyeTag) {
    inbox->said_goodbye = true;
    return UCS_OK;
  }
  if (h.message.tag == kAbortTag) {
    // A notice is small and travels eagerly; its text is copied at once.
    if (!rendezvous && data != nullptr) inbox->notice.assign(static_cast<const char*>(data), std::min(length, kMaxAbortReason));
    inbox->noticed = true;
    return UCS_OK;
  }
  UcxArrival* a = inbox->arrivals.put(h.sequence, h.message);
  if (a == nullptr) {
    log_warn("ucx: rank ", h.to, " got message #", h.sequence, " from rank ", h.from, " twice; dropped the second");
    return UCS_OK;
  }
  return keep_payload(*a, data, length, param);
}

ucs_status_t UcxContext::on_short_message(const void* header, void* data, std::size_t length,
                                          const ucp_am_recv_param_t* param) {
  UcxShortHeader h;
  std::memcpy(&h, header, sizeof h);
  UcxInbox* inbox = h.route < routes_.size() ? routes_[h.route] : nullptr;
  if (inbox == nullptr) {
    // Its link is gone here (what the peer sends it from now on is not
    // wanted), or the route was never this process's.
    log_trace("ucx: dropped a message for route ", h.route, ", which no link here has");
    return UCS_OK;
  }
  UcxArrival* a = inbox->arrivals.put_following(h.sequence, h.tag, length);
  if (a == nullptr) {
    log_warn("ucx: got a message with number ", h.sequence, " (low 32 bits) on route ", h.route,
             " twice; dropped the second");
    return UCS_OK;
  }
  return keep_payload(*a, data, length, param);
}

bool UcxContext::progress_locked() {
  bool any = false;
  while (ucp_worker_progress(worker_) != 0) any = true;
  if (any) ++activity_;
  if (!orphans_.empty())
    std::erase_if(orphans_, [&](std::unique_ptr<UcxOp>& op) {
      if (!op->done) return false;
      if (op->request != nullptr) ucp_request_free(op->request);
      return true;
    });
  return any;
}

bool UcxContext::active_within(Clock::duration span) {
  const auto now = Clock::now();
  if (activity_ != stamped_activity_) {
    stamped_activity_ = activity_;
    last_activity_ = now;
  }
  return now - last_activity_ < span;
}

UcxArrival* UcxArrivals::claim(std::uint64_t sequence) {
  if (sequence < base_) return nullptr;
  if (sequence - base_ >= slots_.size()) grow(sequence - base_ + 1);
  Slot& s = slot(sequence);
  if (s.state != State::empty) return nullptr;
  s.state = State::held;
  return &s.arrival;
}

UcxArrival* UcxArrivals::put(std::uint64_t sequence, const MessageHeader& header) {
  UcxArrival* a = claim(sequence);
  if (a == nullptr) return nullptr;
  a->header = header;
  pass_on(sequence);
  return a;
}

UcxArrival* UcxArrivals::put_following(std::uint32_t low, std::uint64_t tag, std::uint64_t bytes) {
  // The full number is the one nearest the ring's front with these low
  // bits; one from before the front (a late copy) is refused.
  const std::uint32_t ahead = low - static_cast<std::uint32_t>(base_);
  if (ahead >= (std::uint32_t{1} << 31)) return nullptr;
  const std::uint64_t sequence = base_ + ahead;
  UcxArrival* a = claim(sequence);
  if (a == nullptr) return nullptr;
  a->header.tag = tag;
  a->header.bytes = bytes;
  if (const auto* context = before(sequence)) {
    a->header.context = *context;
    pass_on(sequence);
  } else {
    slot(sequence).state = State::following;
  }
  return a;
}

const std::array<std::byte, 16>* UcxArrivals::before(std::uint64_t sequence) {
  if (sequence == 0) return nullptr;
  if (sequence == base_) return &retired_context_;
  const Slot& s = slot(sequence - 1);
  return s.state == State::held || s.state == State::taken ? &s.arrival.header.context : nullptr;
}

void UcxArrivals::pass_on(std::uint64_t sequence) {
  for (std::uint64_t next = sequence + 1; next - base_ < slots_.size(); ++next) {
    Slot& s = slot(next);
    if (s.state != State::following) return;
    s.arrival.header.context = slot(next - 1).arrival.header.context;
    s.state = State::held;
  }
}

UcxArrival* UcxArrivals::find(std::uint64_t sequence) {
  if (sequence < base_ || sequence - base_ >= slots_.size()) return nullptr;
  Slot& s = slot(sequence);
  return s.state == State::held ? &s.arrival : nullptr;
}

UcxArrival UcxArrivals::take(std::uint64_t sequence) {
  UcxArrival taken = std::move(slot(sequence).arrival);
  remove(sequence);
  return taken;
}

void UcxArrivals::remove(std::uint64_t sequence) {
  Slot& s = slot(sequence);
  s.arrival.data = nullptr;
  s.arrival.copy = {};
  s.state = State::taken;
  // Receives may finish out of order (a later eager one before an earlier
  // rendezvous): the ring moves on past every taken slot at its front,
  // keeping the last one's descriptor for a short header after it.
  while (!slots_.empty() && slot(base_).state == State::taken) {
    retired_context_ = slot(base_).arrival.header.context;
    slot(base_).state = State::empty;
    ++base_;
  }
}

void UcxArrivals::grow(std::uint64_t span) {
  std::size_t size = std::max<std::size_t>(16, slots_.size());
  while (size < span) size *= 2;
  std::vector<Slot> larger(size);
  for (std::uint64_t k = base_; k < base_ + slots_.size(); ++k) larger[k & (size - 1)] = std::move(slot(k));
  slots_ = std::move(larger);
}

bool UcxContext::arm_locked() {
  ucs_status_t s = ucp_worker_arm(worker_);
  if (s == UCS_ERR_BUSY) return false;
  if (s != UCS_OK) {
    // Nothing to sleep on: the engine naps briefly instead.
    return false;
  }
  return true;
}

bool ucx_sees_rdma() {
  static const bool seen = [] {
    uct_component_h* components = nullptr;
    unsigned count = 0;
    if (uct_query_components(&components, &count) != UCS_OK) return false;
    bool found = false;
    for (unsigned i = 0; i < count && !found; ++i) {
      uct_component_attr_t attr{};
      attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
      if (uct_component_query(components[i], &attr) != UCS_OK) continue;
      // The "ib" component has one memory domain per InfiniBand/RoCE device.
      found = std::string_view(attr.name) == "ib" && attr.md_resource_count > 0;
    }
    uct_release_component_list(components);
    return found;
  }();
  return seen;
}

}  // namespace braid
