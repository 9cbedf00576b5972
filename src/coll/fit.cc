#include "coll/fit.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace hora::coll {

namespace {

// For one key at bytes' factor f: the base that minimizes the weighted squared error (weights
// 1/us^2: relative errors), at least 0, and that error.
struct Trial {
  double base = 0, error = 0;
};

Trial trial(const Costs& c, const JobShape& t, const std::string& key, double f, const std::vector<const Measured*>& ms) {
  Costs cf = c;
  cf.byteFactor[key] = f;
  cf.baseUs[key] = 0;
  std::vector<double> residual;
  double sw = 0, swr = 0;
  for (const Measured* m : ms) {
    const double r = m->us - algorithm(m->algo).predictUs(m->args, t, cf);
    const double w = 1.0 / (m->us * m->us);
    residual.push_back(r);
    sw += w;
    swr += w * r;
  }
  Trial out;
  out.base = std::max(0.0, swr / sw);
  for (size_t i = 0; i < ms.size(); ++i) {
    const double e = (residual[i] - out.base) / ms[i]->us;
    out.error += e * e;
  }
  return out;
}

}  // namespace

Costs fitCosts(const Costs& c, const JobShape& t, const std::vector<Measured>& m, std::vector<Fitted>* report) {
  std::map<std::string, std::vector<const Measured*>> byKey;
  for (const Measured& x : m)
    if (x.us > 0) byKey[costKey(algorithm(x.algo).name(), x.args.kind)].push_back(&x);
  // The algorithms of phases last: their predictions include the others'.
  std::vector<std::string> keys;
  for (const auto& [key, ms] : byKey)
    if (key.rfind("hier-", 0) != 0) keys.push_back(key);
  for (const auto& [key, ms] : byKey)
    if (key.rfind("hier-", 0) == 0) keys.push_back(key);
  Costs out = c;
  for (const std::string& key : keys) {
    const std::vector<const Measured*>& ms = byKey[key];
    // A grid of factors, 1/16 to 16 in steps of 2^(1/16), then a finer look around the best.
    double bestF = 1;
    Trial best = trial(out, t, key, 1, ms);
    for (int i = -64; i <= 64; ++i) {
      const double f = std::pow(2.0, i / 16.0);
      const Trial tr = trial(out, t, key, f, ms);
      if (tr.error < best.error) best = tr, bestF = f;
    }
    for (int i = -16; i <= 16; ++i) {
      const double f = bestF * std::pow(2.0, i / 256.0);
      const Trial tr = trial(out, t, key, f, ms);
      if (tr.error < best.error) best = tr, bestF = f;
    }
    out.byteFactor[key] = bestF;
    out.baseUs[key] = best.base;
  }
  if (report) {
    report->clear();
    for (const std::string& key : keys) {
      Fitted f;
      f.key = key;
      f.baseUs = out.baseUs[key];
      f.factor = out.byteFactor[key];
      for (const Measured* x : byKey[key]) {
        ++f.samples;
        f.worst = std::max(f.worst, std::fabs(algorithm(x->algo).predictUs(x->args, t, out) - x->us) / x->us);
      }
      report->push_back(f);
    }
  }
  return out;
}

}  // namespace hora::coll
