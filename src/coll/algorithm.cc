#include "coll/algorithm.h"

#include "base/error.h"

namespace hora::coll {

namespace {
const char* const kNames[] = {
#define HORA_ALGORITHM(id, name) name,
#include "coll/algorithms.def"
#undef HORA_ALGORITHM
};
}  // namespace

const std::vector<const Algorithm*>& algorithms() {
  static const std::vector<const Algorithm*> all = {
#define HORA_ALGORITHM(id, name) &algorithm##id(),
#include "coll/algorithms.def"
#undef HORA_ALGORITHM
  };
  return all;
}

const Algorithm& algorithm(Algo id) { return *algorithms()[static_cast<size_t>(id)]; }

const char* algoName(Algo id) { return kNames[static_cast<size_t>(id)]; }

const char* Algorithm::name() const { return algoName(id()); }

const Algorithm* findAlgorithm(const std::string& name) {
  for (const Algorithm* a : algorithms())
    if (name == a->name()) return a;
  return nullptr;
}

std::string algorithmNames(const Kind* k) {
  std::string s;
  for (const Algorithm* a : algorithms())
    if (!k || a->implements(*k)) s += (s.empty() ? "" : ", ") + std::string(a->name());
  return s;
}

}  // namespace hora::coll
