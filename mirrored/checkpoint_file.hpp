// The checkpoint file of the mirrored layer: the variables of a model with the
// training position (step, epoch, batch) in one self-checking file.
//
// A checkpoint is written to path + ".tmp", synced, and renamed over path, so
// a crash leaves either the old file or the new one, never a mix. The reader
// trusts nothing in the file: every length is checked against the bytes that
// are left before anything is allocated, every entry's data size must match
// its shape and type, and a trailing checksum of all preceding bytes (XXH3,
// content_hash.hpp) catches any corruption the structure checks let
// through: a changed byte anywhere, except with probability about 2^-64.
// The checksum is a standard one: `head -c -8 FILE | xxhsum -H3` prints it.
//
// Layout, all integers little-endian:
//
//   bytes  field
//   8      magic "BRAIDCKP"
//   4      u32 format version (kCheckpointFormatVersion)
//   8      u64 fingerprint
//   8      i64 step
//   8      i64 epoch
//   8      i64 batch_in_epoch
//   4      i32 replicas
//   4+m    u32 model length m, then the model text
//   8      u64 entry count, then per entry:
//   4+n      u32 name length n, then the name
//   1        u8 DataType value
//   4+8r     u32 rank r, then r i64 dimensions (rank 0: a scalar)
//   8+d      u64 data length d, then the data
//   8      u64 checksum: content_hash (XXH3 64-bit, seed 0) of every byte before it
//
// Format version 1 is the same with the checksum of ChecksumV1
// (checksum_v1.hpp); the reader still reads it.
//
// The data of an entry is its elements' bytes as the caller holds them
// (little-endian on every machine braid runs on).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "braid/types.hpp"

namespace braid::mirrored {

inline constexpr std::string_view kCheckpointMagic = "BRAIDCKP";
inline constexpr std::uint32_t kCheckpointFormatVersion = 2;  // what the writer writes
inline constexpr std::uint32_t kOldestCheckpointFormatVersion = 1;  // the reader reads from this one up

struct CheckpointEntry {
  std::string name;
  DataType type = DataType::f32;
  std::vector<std::int64_t> shape;  // empty: a scalar
  std::vector<std::byte> data;      // product(shape) * size_of(type) bytes
};

struct CheckpointContents {
  std::string model;              // a free-form model/strategy description line
  std::uint64_t fingerprint = 0;  // hash of the variables' names, types and shapes (fingerprint_of)
  std::int64_t step = 0;          // global step
  std::int64_t epoch = 0;         // where the data iterator stands
  std::int64_t batch_in_epoch = 0;
  int replicas = 0;  // replica count that wrote it (restoring onto another count is allowed)
  std::vector<CheckpointEntry> entries;
};

// Writes atomically: to path + ".tmp", fsync, rename over path, fsync the
// directory. Only one writer per path at a time (they would share the .tmp).
// Throws InvalidArgument naming the entry when an entry's data size is not
// product(shape) * size_of(type), a dimension is negative, its type is not a
// DataType, or two entries share a name; braid::Error (ErrorCode::system)
// naming the path and the errno text when the file system refuses. A failed
// write removes the .tmp file and leaves path as it was.
void write_checkpoint_file(const std::string& path, const CheckpointContents& contents);

// Reads and verifies a file written by write_checkpoint_file. Throws
// braid::Error naming the path and what is wrong: ErrorCode::system when the
// file cannot be opened or read, ErrorCode::unsupported for a format version
// it does not know (a newer braid's), ErrorCode::protocol for anything else (not a checkpoint,
// truncated, inconsistent, checksum mismatch).
CheckpointContents read_checkpoint_file(const std::string& path);

// A hash over the entry count and each entry's name, type and shape, in
// order: equal fingerprints mean the same variables laid out the same way.
std::uint64_t fingerprint_of(std::span<const CheckpointEntry> entries);

}  // namespace braid::mirrored
