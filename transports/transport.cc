#include "transports/transport.h"

#include <atomic>
#include <cinttypes>
#include <cstdio>

namespace hora::transport {

static std::atomic<TagDescriber> gDescriber{nullptr};

void setTagDescriber(TagDescriber d) { gDescriber.store(d); }

std::string describeTag(uint64_t tag) {
  if (TagDescriber d = gDescriber.load()) return d(tag);
  char buf[32];
  snprintf(buf, sizeof buf, "tag 0x%016" PRIx64, tag);
  return buf;
}

}  // namespace hora::transport
