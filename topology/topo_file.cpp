#include "topology/topo_file.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "braid/types.hpp"
#include "core/text.hpp"

namespace braid {
namespace {

constexpr std::string_view kMagic = "braid-topology";
constexpr int kVersion = 1;
// Far beyond any job, and a bound on what a bad file makes the reader allocate.
constexpr long long kMaxRanks = 1 << 20;
constexpr unsigned kMaxCpu = 1u << 16;  // CPU numbers up to 65535
constexpr std::size_t kMaxHostname = 255;
constexpr std::array<std::string_view, 9> kRankFields = {"hostname", "host_id", "kernel_id", "host_id_env", "pid",
                                                         "gpus",     "rdma",    "cpus",      "link_mbps"};
// Fields from kOptionalFrom on may be left out (files written before them).
constexpr std::size_t kOptionalFrom = 8;

std::string hex64(std::uint64_t v) {
  std::array<char, 24> text{};
  std::snprintf(text.data(), text.size(), "0x%016llx", static_cast<unsigned long long>(v));
  return text.data();
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> words(std::string_view s) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_space(s[i])) ++i;
    std::size_t j = i;
    while (j < s.size() && !is_space(s[j])) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

// A value quoted in a message: printable, and not a whole XML document.
std::string shown(std::string_view v) {
  std::string out;
  for (char c : v.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (v.size() > 40) out += "...";
  return cat("'", out, "'");
}

// Reads the text line by line and names the line in every error.
class Reader {
 public:
  Reader(std::string_view text, std::string_view name) : text_(text), name_(name) {}

  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    std::size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    line = text_.substr(pos_, end - pos_);
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);  // CRLF files, and stable when written again
    pos_ = end + 1;
    ++line_;
    if (line.find('\0') != std::string_view::npos) fail("a NUL byte: expected text");
    return true;
  }
  int line() const { return line_; }
  [[noreturn]] void fail(std::string_view what) const { fail_at(line_, what); }
  [[noreturn]] void fail_at(int line, std::string_view what) const {
    throw InvalidArgument(cat(name_, ":", line, ": ", what));
  }

 private:
  std::string_view text_;
  std::string_view name_;
  std::size_t pos_ = 0;
  int line_ = 0;
};

template <typename T>
bool whole_number(std::string_view text, T& out, int base = 10) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && end == text.data() + text.size();
}

bool parse_u64(std::string_view text, std::uint64_t& out) {
  if (text.size() > 2 && text[0] == '0' && (text[1] == 'x' || text[1] == 'X'))
    return whole_number(text.substr(2), out, 16);
  return whole_number(text, out);
}

// The value of one `name=value` field of a rank line.
struct RankFields {
  std::array<std::string_view, kRankFields.size()> values;
  std::array<bool, kRankFields.size()> seen{};
};

RankInfo parse_rank(const Reader& in, const std::vector<std::string_view>& w, long long count,
                    const std::vector<bool>& have) {
  long long rank = -1;
  if (w.size() < 2 || !whole_number(w[1], rank) || rank < 0 || rank >= count)
    in.fail(cat("expected 'rank R' with R a rank from 0 to ", count - 1, ", got ",
                shown(w.size() < 2 ? std::string_view() : w[1])));
  if (have[static_cast<std::size_t>(rank)]) in.fail(cat("rank ", rank, " is described twice"));
  RankFields f;
  for (std::size_t i = 2; i < w.size(); ++i) {
    const auto eq = w[i].find('=');
    if (eq == std::string_view::npos)
      in.fail(cat("rank ", rank, ": expected name=value, got ", shown(w[i])));
    const std::string_view key = w[i].substr(0, eq);
    auto it = std::find(kRankFields.begin(), kRankFields.end(), key);
    if (it == kRankFields.end()) {
      std::string known;
      for (auto k : kRankFields) known += cat(known.empty() ? "" : ", ", k);
      in.fail(cat("rank ", rank, ": unknown field ", shown(key), " (the fields are ", known, ")"));
    }
    const auto k = static_cast<std::size_t>(it - kRankFields.begin());
    if (f.seen[k]) in.fail(cat("rank ", rank, ": field '", key, "' given twice"));
    f.seen[k] = true;
    f.values[k] = w[i].substr(eq + 1);
  }
  for (std::size_t k = 0; k < kOptionalFrom; ++k)
    if (!f.seen[k]) in.fail(cat("rank ", rank, ": field '", kRankFields[k], "' is missing"));
  auto field_error = [&](std::string_view key, std::string_view value, std::string_view expected) {
    in.fail(cat("rank ", rank, ": field '", key, "': expected ", expected, ", got ", shown(value)));
  };
  auto flag = [&](std::size_t k) {
    if (f.values[k] != "0" && f.values[k] != "1") field_error(kRankFields[k], f.values[k], "0 or 1");
    return f.values[k] == "1";
  };
  RankInfo info;
  info.rank = static_cast<int>(rank);
  info.hostname = std::string(f.values[0]);
  if (info.hostname.empty() || info.hostname.size() > kMaxHostname)
    field_error("hostname", f.values[0], cat("a name of 1 to ", kMaxHostname, " characters"));
  if (!parse_u64(f.values[1], info.host_id)) field_error("host_id", f.values[1], "a 64-bit number (0x... or decimal)");
  if (!parse_u64(f.values[2], info.kernel_id))
    field_error("kernel_id", f.values[2], "a 64-bit number (0x... or decimal)");
  info.host_id_from_env = flag(3);
  if (int pid = 0; whole_number(f.values[4], pid) && pid >= 0) info.pid = pid;
  else field_error("pid", f.values[4], "a process id (a whole number from 0)");
  if (unsigned gpus = 0; whole_number(f.values[5], gpus) && gpus <= 255) info.gpus = static_cast<std::uint8_t>(gpus);
  else field_error("gpus", f.values[5], "a count from 0 to 255");
  info.rdma = flag(6);
  try {
    info.cpus = parse_cpu_list(f.values[7], cat("rank ", rank, ": field 'cpus'"));
  } catch (const InvalidArgument& e) {
    in.fail(e.what());
  }
  if (f.seen[8] && !whole_number(f.values[8], info.link_mbps))
    field_error("link_mbps", f.values[8], "a speed in Mbit/s (a whole number; 0: unknown)");
  return info;
}

}  // namespace

