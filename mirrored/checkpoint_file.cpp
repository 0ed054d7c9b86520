// Writing and reading checkpoint files (checkpoint_file.hpp has the layout).
//
// Both sides stream: the writer hashes and writes through a 1 MiB buffer and
// hands large entry data to write() directly, the reader fills each entry's
// data straight from the file, so a checkpoint never sits in memory twice.
// The reader knows the file size up front and checks every length against
// the bytes left before the checksum before allocating or reading, so a
// corrupted length is reported, not trusted.
#include "checkpoint_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>

#include "checksum_v1.hpp"
#include "content_hash.hpp"

namespace braid::mirrored {
namespace {

constexpr std::size_t kChecksumBytes = 8;
constexpr std::size_t kWriteBuffer = std::size_t{1} << 20;
constexpr std::size_t kReadBuffer = std::size_t{64} << 10;

std::string errno_text(int err) { return std::system_category().message(err); }

std::string hex64(std::uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text = "0x";
  for (int shift = 60; shift >= 0; shift -= 4) text += kDigits[(value >> shift) & 0xf];
  return text;
}

// Bytes as text for a message: printable ASCII as is, the rest as \xNN.
std::string printable(std::span<const std::byte> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string text;
  for (std::byte b : bytes) {
    const auto c = std::to_integer<unsigned char>(b);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      text += static_cast<char>(c);
    } else {
      text += "\\x";
      text += kDigits[c >> 4];
      text += kDigits[c & 0xf];
    }
  }
  return text;
}

std::string shape_text(std::span<const std::int64_t> shape) {
  std::string text = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

bool valid_type(std::uint8_t value) { return value < kDataTypeCount; }

// Bytes a shape of a type needs, or nothing when a dimension is negative or
// the product overflows.
std::optional<std::uint64_t> data_bytes(std::span<const std::int64_t> shape, DataType type) {
  std::uint64_t count = 1;
  constexpr auto kMax = std::numeric_limits<std::uint64_t>::max();
  for (std::int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    const auto d = static_cast<std::uint64_t>(dim);
    if (d != 0 && count > kMax / d) return std::nullopt;
    count *= d;
  }
  const std::uint64_t element = size_of(type);
  if (count > kMax / element) return std::nullopt;
  return count * element;
}

class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now and returns the errno of a failed close (0 on success):
  // on some file systems a write error only shows here.
  int close() {
    const int result = ::close(std::exchange(fd_, -1));
    return result == 0 ? 0 : errno;
  }

 private:
  int fd_;
};

// Fixed-width little-endian encoding.
template <typename T>
std::array<std::byte, sizeof(T)> encode(T value) {
  auto bits = static_cast<std::make_unsigned_t<T>>(value);
  std::array<std::byte, sizeof(T)> out;
  for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::byte>((bits >> (8 * i)) & 0xff);
  return out;
}

template <typename T>
T decode(std::span<const std::byte, sizeof(T)> in) {
  std::make_unsigned_t<T> bits = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i)
    bits |= static_cast<std::make_unsigned_t<T>>(std::to_integer<std::uint8_t>(in[i])) << (8 * i);
  return static_cast<T>(bits);
}

std::span<const std::byte> as_bytes(std::string_view text) {
  return {reinterpret_cast<const std::byte*>(text.data()), text.size()};
}

// The bytes of the file in order, hashed on the way and written through a
// buffer; every failure names the checkpoint's path and the file written.
class CheckpointWriter {
 public:
  CheckpointWriter(const std::string& path, const std::string& file, int fd)
      : path_(path), file_(file), fd_(fd) {
    buffer_.reserve(kWriteBuffer);
  }

