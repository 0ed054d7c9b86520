#include "trace_file.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <ctime>

#include "braid/braid.hpp"
#include "comm_impl.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

// The process's file: opened by the first communicator that traces, kept
// until exit (never destroyed: a TraceSpan may end during static destruction).
std::mutex g_open_mutex;
auto* g_file = new std::shared_ptr<TraceFile>;
std::atomic<TraceFile*> g_current{nullptr};

// Tracks: a communicator's operations on tid 64 x track, the lanes of its
// steps (overlapping steps go to separate lanes) on the next 63; the
// application's threads (TraceSpan) from kSpanTid.
constexpr int kLanes = 63;
constexpr int kSpanTid = 100000;

std::string expand(const std::string& pattern, int rank) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size()) {
      const char c = pattern[i + 1];
      if (c == 'r') out += std::to_string(rank), ++i;
      else if (c == 'h') out += hostname(), ++i;
      else if (c == 'p') out += std::to_string(::getpid()), ++i;
      else out += pattern[i];
    } else {
      out += pattern[i];
    }
  }
  return out;
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\', out += c;
    else if (static_cast<unsigned char>(c) < 0x20) out += ' ';
    else out += c;
  }
  return out + "\"";
}

template <typename Integer>
void append_int(std::string& out, Integer value) {
  char text[24];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  out.append(text, end);
}

// Nanoseconds as microseconds with three decimals (trace-event JSON's unit).
void append_us(std::string& out, std::int64_t ns) {
  if (ns < 0) out += '-', ns = -ns;
  append_int(out, ns / 1000);
  const int fraction = static_cast<int>(ns % 1000);
  const char digits[4] = {'.', static_cast<char>('0' + fraction / 100), static_cast<char>('0' + fraction / 10 % 10),
                          static_cast<char>('0' + fraction % 10)};
  out.append(digits, 4);
}

int thread_number() {
  static std::atomic<int> next{0};
  thread_local int number = next.fetch_add(1);
  return number;
}

}  // namespace

std::shared_ptr<TraceFile> TraceFile::open(const std::string& pattern, int rank, int size) {
  std::lock_guard lock(g_open_mutex);
  if (*g_file) return *g_file;
  std::string path = expand(pattern, rank);
  std::FILE* file = std::fopen(path.c_str(), "w+");
  if (file == nullptr)
    throw InvalidArgument(cat("BRAID_TRACE='", pattern, "': cannot write ", path, ": ", errno_text(errno)));
  g_file->reset(new TraceFile(path, file, rank, size));
  g_current.store(g_file->get(), std::memory_order_release);
  // At exit whatever was recorded since the last flush is written (the
  // runtime's own exit handler, registered earlier, then finalizes the
  // communicators, which flush again).
  std::atexit([] {
    if (TraceFile* f = current()) f->flush();
  });
  log_info("rank ", rank, ": writing the trace to ", path);
  return *g_file;
}

TraceFile* TraceFile::current() { return g_current.load(std::memory_order_acquire); }

TraceFile::TraceFile(std::string path, std::FILE* file, int rank, int size)
    : path_(std::move(path)), file_(file), rank_(rank), size_(size), anchor_(TickAnchor::now()) {
  std::fputs("{\"traceEvents\":[\n", file_);
  footer_at_ = std::ftell(file_);
  // The records' buffers are made and touched once, here: recording into
  // them never grows a vector or faults in a page (those cost an 8-byte
  // all-reduce tens of nanoseconds).
  ops_.resize(kFlushOps);
  steps_.resize(kFlushSteps);
}

TraceFile::~TraceFile() {
  flush();
  std::fclose(file_);
}

int TraceFile::add_communicator(std::string name) {
  std::lock_guard lock(mutex_);
  track_names_.push_back(std::move(name));
  lanes_named_.push_back(-1);
  return static_cast<int>(track_names_.size()) - 1;
}

void TraceFile::set_clock(double offset_us, double measured_offset_us, double round_trip_us) {
  std::lock_guard lock(mutex_);
  if (round_trip_us_ >= 0) return;  // the process's first communicator measured it
  offset_us_ = offset_us;
  measured_offset_us_ = measured_offset_us;
  round_trip_us_ = round_trip_us;
}

