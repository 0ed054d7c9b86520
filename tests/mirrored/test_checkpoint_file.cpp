// The checkpoint file (mirrored/checkpoint_file.hpp; its hash is tested in
// test_content_hash.cpp). Everything written reads back, and its checksum is
// the one xxhsum computes; a file of format 1 (the old checksum), written by
// the braid before XXH3, still reads; every single corrupted byte
// and every truncation of a small file is refused by name, never a crash or a
// huge allocation (this runs under ASan); lengths corrupted with a valid
// checksum are caught by the structure checks alone; I/O failures name the
// path and leave neither a .tmp file nor a damaged old checkpoint. The public
// reader, inspect_checkpoint, reads a file beside a half-written .tmp and
// refuses a corrupted one.
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include "braid/mirrored.hpp"
#include "braid/types.hpp"
#include "checkpoint_file.hpp"
#include "byte_patterns.hpp"
#include "checksum_v1.hpp"
#include "content_hash.hpp"

namespace braid::mirrored {
namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;

class TempDir {
 public:
  TempDir() {
    std::string name = (fs::temp_directory_path() / "braid_ckpt_XXXXXX").string();
    REQUIRE(::mkdtemp(name.data()) != nullptr);
    path_ = name;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    fs::permissions(path_, fs::perms::owner_all, fs::perm_options::add, ignored);
    fs::remove_all(path_, ignored);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

Bytes read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

void write_file(const std::string& path, std::span<const std::byte> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out);
}

// Little-endian field patching, with the checksum recomputed afterwards so
// that only the structure checks stand between the reader and the value.
template <typename T>
void patch(Bytes& file, std::size_t offset, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i)
    file[offset + i] = static_cast<std::byte>((static_cast<std::make_unsigned_t<T>>(value) >> (8 * i)) & 0xff);
}
void reseal(Bytes& file) {
  const std::size_t body = file.size() - 8;
  patch<std::uint64_t>(file, body, content_hash(std::span(file).first(body)));
}

CheckpointEntry entry(std::string name, DataType type, std::vector<std::int64_t> shape, std::uint64_t seed) {
  std::size_t count = 1;
  for (auto d : shape) count *= static_cast<std::size_t>(d);
  return {std::move(name), type, std::move(shape), pattern(count * size_of(type), seed)};
}

CheckpointContents sample_contents() {
  CheckpointContents contents;
  contents.model = "MirroredStrategy(resnet-tiny) replicas=4";
  contents.step = 123456789012;
  contents.epoch = 17;
  contents.batch_in_epoch = 42;
  contents.replicas = 4;
  contents.entries = {
      entry("dense/kernel", DataType::f32, {2, 3}, 1),
      entry("dense/bias", DataType::f16, {3}, 2),
      entry("global_step_scale", DataType::f64, {}, 3),  // a scalar
      entry("empty", DataType::i32, {0, 4}, 4),          // zero-size
      entry("embedding", DataType::bf16, {3, 1, 2}, 5),
      entry("counts", DataType::u64, {1}, 6),
      entry("mask", DataType::u8, {5}, 7),
      entry("ids", DataType::i64, {2}, 8),
      entry("q", DataType::i8, {3}, 9),
      entry("h", DataType::u32, {1, 1}, 10),
  };
  contents.fingerprint = fingerprint_of(contents.entries);
  return contents;
}

// A small file: every byte of it gets corrupted in turn.
CheckpointContents small_contents() {
  CheckpointContents contents;
  contents.model = "m";
  contents.step = 5;
  contents.epoch = 1;
  contents.batch_in_epoch = 2;
  contents.replicas = 2;
  contents.entries = {entry("w", DataType::f32, {2}, 11), entry("s", DataType::i8, {}, 12)};
  contents.fingerprint = fingerprint_of(contents.entries);
  return contents;
}

void require_equal(const CheckpointContents& a, const CheckpointContents& b) {
  CHECK(a.model == b.model);
  CHECK(a.fingerprint == b.fingerprint);
  CHECK(a.step == b.step);
  CHECK(a.epoch == b.epoch);
  CHECK(a.batch_in_epoch == b.batch_in_epoch);
  CHECK(a.replicas == b.replicas);
  REQUIRE(a.entries.size() == b.entries.size());
  for (std::size_t i = 0; i < a.entries.size(); ++i) {
    CAPTURE(i, a.entries[i].name);
    CHECK(a.entries[i].name == b.entries[i].name);
    CHECK(a.entries[i].type == b.entries[i].type);
    CHECK(a.entries[i].shape == b.entries[i].shape);
    CHECK(a.entries[i].data == b.entries[i].data);
  }
}

// The error a read throws: its code and message.
struct Refusal {
  ErrorCode code;
  std::string message;
};
Refusal refusal(const std::string& path) {
  try {
    read_checkpoint_file(path);
  } catch (const Error& e) {
    return {e.code(), e.what()};
  } catch (const std::exception& e) {
    FAIL("not a braid::Error: " << e.what());
  }
  FAIL("read_checkpoint_file accepted '" << path << "'");
  return {};
}

}  // namespace