  template <typename T>
  void put_int(T value) {
    put(encode(value));
  }
  void put_text(std::string_view text) {
    put_int(static_cast<std::uint32_t>(text.size()));
    put(as_bytes(text));
  }
  void put(std::span<const std::byte> bytes) {
    hasher_.update(bytes);
    if (buffer_.size() + bytes.size() > kWriteBuffer) flush();
    if (bytes.size() >= kWriteBuffer) {
      write_all(bytes);
    } else {
      buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
    }
  }
  // The checksum of everything put so far, then the bytes still buffered.
  void finish() {
    const auto checksum = encode(hasher_.digest());
    buffer_.insert(buffer_.end(), checksum.begin(), checksum.end());
    flush();
  }

 private:
  void flush() {
    write_all(buffer_);
    buffer_.clear();
  }
  void write_all(std::span<const std::byte> bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0)
        throw SystemError("checkpoint '" + path_ + "': cannot write '" + file_ + "': " + errno_text(errno));
      bytes = bytes.subspan(static_cast<std::size_t>(n));
    }
  }

  const std::string& path_;
  const std::string& file_;
  int fd_;
  std::vector<std::byte> buffer_;
  ContentHasher hasher_;
};

void check_entries(const std::string& path, const CheckpointContents& contents) {
  const std::string prefix = "checkpoint '" + path + "': ";
  constexpr auto kMaxText = std::numeric_limits<std::uint32_t>::max();
  if (contents.model.size() > kMaxText)
    throw InvalidArgument(prefix + "model description of " + std::to_string(contents.model.size()) +
                          " bytes is longer than the format's limit of " + std::to_string(kMaxText));
  std::set<std::string_view> names;
  for (const auto& entry : contents.entries) {
    const std::string which = prefix + "entry '" + entry.name + "'";
    if (entry.name.size() > kMaxText)
      throw InvalidArgument(which + ": name is longer than " + std::to_string(kMaxText) + " bytes");
    if (!names.insert(entry.name).second) throw InvalidArgument(which + " appears twice");
    const auto type_value = static_cast<std::uint8_t>(entry.type);
    if (!valid_type(type_value))
      throw InvalidArgument(which + " has data type value " + std::to_string(type_value) + ", not a DataType");
    if (entry.shape.size() > kMaxText)
      throw InvalidArgument(which + ": rank " + std::to_string(entry.shape.size()) + " is too large");
    const auto needed = data_bytes(entry.shape, entry.type);
    const std::string shape = shape_text(entry.shape) + " of " + std::string(name_of(entry.type));
    if (!needed)
      throw InvalidArgument(which + ": shape " + shape + " has a negative dimension or is too large");
    if (*needed != entry.data.size())
      throw InvalidArgument(which + ": data is " + std::to_string(entry.data.size()) + " bytes, shape " + shape +
                            " needs " + std::to_string(*needed));
  }
}

// The file's bytes in order through a buffer, hashed on the way, with every
// read checked against the bytes left before the checksum.
class CheckpointReader {
 public:
  CheckpointReader(const std::string& path, int fd, std::uint64_t size)
      : path_(path), fd_(fd), size_(size), buffer_(kReadBuffer) {}

  std::string prefix() const { return "checkpoint '" + path_ + "': "; }
  std::uint64_t position() const { return position_; }
  std::uint64_t size() const { return size_; }
  // Bytes left before the checksum.
  std::uint64_t left() const {
    const std::uint64_t end = size_ >= kChecksumBytes ? size_ - kChecksumBytes : 0;
    return end > position_ ? end - position_ : 0;
  }

  [[noreturn]] void truncated(const std::string& what, const std::string& detail = "") const {
    throw ProtocolMismatch(prefix() + "truncated at byte " + std::to_string(size_) + " while reading " + what +
                           (detail.empty() ? "" : ": " + detail));
  }

  // A length field's value must fit in what is left (times `unit` bytes).
  void check_length(std::uint64_t length, std::uint64_t unit, const std::string& what, const std::string& field) {
    if (length > left() / unit)
      truncated(what, field + " " + std::to_string(length) + (unit > 1 ? " x " + std::to_string(unit) + " bytes" : "") +
                          " runs past the " + std::to_string(left()) +
                          " bytes left before the checksum (the file is cut short or the length is corrupted)");
  }