void TraceFile::record_op(int track, const std::shared_ptr<OpPlan>& plan, const std::string& args,
                          std::uint32_t sequence, std::int64_t queued, std::int64_t begin, std::int64_t end,
                          const std::vector<StepTime>& steps) {
  std::lock_guard lock(mutex_);
  if (!plan->traced) [[unlikely]] {
    plan->traced = true;
    plans_.push_back(plan);
  }
  if (op_count_ == kFlushOps || step_count_ + steps.size() > kFlushSteps) flush_locked();
  // Every step's time, in one copy (the steps that did not run are left
  // out when the JSON is written); a schedule longer than the buffer keeps
  // its operation only.
  const std::size_t kept = steps.size() <= kFlushSteps ? steps.size() : 0;
  ops_[op_count_++] = OpRecord{track, sequence, queued, begin, end, plan.get(), &args, step_count_, kept};
  std::copy(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(kept), steps_.begin() + static_cast<std::ptrdiff_t>(step_count_));
  step_count_ += kept;
}

void TraceFile::record_span(const char* name, std::int64_t begin, std::int64_t end) {
  const int thread = thread_number();
  std::lock_guard lock(mutex_);
  spans_.push_back(SpanRecord{name, thread, begin, end});
  if (spans_.size() >= kFlushOps) flush_locked();
}

void TraceFile::flush() {
  std::lock_guard lock(mutex_);
  flush_locked();
}

void TraceFile::separate(std::string& out) {
  if (any_event_) out += ",\n";
  any_event_ = true;
}

void TraceFile::event(std::string& out, const std::string& body) {
  separate(out);
  out += body;
}

void TraceFile::complete_event(std::string& out, std::string_view cat, std::string_view name, int tid,
                               std::int64_t ts_ns, std::int64_t dur_ns) {
  separate(out);
  out += "{\"ph\":\"X\",\"cat\":\"";
  out += cat;
  if (!name.empty()) {
    out += "\",\"name\":\"";
    out += name;
  }
  out += "\",\"pid\":";
  append_int(out, rank_);
  out += ",\"tid\":";
  append_int(out, tid);
  out += ",\"ts\":";
  append_us(out, ts_ns);
  out += ",\"dur\":";
  append_us(out, dur_ns);
}

void TraceFile::write_op(std::string& out, const OpRecord& op, const TickScale& scale) {
  // Written straight into `out` with to_chars: a long run flushes millions
  // of these, and the driving thread pays for every 65536 operations.
  const std::int64_t begin = scale.to_ns(op.begin), end = scale.to_ns(op.end);
  const int tid = 64 * op.track;
  const std::uint32_t seq = op.sequence & 0x7fffffffu;
  complete_event(out, "op", "", tid, begin, std::max<std::int64_t>(end - begin, 0));
  out += ',';
  out += *op.args;
  out += ",\"seq\":";
  append_int(out, seq);
  out += ",\"p2p\":";
  out += (op.sequence & 0x80000000u) ? "true" : "false";
  out += ",\"id\":";
  append_int(out, ++ops_written_);
  out += ",\"queued_us\":";
  append_us(out, op.queued != 0 ? std::max<std::int64_t>(begin - scale.to_ns(op.queued), 0) : 0);
  out += "}}";
  // Steps overlap (a ring sends and receives at once): each goes to the
  // first lane free at its start, so every lane nests inside the operation.
  lane_end_.clear();
  const auto& steps = op.plan->schedule.steps;
  for (std::size_t k = op.first_step; k < op.first_step + op.steps; ++k) {
    if (steps_[k].end == 0) continue;
    const std::uint32_t index = static_cast<std::uint32_t>(k - op.first_step);
    // Clamped into the operation: a tick and a nanosecond are not the
    // same grain, and a step must not poke out of its operation by one.
    const std::int64_t t_begin = std::clamp(scale.to_ns(steps_[k].begin), begin, end);
    const std::int64_t t_end = std::clamp(scale.to_ns(steps_[k].end), t_begin, end);
    const Step& s = steps[index];
    std::size_t lane = 0;
    while (lane < lane_end_.size() && lane_end_[lane] > t_begin) ++lane;
    if (lane == lane_end_.size()) lane_end_.push_back(0);
    lane_end_[lane] = t_end;
    const int lane_tid = tid + 1 + static_cast<int>(std::min<std::size_t>(lane, kLanes - 1));
    const std::size_t bytes = s.kind == StepKind::send ? s.src.bytes : s.dst.bytes;
    complete_event(out, "step", name_of(s.kind), lane_tid, t_begin, t_end - t_begin);
    out += ",\"args\":{\"op\":";
    append_int(out, ops_written_);
    out += ",\"step\":";
    append_int(out, index);
    out += ",\"peer\":";
    append_int(out, s.peer);
    out += ",\"bytes\":";
    append_int(out, bytes);
    out += "}}";
    if (static_cast<int>(lane) > lanes_named_[static_cast<std::size_t>(op.track)]) {
      for (int l = lanes_named_[static_cast<std::size_t>(op.track)] + 1; l <= static_cast<int>(lane) && l < kLanes; ++l)
        event(out, cat("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":", rank_, ",\"tid\":", tid + 1 + l,
                       ",\"args\":{\"name\":", json_string(cat(track_names_[static_cast<std::size_t>(op.track)], " steps ", l)),
                       "}}"));
      lanes_named_[static_cast<std::size_t>(op.track)] = static_cast<int>(lane);
    }
  }
}