// ------------------------------------------------------------- checkpoint file

TEST_CASE("checkpoint: everything written reads back", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("model.ckpt");
  const auto contents = sample_contents();
  write_checkpoint_file(path, contents);
  CHECK_FALSE(fs::exists(path + ".tmp"));
  require_equal(read_checkpoint_file(path), contents);

  SECTION("overwriting an existing checkpoint") {
    auto next = contents;
    next.step += 1;
    next.entries.pop_back();
    next.model = "";
    write_checkpoint_file(path, next);
    CHECK_FALSE(fs::exists(path + ".tmp"));
    require_equal(read_checkpoint_file(path), next);
  }
  SECTION("no entries, negative and extreme metadata") {
    CheckpointContents empty;
    empty.step = -1;
    empty.epoch = std::numeric_limits<std::int64_t>::max();
    empty.batch_in_epoch = std::numeric_limits<std::int64_t>::min();
    empty.replicas = -7;
    empty.fingerprint = ~std::uint64_t{0};
    write_checkpoint_file(path, empty);
    require_equal(read_checkpoint_file(path), empty);
  }
  SECTION("entries larger than the write and read buffers, and many small ones") {
    CheckpointContents big;
    big.entries.push_back(entry("big", DataType::f32, {3, (1 << 18) + 1}, 21));  // 3 MiB + 12
    for (int i = 0; i < 3000; ++i) big.entries.push_back(entry(std::string("v").append(std::to_string(i)), DataType::u8, {i % 50}, 100 + i));
    big.entries.push_back(entry("after", DataType::f64, {70000}, 22));
    write_checkpoint_file(path, big);
    require_equal(read_checkpoint_file(path), big);
  }
  SECTION("a path without a directory") {
    const auto cwd = fs::current_path();
    fs::current_path(dir.path());
    write_checkpoint_file("relative.ckpt", contents);
    fs::current_path(cwd);
    require_equal(read_checkpoint_file(dir.file("relative.ckpt")), contents);
  }
}

TEST_CASE("checkpoint: the fingerprint covers names, types, shapes and order", "[checkpoint]") {
  const auto base = sample_contents().entries;
  const std::uint64_t fingerprint = fingerprint_of(base);
  auto other_data = base;
  other_data[0].data = pattern(other_data[0].data.size(), 99);
  CHECK(fingerprint_of(other_data) == fingerprint);

  auto renamed = base, retyped = base, reshaped = base, reordered = base, fewer = base;
  renamed[1].name = "dense/bias2";
  retyped[1].type = DataType::bf16;
  reshaped[0].shape = {3, 2};
  std::swap(reordered[0], reordered[1]);
  fewer.pop_back();
  const std::set<std::uint64_t> all = {fingerprint,
                                       fingerprint_of(renamed),
                                       fingerprint_of(retyped),
                                       fingerprint_of(reshaped),
                                       fingerprint_of(reordered),
                                       fingerprint_of(fewer),
                                       fingerprint_of({})};
  CHECK(all.size() == 7);
  // Lengths are encoded, so moving bytes between fields changes the fingerprint.
  const std::vector<CheckpointEntry> ab_c = {{"ab", DataType::u8, {12}, {}}, {"c", DataType::u8, {}, {}}};
  const std::vector<CheckpointEntry> a_bc = {{"a", DataType::u8, {12}, {}}, {"bc", DataType::u8, {}, {}}};
  const std::vector<CheckpointEntry> split = {{"ab", DataType::u8, {1, 2}, {}}, {"c", DataType::u8, {}, {}}};
  CHECK(fingerprint_of(ab_c) != fingerprint_of(a_bc));
  CHECK(fingerprint_of(ab_c) != fingerprint_of(split));
}

