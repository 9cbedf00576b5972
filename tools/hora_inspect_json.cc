// A small JSON reader for hora-inspect (hora_inspect.h): recursive descent over the whole text,
// strict enough to refuse a truncated or garbled file.
#include <cstdio>
#include <cstdlib>

#include "hora_inspect.h"

namespace hora::inspect {

const Json* Json::get(const std::string& key) const {
  for (const auto& [k, v] : fields)
    if (k == key) return &v;
  return nullptr;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20) {
      char buf[8];
      snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

namespace {

class Parser {
 public:
  explicit Parser(const std::string& text) : s_(text) {}

  bool document(Json* out, std::string* why) {
    if (!value(out, 0) || (skip(), pos_ != s_.size())) {
      if (error_.empty()) error_ = "unexpected text";
      *why = error_ + " at offset " + std::to_string(pos_);
      return false;
    }
    return true;
  }

 private:
  void skip() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }
  bool fail(const char* why) {
    if (error_.empty()) error_ = why;
    return false;
  }
  bool literal(const char* word) {
    size_t n = 0;
    while (word[n]) ++n;
    if (s_.compare(pos_, n, word) != 0) return fail("invalid literal");
    pos_ += n;
    return true;
  }

  bool value(Json* out, int depth) {
    if (depth > 64) return fail("nested too deeply");
    skip();
    if (pos_ >= s_.size()) return fail("unexpected end");
    const char c = s_[pos_];
    if (c == '{') return object(out, depth);
    if (c == '[') return array(out, depth);
    if (c == '"') {
      out->type = Json::String;
      return string(&out->text);
    }
    if (c == 't' || c == 'f') {
      out->type = Json::Bool;
      out->boolean = c == 't';
      return literal(c == 't' ? "true" : "false");
    }
    if (c == 'n') {
      out->type = Json::Null;
      return literal("null");
    }
    return number(out);
  }

  bool number(Json* out) {
    const char* start = s_.c_str() + pos_;
    char* end = nullptr;
    const double v = strtod(start, &end);
    if (end == start || !(*start == '-' || (*start >= '0' && *start <= '9'))) return fail("invalid value");
    pos_ += static_cast<size_t>(end - start);
    out->type = Json::Number;
    out->number = v;
    return true;
  }

  bool hex4(unsigned* v) {
    if (pos_ + 4 > s_.size()) return fail("truncated escape");
    *v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      *v <<= 4;
      if (h >= '0' && h <= '9') *v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f') *v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F') *v |= static_cast<unsigned>(h - 'A' + 10);
      else return fail("invalid escape");
    }
    return true;
  }

  bool string(std::string* out) {
    ++pos_;  // the quote
    for (;;) {
      if (pos_ >= s_.size()) return fail("unterminated string");
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (c != '\\') {
        *out += c;
        continue;
      }
      if (pos_ >= s_.size()) return fail("unterminated string");
      const char e = s_[pos_++];
      switch (e) {
        case '"': case '\\': case '/': *out += e; break;
        case 'n': *out += '\n'; break;
        case 't': *out += '\t'; break;
        case 'r': *out += '\r'; break;
        case 'b': *out += '\b'; break;
        case 'f': *out += '\f'; break;
        case 'u': {
          unsigned v = 0;
          if (!hex4(&v)) return false;
          // As UTF-8 (a lone surrogate stays as it is encoded).
          if (v < 0x80) {
            *out += static_cast<char>(v);
          } else if (v < 0x800) {
            *out += static_cast<char>(0xc0 | v >> 6);
            *out += static_cast<char>(0x80 | (v & 0x3f));
          } else {
            *out += static_cast<char>(0xe0 | v >> 12);
            *out += static_cast<char>(0x80 | (v >> 6 & 0x3f));
            *out += static_cast<char>(0x80 | (v & 0x3f));
          }
          break;
        }
        default: return fail("invalid escape");
      }
    }
  }

  bool array(Json* out, int depth) {
    out->type = Json::Array;
    ++pos_;
    skip();
    if (pos_ < s_.size() && s_[pos_] == ']') {
      ++pos_;
      return true;
    }
    for (;;) {
      out->items.emplace_back();
      if (!value(&out->items.back(), depth + 1)) return false;
      skip();
      if (pos_ >= s_.size()) return fail("unterminated array");
      const char c = s_[pos_++];
      if (c == ']') return true;
      if (c != ',') return fail("expected , or ]");
    }
  }

  bool object(Json* out, int depth) {
    out->type = Json::Object;
    ++pos_;
    skip();
    if (pos_ < s_.size() && s_[pos_] == '}') {
      ++pos_;
      return true;
    }
    for (;;) {
      skip();
      if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a key");
      std::string key;
      if (!string(&key)) return false;
      skip();
      if (pos_ >= s_.size() || s_[pos_++] != ':') return fail("expected :");
      out->fields.emplace_back(std::move(key), Json());
      if (!value(&out->fields.back().second, depth + 1)) return false;
      skip();
      if (pos_ >= s_.size()) return fail("unterminated object");
      const char c = s_[pos_++];
      if (c == '}') return true;
      if (c != ',') return fail("expected , or }");
    }
  }

  const std::string& s_;
  size_t pos_ = 0;
  std::string error_;
};

}  // namespace

bool parseJson(const std::string& text, Json* out, std::string* why) {
  *out = Json();
  return Parser(text).document(out, why);
}

}  // namespace hora::inspect