  // Reads what lies before the checksum, hashing it.
  void get(std::span<std::byte> out, const std::string& what) {
    if (out.size() > left()) truncated(what);
    get_unchecked(out, what, true);
  }
  // The magic and the format version: read before the checksum is known
  // (the version says which), then hashed by start_checksum. The magic is
  // read before the size is known to hold a checksum.
  void get_magic(std::span<std::byte> out) { get_head(out, "the magic"); }
  std::uint32_t get_version() {
    std::array<std::byte, sizeof(std::uint32_t)> bytes;
    if (bytes.size() > left()) truncated("the format version");
    get_head(bytes, "the format version");
    return decode<std::uint32_t>(bytes);
  }
  void start_checksum(std::uint32_t version) {
    if (version == 1) hasher_.emplace<ChecksumV1>();
    else hasher_.emplace<ContentHasher>();
    std::visit([&](auto& h) { h.update(head_); }, hasher_);
  }
  // The last bytes of the file, not hashed.
  void get_checksum(std::span<std::byte> out) {
    if (out.size() > size_ - position_) truncated("the checksum");
    get_unchecked(out, "the checksum", false);
  }
  template <typename T>
  T get_int(const std::string& what) {
    std::array<std::byte, sizeof(T)> bytes;
    get(bytes, what);
    return decode<T>(bytes);
  }
  std::string get_text(const std::string& what, const std::string& field) {
    const auto length = get_int<std::uint32_t>(what);
    check_length(length, 1, what, field);
    std::string text(length, '\0');
    get({reinterpret_cast<std::byte*>(text.data()), text.size()}, what);
    return text;
  }
  std::uint64_t digest() const {
    return std::visit([](const auto& h) { return h.digest(); }, hasher_);
  }