TEST_CASE("checkpoint: every corrupted byte is detected", "[checkpoint]") {
  TempDir dir;
  const std::string good = dir.file("good.ckpt");
  const std::string bad = dir.file("bad.ckpt");
  write_checkpoint_file(good, small_contents());
  const Bytes original = read_file(good);
  REQUIRE(original.size() < 200);
  int accepted = 0, unnamed = 0, not_corruption = 0;
  for (std::size_t i = 0; i < original.size(); ++i) {
    for (unsigned mask : {0x01u, 0x80u, 0xffu}) {
      Bytes file = original;
      file[i] ^= static_cast<std::byte>(mask);
      write_file(bad, file);
      try {
        read_checkpoint_file(bad);
        ++accepted;
      } catch (const Error& e) {
        if (std::string(e.what()).find(bad) == std::string::npos) ++unnamed;
        if (e.code() != ErrorCode::protocol && e.code() != ErrorCode::unsupported) ++not_corruption;
      }
    }
  }
  CHECK(accepted == 0);
  CHECK(unnamed == 0);
  CHECK(not_corruption == 0);

  // Data bytes pass the structure checks: only the checksum can catch them.
  Bytes file = original;
  file[file.size() - 9] ^= std::byte{0x10};  // the last byte of entry 's'
  write_file(bad, file);
  const auto checksum = refusal(bad);
  CHECK(checksum.code == ErrorCode::protocol);
  CHECK_THAT(checksum.message, Contains("checkpoint '" + bad + "'") && Contains("checksum mismatch: file says 0x") &&
                                   Contains(", contents hash to 0x") && Contains("the file is corrupted"));
}

TEST_CASE("checkpoint: every truncation is detected", "[checkpoint]") {
  TempDir dir;
  const std::string good = dir.file("good.ckpt");
  const std::string cut = dir.file("cut.ckpt");
  write_checkpoint_file(good, small_contents());
  const Bytes original = read_file(good);
  for (std::size_t size = 0; size < original.size(); ++size) {
    CAPTURE(size);
    write_file(cut, std::span(original).first(size));
    const auto r = refusal(cut);
    CHECK(r.code == ErrorCode::protocol);
    CHECK_THAT(r.message, Contains("checkpoint '" + cut + "'"));
    if (size == 0)
      CHECK_THAT(r.message, Contains("not a braid checkpoint (the file is empty)"));
    else
      CHECK_THAT(r.message, Contains("truncated at byte " + std::to_string(size) + " while reading"));
  }
  // Cut inside entry 'w' (header 48, model 4 + 1, count 8, then the entry).
  write_file(cut, std::span(original).first(48 + 5 + 8 + 4 + 1 + 1 + 4 + 8 + 8 + 3));
  CHECK_THAT(refusal(cut).message, Contains("truncated at byte 90 while reading entry 'w'"));
  // Bytes appended after a good file.
  Bytes longer = original;
  longer.resize(original.size() + 5);
  write_file(cut, longer);
  CHECK_THAT(refusal(cut).message, Contains("5 unexpected bytes after the last of 2 entries"));
}