void TraceFile::flush_locked() {
  // Written in pieces of about kWriteChunk: a flush of 65536 operations of
  // a long schedule would otherwise hold its whole JSON in memory.
  std::fseek(file_, footer_at_, SEEK_SET);
  std::string& out = text_;
  out.clear();
  auto write_out = [&] {
    std::fwrite(out.data(), 1, out.size(), file_);
    out.clear();
  };
  if (!named_threads_) {
    named_threads_ = true;
    event(out, cat("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":", rank_, ",\"args\":{\"name\":",
                   json_string(cat("rank ", rank_, " (", hostname(), ":", ::getpid(), ")")), "}}"));
    event(out, cat("{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":", rank_, ",\"args\":{\"sort_index\":", rank_,
                   "}}"));
  }
  for (std::size_t t = 0; t < track_names_.size(); ++t)
    if (thread_names_.size() <= t) {
      thread_names_.push_back(track_names_[t]);
      event(out, cat("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":", rank_, ",\"tid\":", 64 * t,
                     ",\"args\":{\"name\":", json_string(track_names_[t]), "}}"));
    }
  const TickAnchor now = TickAnchor::now();
  const TickScale scale(anchor_, now);
  anchor_ = now;
  for (std::size_t i = 0; i < op_count_; ++i) {
    write_op(out, ops_[i], scale);
    if (out.size() >= kWriteChunk) write_out();
  }
  std::vector<int> span_threads;
  for (const SpanRecord& s : spans_) {
    std::string e = cat("{\"ph\":\"X\",\"cat\":\"app\",\"name\":", json_string(s.name), ",\"pid\":", rank_,
                        ",\"tid\":", kSpanTid + s.thread, ",\"ts\":");
    append_us(e, scale.to_ns(s.begin));
    e += ",\"dur\":";
    append_us(e, std::max<std::int64_t>(scale.to_ns(s.end) - scale.to_ns(s.begin), 0));
    e += "}";
    event(out, e);
    if (std::find(span_threads.begin(), span_threads.end(), s.thread) == span_threads.end()) {
      span_threads.push_back(s.thread);
      event(out, cat("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":", rank_, ",\"tid\":", kSpanTid + s.thread,
                     ",\"args\":{\"name\":\"application thread ", s.thread, "\"}}"));
    }
  }
  op_count_ = 0;
  step_count_ = 0;
  for (auto& plan : plans_) plan->traced = false;
  plans_.clear();
  spans_.clear();
  char footer[512];
  std::snprintf(footer, sizeof footer,
                "\n],\"displayTimeUnit\":\"ns\",\"otherData\":{\"braid_trace\":1,\"rank\":%d,\"size\":%d,\"host\":%s,"
                "\"pid\":%d,\"clock\":\"CLOCK_MONOTONIC\",\"clock_offset_us\":%.3f,\"clock_measured_offset_us\":%.3f,"
                "\"clock_round_trip_us\":%.3f}}\n",
                rank_, size_, json_string(hostname()).c_str(), static_cast<int>(::getpid()), offset_us_, measured_offset_us_, round_trip_us_);
  write_out();
  footer_at_ = std::ftell(file_);
  std::fputs(footer, file_);
  std::fflush(file_);
}

}  // namespace braid

namespace braid {

TraceSpan::TraceSpan(const char* name) noexcept : name_(name), begin_(0) {
  if (TraceFile::current() != nullptr) [[unlikely]] begin_ = ticks();
}

TraceSpan::~TraceSpan() {
  if (begin_ == 0) [[likely]] return;
  if (TraceFile* file = TraceFile::current()) file->record_span(name_, begin_, ticks());
}

}  // namespace braid