 private:
  void get_unchecked(std::span<std::byte> out, const std::string& what, bool hash) {
    fill(out, what);
    if (hash) std::visit([&](auto& h) { h.update(out); }, hasher_);
    position_ += out.size();
  }
  void get_head(std::span<std::byte> out, const std::string& what) {
    get_unchecked(out, what, false);
    head_.insert(head_.end(), out.begin(), out.end());
  }
  // Copies from the buffer, refilling it, or reads large pieces directly.
  void fill(std::span<std::byte> out, const std::string& what) {
    while (!out.empty()) {
      if (begin_ == end_) {
        if (out.size() >= buffer_.size()) {
          const std::size_t n = read_some(out, what);
          out = out.subspan(n);
          continue;
        }
        end_ = read_some(buffer_, what);
        begin_ = 0;
      }
      const std::size_t n = std::min(out.size(), end_ - begin_);
      std::memcpy(out.data(), buffer_.data() + begin_, n);
      begin_ += n;
      out = out.subspan(n);
    }
  }
  std::size_t read_some(std::span<std::byte> out, const std::string& what) {
    for (;;) {
      const ssize_t n = ::read(fd_, out.data(), out.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw SystemError(prefix() + "cannot read: " + errno_text(errno));
      // The file shrank since it was measured.
      if (n == 0) truncated(what, "the file ended early while being read");
      return static_cast<std::size_t>(n);
    }
  }

  const std::string& path_;
  int fd_;
  std::uint64_t size_;
  std::uint64_t position_ = 0;
  std::vector<std::byte> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::vector<std::byte> head_;  // the magic and the version, hashed once the version is known
  std::variant<ContentHasher, ChecksumV1> hasher_;
};

void read_magic_and_version(CheckpointReader& in) {
  std::array<std::byte, kCheckpointMagic.size()> magic{};
  const std::size_t have = std::min<std::uint64_t>(magic.size(), in.size());
  in.get_magic(std::span(magic).first(have));
  const auto expected = as_bytes(kCheckpointMagic);
  if (!std::equal(magic.begin(), magic.begin() + have, expected.begin()))
    throw ProtocolMismatch(in.prefix() + "not a braid checkpoint (magic '" + printable(std::span(magic).first(have)) +
                           "', expected '" + std::string(kCheckpointMagic) + "')");
  if (in.size() == 0) throw ProtocolMismatch(in.prefix() + "not a braid checkpoint (the file is empty)");
  if (have < magic.size()) in.truncated("the magic");
  const auto version = in.get_version();
  if (version < kOldestCheckpointFormatVersion || version > kCheckpointFormatVersion)
    throw Error(ErrorCode::unsupported, in.prefix() + "format version " + std::to_string(version) +
                                            ", this build reads " + std::to_string(kOldestCheckpointFormatVersion) +
                                            " to " + std::to_string(kCheckpointFormatVersion));
  in.start_checksum(version);
}

CheckpointEntry read_entry(CheckpointReader& in, std::uint64_t index, std::uint64_t count) {
  CheckpointEntry entry;
  const std::string numbered = "entry #" + std::to_string(index) + " of " + std::to_string(count);
  entry.name = in.get_text(numbered, "name length");
  // A corrupted name may hold any bytes; the message shows them escaped.
  const std::string what = "entry '" + printable(as_bytes(entry.name)) + "'";
  const auto type_value = in.get_int<std::uint8_t>(what);
  if (!valid_type(type_value))
    throw ProtocolMismatch(in.prefix() + what + " has data type value " + std::to_string(type_value) + ", not one of " +
                           std::to_string(kDataTypeCount) + " types (the file is corrupted)");
  entry.type = static_cast<DataType>(type_value);
  const auto rank = in.get_int<std::uint32_t>(what);
  in.check_length(rank, sizeof(std::int64_t), what, "rank");
  entry.shape.resize(rank);
  for (auto& dim : entry.shape) dim = in.get_int<std::int64_t>(what);
  const auto length = in.get_int<std::uint64_t>(what);
  const auto needed = data_bytes(entry.shape, entry.type);
  const std::string shape = shape_text(entry.shape) + " of " + std::string(name_of(entry.type));
  if (!needed)
    throw ProtocolMismatch(in.prefix() + what + " has shape " + shape +
                           ", which has a negative dimension or is too large (the file is corrupted)");
  if (*needed != length)
    throw ProtocolMismatch(in.prefix() + what + " has " + std::to_string(length) + " bytes of data, its shape " + shape +
                           " needs " + std::to_string(*needed) + " (the file is corrupted)");
  in.check_length(length, 1, what, "data length");
  entry.data.resize(length);
  in.get(entry.data, what);
  return entry;
}

}  // namespace