TEST_CASE("checkpoint: corrupted lengths with a valid checksum", "[checkpoint]") {
  TempDir dir;
  const std::string good = dir.file("good.ckpt");
  const std::string bad = dir.file("bad.ckpt");
  write_checkpoint_file(good, small_contents());
  const Bytes original = read_file(good);
  // Offsets in small_contents()'s file: model "m", then entry 'w' (f32 [2]).
  constexpr std::size_t kModelLength = 48, kCount = 53, kNameLength = 61, kType = 66, kRank = 67, kDim = 71,
                        kDataLength = 79;
  REQUIRE(original[kType] == std::byte{static_cast<std::uint8_t>(DataType::f32)});
  auto refused = [&](auto change) {
    Bytes file = original;
    change(file);
    reseal(file);
    write_file(bad, file);
    return refusal(bad);
  };
  CHECK_THAT(refused([](Bytes& f) { patch<std::uint32_t>(f, kModelLength, 0xffffffff); }).message,
             Contains("truncated at byte") && Contains("while reading the header: model length 4294967295 runs past"));
  CHECK_THAT(refused([](Bytes& f) { patch<std::uint64_t>(f, kCount, std::uint64_t{1} << 62); }).message,
             Contains("truncated at byte 122 while reading entry #2 of 4611686018427387904"));
  CHECK_THAT(refused([](Bytes& f) { patch<std::uint32_t>(f, kNameLength, 0xfffffff0); }).message,
             Contains("while reading entry #0 of 2: name length 4294967280 runs past"));
  CHECK_THAT(refused([](Bytes& f) { patch<std::uint32_t>(f, kRank, 0x7fffffff); }).message,
             Contains("while reading entry 'w': rank 2147483647 x 8 bytes runs past"));
  CHECK_THAT(refused([](Bytes& f) { patch<std::uint8_t>(f, kType, 200); }).message,
             Contains("entry 'w' has data type value 200, not one of 10 types"));
  CHECK_THAT(refused([](Bytes& f) { patch<std::int64_t>(f, kDim, -2); }).message,
             Contains("entry 'w' has shape [-2] of f32, which has a negative dimension or is too large"));
  CHECK_THAT(refused([](Bytes& f) { patch<std::uint64_t>(f, kDataLength, std::uint64_t{1} << 62); }).message,
             Contains("entry 'w' has 4611686018427387904 bytes of data, its shape [2] of f32 needs 8"));
  // A shape and data length that agree but claim far more than the file holds.
  CHECK_THAT(refused([](Bytes& f) {
               patch<std::int64_t>(f, kDim, std::int64_t{1} << 40);
               patch<std::uint64_t>(f, kDataLength, std::uint64_t{1} << 42);
             }).message,
             Contains("while reading entry 'w': data length 4398046511104 runs past"));
  CHECK_THAT(refused([](Bytes& f) { patch<std::int64_t>(f, kDim, std::int64_t{1} << 62); }).message,
             Contains("shape [4611686018427387904] of f32, which has a negative dimension or is too large"));
  const auto version = refused([](Bytes& f) { patch<std::uint32_t>(f, 8, 7); });
  CHECK(version.code == ErrorCode::unsupported);
  CHECK_THAT(version.message, Contains("checkpoint '" + bad + "': format version 7, this build reads 1 to 2"));
}

TEST_CASE("checkpoint: files that are not checkpoints", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("other.bin");
  write_file(path, text_bytes("NOTBRAID and then some more bytes of another format"));
  auto r = refusal(path);
  CHECK(r.code == ErrorCode::protocol);
  CHECK_THAT(r.message, Contains("checkpoint '" + path + "': not a braid checkpoint (magic 'NOTBRAID', expected 'BRAIDCKP')"));
  write_file(path, text_bytes("BR\x01"));
  CHECK_THAT(refusal(path).message, Contains("not a braid checkpoint (magic 'BR\\x01', expected 'BRAIDCKP')"));
  write_file(path, text_bytes("BRAID"));
  CHECK_THAT(refusal(path).message, Contains("truncated at byte 5 while reading the magic"));

  r = refusal(dir.file("missing.ckpt"));
  CHECK(r.code == ErrorCode::system);
  CHECK_THAT(r.message, Contains("checkpoint '" + dir.file("missing.ckpt") + "': cannot open: No such file or directory"));
  r = refusal(dir.path().string());
  CHECK(r.code == ErrorCode::system);
  CHECK_THAT(r.message, Contains("checkpoint '" + dir.path().string() + "': not a regular file"));
}

