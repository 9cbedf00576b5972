#include "coll/cost.h"

#include <cstdlib>
#include <sstream>

#include "base/error.h"
#include "transports/registry.h"

namespace hora::coll {

Costs::Costs() {
  for (const transport::Registration& r : transport::registry()) links[r.name] = LinkCost{r.latencyUs, r.gbps};
}

std::string costKey(const char* algo, Kind k) {
  std::string key = std::string(algo) + "-" + kindName(k);
  for (char& ch : key) ch = static_cast<char>(tolower(static_cast<unsigned char>(ch)));
  return key;
}

namespace {
double lookup(const std::map<std::string, double>& m, const char* algo, Kind k, double otherwise) {
  if (m.empty()) return otherwise;
  auto it = m.find(costKey(algo, k));
  if (it == m.end()) it = m.find(algo);
  return it == m.end() ? otherwise : it->second;
}
}  // namespace

double Costs::base(const char* algo, Kind k) const { return lookup(baseUs, algo, k, 0.0); }

double Costs::factor(const char* algo, Kind k) const { return lookup(byteFactor, algo, k, 1.0); }

const LinkCost& Costs::link(const std::string& transport) const {
  auto it = links.find(transport);
  if (it != links.end()) return it->second;
  static const LinkCost unknown{10, 1};  // a transport nobody measured: assume it is slow
  return unknown;
}

namespace {
bool number(const std::string& w, double* v) {
  char* end = nullptr;
  *v = strtod(w.c_str(), &end);
  return !w.empty() && *end == '\0' && *v >= 0 && *v < 1e9;
}
}  // namespace

Costs parseCosts(const std::string& text, const std::string& source) {
  Costs c;
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    if (size_t h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream ws(line);
    std::vector<std::string> w;
    for (std::string x; ws >> x;) w.push_back(x);
    if (w.empty()) continue;
    double a = 0, b = 0;
    bool ok = false;
    if (w[0] == "stage" && w.size() == 3) ok = number(w[1], &a) && number(w[2], &b) && b > 0, c.stage = {a, b};
    else if (w[0] == "memory" && w.size() == 2) ok = number(w[1], &a) && a > 0, c.memoryGBps = a;
    else if (w[0] == "kernelcopy" && w.size() == 3) ok = number(w[1], &a) && number(w[2], &b) && b > 0, c.kernelCopy = {a, b};
    else if (w[0] == "oversubscribed" && w.size() == 2) ok = number(w[1], &a), c.oversubscribedUs = a;
    else if (w[0] == "link" && w.size() == 4) ok = number(w[2], &a) && number(w[3], &b) && b > 0, c.links[w[1]] = {a, b};
    else if (w[0] == "base" && w.size() == 3) ok = number(w[2], &a), c.baseUs[w[1]] = a;
    else if (w[0] == "bytes" && w.size() == 3) ok = number(w[2], &a) && a > 0, c.byteFactor[w[1]] = a;
    if (!ok)
      fail(Errc::InvalidArgument, "%s, line %d: '%s' is not a cost (expected stage US GBPS, memory GBPS, "
           "kernelcopy US GBPS, oversubscribed US, link NAME US GBPS, base ALGO US or bytes ALGO FACTOR)", source.c_str(), no, line.c_str());
  }
  return c;
}

std::string formatCosts(const Costs& c) {
  std::ostringstream o;
  o << "# Hora cost model (HORA_TUNE_FILE): microseconds and GB/s\n";
  o << "stage " << c.stage.latencyUs << ' ' << c.stage.gbps << '\n';
  o << "memory " << c.memoryGBps << '\n';
  o << "kernelcopy " << c.kernelCopy.latencyUs << ' ' << c.kernelCopy.gbps << '\n';
  o << "oversubscribed " << c.oversubscribedUs << '\n';
  for (const auto& [name, l] : c.links) o << "link " << name << ' ' << l.latencyUs << ' ' << l.gbps << '\n';
  for (const auto& [name, us] : c.baseUs) o << "base " << name << ' ' << us << '\n';
  for (const auto& [name, f] : c.byteFactor) o << "bytes " << name << ' ' << f << '\n';
  return o.str();
}

}  // namespace hora::coll
