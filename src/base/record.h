// A versioned record of named, length-prefixed fields: what each rank tells every other at init
// (the peer record). Each layer or transport owns one field by name and alone reads it; a field
// that a reader does not know is skipped, so a new transport adds a field without touching the
// others. The encoding, every integer little-endian:
//
//   u32 magic "PREC", u16 version (kRecordVersion), u16 number of fields, then per field:
//   u8 name length (1..32), the name (printable ASCII), u32 length, that many bytes.
//
// decode() checks every length against what is left before it reads, and rejects duplicate or
// malformed names and trailing bytes: a record from a peer is never trusted.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hora {

inline constexpr uint16_t kRecordVersion = 1;
inline constexpr size_t kRecordMaxFields = 64;
inline constexpr size_t kRecordMaxName = 32;

class Record {
 public:
  // Sets (or replaces) a field.
  void set(const std::string& name, std::string bytes);
  // The field's bytes, or null when the record has none of that name.
  const std::string* get(const std::string& name) const;
  const std::vector<std::pair<std::string, std::string>>& fields() const { return fields_; }

  std::string encode() const;
  // False, with the reason in *why, when `bytes` is not a well-formed record.
  static bool decode(const std::string& bytes, Record* out, std::string* why);

 private:
  std::vector<std::pair<std::string, std::string>> fields_;
};

// Little-endian field writers and a bounds-checked reader, for the fields' own contents.
class FieldWriter {
 public:
  FieldWriter& u32(uint32_t v);
  FieldWriter& u64(uint64_t v);
  FieldWriter& str(const std::string& s);  // u32 length, then the bytes
  FieldWriter& raw(const void* p, size_t n);
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class FieldReader {
 public:
  explicit FieldReader(const std::string& bytes) : p_(bytes.data()), left_(bytes.size()) {}
  // A view: the bytes must outlive the reader, so a temporary is refused.
  explicit FieldReader(std::string&&) = delete;
  // Each returns false (and reads nothing more) once the field is too short.
  bool u32(uint32_t* v);
  bool u64(uint64_t* v);
  bool str(std::string* s, size_t maxLen);
  bool raw(void* dst, size_t n);
  bool atEnd() const { return left_ == 0; }

 private:
  const char* p_;
  size_t left_;
};

}  // namespace hora