std::string cpu_list_of(const std::vector<std::uint64_t>& mask) {
  std::string out;
  const std::size_t bits = mask.size() * 64;
  auto is_set = [&](std::size_t c) { return c < bits && ((mask[c / 64] >> (c % 64)) & 1u); };
  for (std::size_t c = 0; c < bits;) {
    if (!is_set(c)) {
      ++c;
      continue;
    }
    std::size_t last = c;
    while (is_set(last + 1)) ++last;
    out += cat(out.empty() ? "" : ",", c);
    if (last > c) out += cat("-", last);
    c = last + 1;
  }
  return out;
}

std::vector<std::uint64_t> parse_cpu_list(std::string_view text, std::string_view what) {
  std::vector<std::uint64_t> mask;
  auto fail = [&]() -> void {
    throw InvalidArgument(cat(what, ": expected a CPU list such as 0-3,8 (CPUs below ", kMaxCpu, "), got ",
                              shown(text)));
  };
  std::string_view rest = text;
  while (!rest.empty()) {
    const auto comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) fail();  // a trailing comma
    const auto dash = item.find('-');
    unsigned first = 0, last = 0;
    if (!whole_number(item.substr(0, dash), first)) fail();
    last = first;
    if (dash != std::string_view::npos && !whole_number(item.substr(dash + 1), last)) fail();
    if (last < first || last >= kMaxCpu) fail();
    mask.resize(std::max<std::size_t>(mask.size(), last / 64 + 1), 0);
    for (unsigned c = first; c <= last; ++c) mask[c / 64] |= std::uint64_t{1} << (c % 64);
  }
  return mask;
}

std::string format_topo_file(const TopoFile& file) {
  std::string out = cat("# braid topology file: BRAID_TOPO_DUMP_FILE writes it, BRAID_TOPO_FILE and\n",
                        "# braid-topo --load read it (format: topology/topo_file.hpp)\n", kMagic, " ", kVersion,
                        "\nranks ", file.ranks.size(), "\n");
  for (const RankInfo& r : file.ranks)
    out += cat("rank ", r.rank, " hostname=", r.hostname, " host_id=", hex64(r.host_id), " kernel_id=",
               hex64(r.kernel_id), " host_id_env=", r.host_id_from_env ? 1 : 0, " pid=", r.pid, " gpus=", int{r.gpus},
               " rdma=", r.rdma ? 1 : 0, " cpus=", cpu_list_of(r.cpus), " link_mbps=", r.link_mbps, "\n");
  for (const HostMachine& m : file.machines) {
    out += cat("machine host_id=", hex64(m.host_id), "\n", m.xml);
    if (!m.xml.empty() && m.xml.back() != '\n') out += '\n';
    out += "end machine\n";
  }
  if (!file.plan.empty()) {
    out += cat("plan\n", file.plan);
    if (file.plan.back() != '\n') out += '\n';
    out += "end plan\n";
  }
  return out;
}

