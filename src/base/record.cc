#include "base/record.h"

#include <cstring>

#include "base/error.h"

namespace hora {

namespace {
constexpr uint32_t kRecordMagic = 0x43455250;  // "PREC"

bool goodName(const std::string& n) {
  if (n.empty() || n.size() > kRecordMaxName) return false;
  for (char c : n)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}
}  // namespace

void Record::set(const std::string& name, std::string bytes) {
  if (!goodName(name)) fail(Errc::Internal, "a peer-record field may not be named '%s'", name.c_str());
  for (auto& f : fields_)
    if (f.first == name) {
      f.second = std::move(bytes);
      return;
    }
  if (fields_.size() >= kRecordMaxFields) fail(Errc::Internal, "a peer record holds at most %zu fields", kRecordMaxFields);
  fields_.emplace_back(name, std::move(bytes));
}

const std::string* Record::get(const std::string& name) const {
  for (const auto& f : fields_)
    if (f.first == name) return &f.second;
  return nullptr;
}

std::string Record::encode() const {
  FieldWriter w;
  w.u32(kRecordMagic);
  const uint32_t head = static_cast<uint32_t>(kRecordVersion) | static_cast<uint32_t>(fields_.size()) << 16;
  w.u32(head);
  for (const auto& [name, bytes] : fields_) {
    const uint8_t n = static_cast<uint8_t>(name.size());
    w.raw(&n, 1).raw(name.data(), name.size()).str(bytes);
  }
  return w.take();
}

bool Record::decode(const std::string& bytes, Record* out, std::string* why) {
  FieldReader r(bytes);
  uint32_t magic = 0, head = 0;
  if (!r.u32(&magic) || !r.u32(&head)) {
    *why = format("a peer record of %zu bytes is too short", bytes.size());
    return false;
  }
  const uint32_t version = head & 0xffff, count = head >> 16;
  if (magic != kRecordMagic) {
    *why = "not a peer record (bad magic)";
    return false;
  }
  if (version != kRecordVersion) {
    *why = format("peer record version %u, this rank speaks %u", version, kRecordVersion);
    return false;
  }
  if (count > kRecordMaxFields) {
    *why = format("a peer record of %u fields (at most %zu)", count, kRecordMaxFields);
    return false;
  }
  Record rec;
  for (uint32_t i = 0; i < count; ++i) {
    uint8_t n = 0;
    std::string name(kRecordMaxName, '\0'), value;
    if (!r.raw(&n, 1) || n == 0 || n > kRecordMaxName || !r.raw(&name[0], n)) {
      *why = format("field %u of the peer record has a malformed name", i);
      return false;
    }
    name.resize(n);
    if (!goodName(name) || rec.get(name)) {
      *why = format("field %u of the peer record has a bad or repeated name", i);
      return false;
    }
    if (!r.str(&value, bytes.size())) {
      *why = format("field '%s' of the peer record runs past its end", name.c_str());
      return false;
    }
    rec.fields_.emplace_back(std::move(name), std::move(value));
  }
  if (!r.atEnd()) {
    *why = "the peer record has bytes after its last field";
    return false;
  }
  *out = std::move(rec);
  return true;
}

FieldWriter& FieldWriter::u32(uint32_t v) {
  uint8_t b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<uint8_t>(v >> (8 * i));
  return raw(b, 4);
}

FieldWriter& FieldWriter::u64(uint64_t v) {
  u32(static_cast<uint32_t>(v));
  return u32(static_cast<uint32_t>(v >> 32));
}

FieldWriter& FieldWriter::str(const std::string& s) {
  u32(static_cast<uint32_t>(s.size()));
  return raw(s.data(), s.size());
}

FieldWriter& FieldWriter::raw(const void* p, size_t n) {
  out_.append(static_cast<const char*>(p), n);
  return *this;
}

bool FieldReader::raw(void* dst, size_t n) {
  if (n > left_) {
    left_ = 0;
    p_ = nullptr;
    return false;
  }
  if (n) memcpy(dst, p_, n);
  p_ += n;
  left_ -= n;
  return true;
}

bool FieldReader::u32(uint32_t* v) {
  uint8_t b[4];
  if (!raw(b, 4)) return false;
  *v = 0;
  for (int i = 0; i < 4; ++i) *v |= static_cast<uint32_t>(b[i]) << (8 * i);
  return true;
}

bool FieldReader::u64(uint64_t* v) {
  uint32_t lo = 0, hi = 0;
  if (!u32(&lo) || !u32(&hi)) return false;
  *v = lo | static_cast<uint64_t>(hi) << 32;
  return true;
}

bool FieldReader::str(std::string* s, size_t maxLen) {
  uint32_t n = 0;
  if (!u32(&n) || n > maxLen || n > left_) {
    left_ = 0;
    return false;
  }
  s->assign(p_, n);
  p_ += n;
  left_ -= n;
  return true;
}

}  // namespace hora