void write_checkpoint_file(const std::string& path, const CheckpointContents& contents) {
  check_entries(path, contents);
  const std::string prefix = "checkpoint '" + path + "': ";
  const std::string tmp = path + ".tmp";
  FileDescriptor file(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (file.get() < 0) throw SystemError(prefix + "cannot create '" + tmp + "': " + errno_text(errno));
  try {
    CheckpointWriter out(path, tmp, file.get());
    out.put(as_bytes(kCheckpointMagic));
    out.put_int(kCheckpointFormatVersion);
    out.put_int(contents.fingerprint);
    out.put_int(contents.step);
    out.put_int(contents.epoch);
    out.put_int(contents.batch_in_epoch);
    out.put_int(static_cast<std::int32_t>(contents.replicas));
    out.put_text(contents.model);
    out.put_int(static_cast<std::uint64_t>(contents.entries.size()));
    for (const auto& entry : contents.entries) {
      out.put_text(entry.name);
      out.put_int(static_cast<std::uint8_t>(entry.type));
      out.put_int(static_cast<std::uint32_t>(entry.shape.size()));
      for (std::int64_t dim : entry.shape) out.put_int(dim);
      out.put_int(static_cast<std::uint64_t>(entry.data.size()));
      out.put(entry.data);
    }
    out.finish();
    if (::fsync(file.get()) != 0) throw SystemError(prefix + "cannot fsync '" + tmp + "': " + errno_text(errno));
    if (const int err = file.close(); err != 0)
      throw SystemError(prefix + "cannot close '" + tmp + "': " + errno_text(err));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw SystemError(prefix + "cannot rename '" + tmp + "' over it: " + errno_text(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable only once the directory is synced. File systems that
  // cannot sync a directory say EINVAL; there is nothing more to do on those.
  std::string directory = std::filesystem::path(path).parent_path().string();
  if (directory.empty()) directory = ".";
  FileDescriptor dir(::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0)
    throw SystemError(prefix + "written, but cannot open its directory '" + directory + "' to sync it: " +
                      errno_text(errno));
  if (::fsync(dir.get()) != 0 && errno != EINVAL)
    throw SystemError(prefix + "written, but cannot fsync its directory '" + directory + "': " + errno_text(errno));
}

CheckpointContents read_checkpoint_file(const std::string& path) {
  const std::string prefix = "checkpoint '" + path + "': ";
  FileDescriptor file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (file.get() < 0) throw SystemError(prefix + "cannot open: " + errno_text(errno));
  struct stat status {};
  if (::fstat(file.get(), &status) != 0) throw SystemError(prefix + "cannot stat: " + errno_text(errno));
  if (!S_ISREG(status.st_mode)) throw SystemError(prefix + "not a regular file");

  CheckpointReader in(path, file.get(), static_cast<std::uint64_t>(status.st_size));
  read_magic_and_version(in);
  CheckpointContents contents;
  contents.fingerprint = in.get_int<std::uint64_t>("the header");
  contents.step = in.get_int<std::int64_t>("the header");
  contents.epoch = in.get_int<std::int64_t>("the header");
  contents.batch_in_epoch = in.get_int<std::int64_t>("the header");
  contents.replicas = in.get_int<std::int32_t>("the header");
  contents.model = in.get_text("the header", "model length");
  const auto count = in.get_int<std::uint64_t>("the entry count");
  // The count itself needs no bound: every entry takes at least 17 bytes
  // (name length, type, rank, data length) of a file whose size is known, so
  // a corrupted count ends in a truncation error after at most size / 17
  // entries, and nothing is reserved from it.
  for (std::uint64_t i = 0; i < count; ++i) contents.entries.push_back(read_entry(in, i, count));
  if (in.left() != 0)
    throw ProtocolMismatch(prefix + std::to_string(in.left()) + " unexpected bytes after the last of " +
                           std::to_string(count) + " entries, at byte " + std::to_string(in.position()) +
                           " (the file is corrupted)");
  const std::uint64_t computed = in.digest();
  std::array<std::byte, kChecksumBytes> stored_bytes;
  in.get_checksum(stored_bytes);
  const auto stored = decode<std::uint64_t>(stored_bytes);
  if (stored != computed)
    throw ProtocolMismatch(prefix + "checksum mismatch: file says " + hex64(stored) + ", contents hash to " +
                           hex64(computed) + " — the file is corrupted");
  return contents;
}

std::uint64_t fingerprint_of(std::span<const CheckpointEntry> entries) {
  ContentHasher hasher;
  hasher.update(encode(static_cast<std::uint64_t>(entries.size())));
  for (const auto& entry : entries) {
    hasher.update(encode(static_cast<std::uint32_t>(entry.name.size())));
    hasher.update(as_bytes(entry.name));
    hasher.update(encode(static_cast<std::uint8_t>(entry.type)));
    hasher.update(encode(static_cast<std::uint32_t>(entry.shape.size())));
    for (std::int64_t dim : entry.shape) hasher.update(encode(dim));
  }
  return hasher.digest();
}

}  // namespace braid::mirrored