TopoFile parse_topo_file(std::string_view text, std::string_view name) {
  Reader in(text, name);
  TopoFile file;
  std::string_view line;
  bool header = false;
  long long count = -1;
  std::vector<bool> have;
  bool plan_seen = false;
  while (in.next(line)) {
    const std::string_view t = trimmed(line);
    if (t.empty() || t.front() == '#') continue;
    const auto w = words(t);
    if (!header) {
      int version = 0;
      if (w.size() != 2 || w[0] != kMagic || !whole_number(w[1], version))
        in.fail(cat("expected the header '", kMagic, " ", kVersion, "', got ", shown(t)));
      if (version != kVersion)
        in.fail(cat("version ", version, " of the format; this braid reads version ", kVersion));
      header = true;
      continue;
    }
    if (w[0] == "ranks") {
      if (count >= 0) in.fail("'ranks' given twice");
      if (w.size() != 2 || !whole_number(w[1], count) || count < 1 || count > kMaxRanks)
        in.fail(cat("expected 'ranks N' with N from 1 to ", kMaxRanks, ", got ", shown(t)));
      have.assign(static_cast<std::size_t>(count), false);
    } else if (w[0] == "rank") {
      if (count < 0) in.fail("a 'rank' line before 'ranks N'");
      RankInfo info = parse_rank(in, w, count, have);
      have[static_cast<std::size_t>(info.rank)] = true;
      file.ranks.push_back(std::move(info));
    } else if (w[0] == "machine") {
      HostMachine m;
      if (w.size() != 2 || w[1].substr(0, 8) != "host_id=" || !parse_u64(w[1].substr(8), m.host_id))
        in.fail(cat("expected 'machine host_id=X' (X a 64-bit number), got ", shown(t)));
      for (const HostMachine& other : file.machines)
        if (other.host_id == m.host_id) in.fail(cat("a second machine for host_id ", hex64(m.host_id)));
      const int start = in.line();
      bool ended = false;
      while (in.next(line))
        if (trimmed(line) == "end machine") {
          ended = true;
          break;
        } else {
          m.xml.append(line).append("\n");
        }
      if (!ended) in.fail_at(start, "this machine section has no 'end machine' line");
      if (m.xml.find("<topology") == std::string::npos)
        in.fail_at(start, "expected hwloc XML (a <topology> element) in this machine section");
      file.machines.push_back(std::move(m));
    } else if (w[0] == "plan" && w.size() == 1) {
      if (plan_seen) in.fail("a second plan section");
      plan_seen = true;
      const int start = in.line();
      bool ended = false;
      while (in.next(line))
        if (trimmed(line) == "end plan") {
          ended = true;
          break;
        } else {
          file.plan.append(line).append("\n");
        }
      if (!ended) in.fail_at(start, "this plan section has no 'end plan' line");
    } else {
      in.fail(cat("expected 'ranks', 'rank', 'machine' or 'plan', got ", shown(w[0])));
    }
  }
  if (!header) in.fail(cat("the file is empty: expected the header '", kMagic, " ", kVersion, "'"));
  if (count < 0) in.fail("no 'ranks N' line");
  std::vector<int> missing;
  for (std::size_t r = 0; r < have.size(); ++r)
    if (!have[r]) missing.push_back(static_cast<int>(r));
  if (!missing.empty())
    in.fail(cat("'ranks ", count, "' but no line for ", describe_ranks(missing)));
  std::sort(file.ranks.begin(), file.ranks.end(), [](const RankInfo& a, const RankInfo& b) { return a.rank < b.rank; });
  for (const HostMachine& m : file.machines)
    if (std::none_of(file.ranks.begin(), file.ranks.end(), [&](const RankInfo& r) { return r.host_id == m.host_id; }))
      in.fail(cat("a machine for host_id ", hex64(m.host_id), ", which no rank has"));
  return file;
}

TopoFile read_topo_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(cat("topology file ", path, ": cannot open it (", errno_text(errno), ")"));
  std::ostringstream text;
  text << in.rdbuf();
  return parse_topo_file(text.str(), path);
}

void write_topo_file(const std::string& path, const TopoFile& file) {
  const std::string text = format_topo_file(file);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !out.write(text.data(), static_cast<std::streamsize>(text.size())) || !out.flush())
    throw SystemError(cat("topology file ", path, ": cannot write it (", errno_text(errno), ")"));
}

std::string topo_dump_path(std::string_view pattern, int rank) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i)
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'r') {
      out += cat(rank);
      ++i;
    } else {
      out += pattern[i];
    }
  return out;
}

}  // namespace braid