TEST_CASE("checkpoint: write failures name the path and leave nothing behind", "[checkpoint]") {
  TempDir dir;
  const auto contents = small_contents();
  auto write_error = [&](const std::string& path) -> Refusal {
    try {
      write_checkpoint_file(path, contents);
    } catch (const Error& e) {
      return {e.code(), e.what()};
    }
    FAIL("write_checkpoint_file accepted '" << path << "'");
    return {};
  };

  const std::string missing = dir.file("no/such/dir/model.ckpt");
  auto r = write_error(missing);
  CHECK(r.code == ErrorCode::system);
  CHECK_THAT(r.message, Contains("checkpoint '" + missing + "': cannot create '" + missing + ".tmp'") &&
                            Contains("No such file or directory"));

  const std::string under_file = dir.file("plain");
  write_file(under_file, text_bytes("x"));
  r = write_error(under_file + "/model.ckpt");
  CHECK_THAT(r.message, Contains("'" + under_file + "/model.ckpt.tmp'") && Contains("Not a directory"));

  // Permission bits do not stop root, so this one only runs unprivileged.
  if (::geteuid() != 0) {
    const fs::path locked = dir.path() / "locked";
    fs::create_directory(locked);
    fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
    const std::string path = (locked / "model.ckpt").string();
    r = write_error(path);
    CHECK_THAT(r.message, Contains("cannot create '" + path + ".tmp'") && Contains("Permission denied"));
  }

  SECTION("a failed write keeps the old checkpoint and removes the .tmp") {
    const std::string path = dir.file("model.ckpt");
    write_checkpoint_file(path, contents);
    // Let the file grow to 64 bytes only; writes past that fail with EFBIG
    // (SIGXFSZ ignored) partway through the new checkpoint.
    rlimit saved{};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    auto* previous = ::signal(SIGXFSZ, SIG_IGN);
    rlimit small = saved;
    small.rlim_cur = 64;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
    std::string message;
    try {
      write_checkpoint_file(path, sample_contents());
    } catch (const Error& e) {
      message = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    ::signal(SIGXFSZ, previous);
    CHECK_THAT(message, Contains("checkpoint '" + path + "': cannot write '" + path + ".tmp'") && Contains("large"));
    CHECK_FALSE(fs::exists(path + ".tmp"));
    require_equal(read_checkpoint_file(path), contents);
  }
}

TEST_CASE("checkpoint: entries that do not describe themselves are refused", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("model.ckpt");
  auto refused = [&](std::vector<CheckpointEntry> entries) -> std::string {
    CheckpointContents contents;
    contents.entries = std::move(entries);
    try {
      write_checkpoint_file(path, contents);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    FAIL("write_checkpoint_file accepted the entries");
    return {};
  };
  CHECK_THAT(refused({{"w", DataType::f32, {2, 3}, Bytes(10)}}),
             Contains("checkpoint '" + path + "': entry 'w': data is 10 bytes, shape [2, 3] of f32 needs 24"));
  CHECK_THAT(refused({{"w", DataType::f32, {}, Bytes(0)}}), Contains("entry 'w': data is 0 bytes, shape [] of f32 needs 4"));
  CHECK_THAT(refused({{"w", DataType::f32, {2, -1}, Bytes(0)}}),
             Contains("entry 'w': shape [2, -1] of f32 has a negative dimension or is too large"));
  CHECK_THAT(refused({{"w", static_cast<DataType>(42), {1}, Bytes(1)}}),
             Contains("entry 'w' has data type value 42, not a DataType"));
  CHECK_THAT(refused({{"w", DataType::u8, {1}, Bytes(1)}, {"w", DataType::u8, {1}, Bytes(1)}}),
             Contains("entry 'w' appears twice"));
  CHECK_FALSE(fs::exists(path));
  CHECK_FALSE(fs::exists(path + ".tmp"));
}

TEST_CASE("checkpoint: inspect_checkpoint reads and checks a file without a strategy", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("model.ckpt");
  const auto contents = sample_contents();
  write_checkpoint_file(path, contents);
  // A write killed half-way leaves its .tmp beside the checkpoint, which stays whole.
  const Bytes whole = read_file(path);
  write_file(path + ".tmp", std::span(whole).first(whole.size() / 2));
  const CheckpointInfo info = inspect_checkpoint(path);
  CHECK(info.position.step == contents.step);
  CHECK(info.position.epoch == contents.epoch);
  CHECK(info.position.batch_in_epoch == contents.batch_in_epoch);
  CHECK(info.replicas_when_saved == contents.replicas);
  CHECK(info.model == contents.model);
  REQUIRE(info.variables.size() == contents.entries.size());
  for (std::size_t i = 0; i < info.variables.size(); ++i) CHECK(info.variables[i] == contents.entries[i].name);

  Bytes file = whole;
  file[file.size() - 9] ^= std::byte{0x01};
  write_file(path, file);
  CHECK_THROWS_WITH(inspect_checkpoint(path), Contains("checkpoint '" + path + "'") && Contains("checksum mismatch"));
  CHECK_THROWS_WITH(inspect_checkpoint(dir.file("none.ckpt")), Contains("cannot open"));
}

TEST_CASE("checkpoint: the checksum is XXH3 of the bytes before it, as xxhsum -H3 computes it", "[checkpoint]") {
  TempDir dir;
  const std::string path = dir.file("model.ckpt");
  write_checkpoint_file(path, sample_contents());
  const Bytes file = read_file(path);
  REQUIRE(file.size() > 20);
  CHECK(std::to_integer<int>(file[8]) == int(kCheckpointFormatVersion));
  const auto body = std::span(file).first(file.size() - 8);
  std::uint64_t stored = 0;
  for (std::size_t i = 0; i < 8; ++i) stored |= std::uint64_t(std::to_integer<std::uint8_t>(file[body.size() + i])) << (8 * i);
  CHECK(stored == content_hash(body));
  // A standard tool checks it (scripts/install-deps.sh installs xxhsum).
  const std::string body_path = dir.file("body");
  write_file(body_path, body);
  std::FILE* tool = ::popen(("xxhsum -H3 < '" + body_path + "' 2>&1").c_str(), "r");
  REQUIRE(tool != nullptr);
  char line[256] = {};
  const bool read = std::fgets(line, sizeof line, tool) != nullptr;
  REQUIRE(::pclose(tool) == 0);
  REQUIRE(read);
  char hex[17] = {};
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(stored));
  CHECK_THAT(std::string(line), Contains(std::string("= ") + hex));
}

TEST_CASE("checkpoint: a file of format 1, written by the braid before XXH3, still reads", "[checkpoint]") {
  const std::string old = BRAID_TEST_DIR "/checkpoint_format1.ckpt";
  const Bytes file = read_file(old);
  REQUIRE(std::to_integer<int>(file[8]) == 1);
  const CheckpointContents c = read_checkpoint_file(old);
  CHECK(c.model == "MultiWorkerMirrored checkpoint of 2 variables");
  CHECK((c.step == 400 && c.epoch == 7 && c.batch_in_epoch == 16 && c.replicas == 2));
  REQUIRE(c.entries.size() == 2);
  CHECK(c.entries[0].name == "dense/kernel");
  CHECK(c.entries[0].shape == std::vector<std::int64_t>{2, 3});
  float kernel[6];
  std::memcpy(kernel, c.entries[0].data.data(), sizeof kernel);
  CHECK((kernel[0] == 0.5f && kernel[1] == -1.25f && kernel[5] == 1.0f));
  CHECK(c.entries[1].type == DataType::f64);
  double bias[3];
  std::memcpy(bias, c.entries[1].data.data(), sizeof bias);
  CHECK((bias[0] == 0.125 && bias[1] == -2.5 && bias[2] == 4.0));

  // Its checksum is still checked (format 1's): a changed byte is refused.
  TempDir dir;
  const std::string changed = dir.file("changed.ckpt");
  Bytes bytes = file;
  bytes[bytes.size() - 12] ^= std::byte{1};  // in the last entry's data
  write_file(changed, bytes);
  CHECK_THAT(refusal(changed).message, Contains("checksum mismatch"));
  // Sealed with format 1's checksum, the same change reads: the reader hashes
  // a format-1 file with ChecksumV1, magic and version included.
  ChecksumV1 v1;
  v1.update(std::span(bytes).first(bytes.size() - 8));
  patch<std::uint64_t>(bytes, bytes.size() - 8, v1.digest());
  write_file(changed, bytes);
  CHECK_NOTHROW(read_checkpoint_file(changed));
}

}  // namespace braid::mirrored
