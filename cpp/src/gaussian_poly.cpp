// Exact Gaussian expectations of piecewise polynomials (see gaussian_poly.hpp).
#include "twolayer/gaussian_poly.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "twolayer/gaussian_orthant.hpp"

namespace twolayer {

namespace {
constexpr std::uint32_t kPowerBits = 5, kPowerMask = (1u << 20) - 1, kSetShift = 20;
constexpr std::uint32_t kFieldMask = (1u << kPowerBits) - 1;
// Each power field must stay below 32 after the sum: checked on the summed fields.
bool overflows(std::uint32_t a, std::uint32_t b) {
  for (int j = 0; j < IndicatorPoly::kMaxVars; ++j)
    if (((a >> (kPowerBits * j)) & kFieldMask) + ((b >> (kPowerBits * j)) & kFieldMask) > kFieldMask) return true;
  return false;
}
}  // namespace

IndicatorPoly IndicatorPoly::constant(double c) {
  IndicatorPoly p;
  if (c != 0.0) p.terms_.emplace_back(0u, c);
  return p;
}

IndicatorPoly IndicatorPoly::monomial(int j, int power, bool indicator, double c) {
  if (j < 0 || j >= kMaxVars || power < 0 || power > kMaxPower)
    throw std::invalid_argument("IndicatorPoly: variable index or power out of range");
  IndicatorPoly p;
  if (c != 0.0)
    p.terms_.emplace_back((static_cast<std::uint32_t>(power) << (kPowerBits * j)) |
                              (indicator ? (1u << (kSetShift + j)) : 0u),
                          c);
  return p;
}

void IndicatorPoly::normalise() {
  std::sort(terms_.begin(), terms_.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  std::size_t out = 0;
  for (std::size_t i = 0; i < terms_.size();) {
    std::uint32_t key = terms_[i].first;
    double c = 0.0;
    for (; i < terms_.size() && terms_[i].first == key; ++i) c += terms_[i].second;
    if (c != 0.0) terms_[out++] = {key, c};
  }
  terms_.resize(out);
}

void IndicatorPoly::axpy(double c, const IndicatorPoly& p) {
  if (c == 0.0 || p.terms_.empty()) return;
  for (const auto& [k, v] : p.terms_) terms_.emplace_back(k, c * v);
  normalise();
}

IndicatorPoly IndicatorPoly::operator*(const IndicatorPoly& q) const {
  IndicatorPoly r;
  r.terms_.reserve(terms_.size() * q.terms_.size());
  for (const auto& [ka, ca] : terms_)
    for (const auto& [kb, cb] : q.terms_) {
      if (overflows(ka, kb)) throw std::invalid_argument("IndicatorPoly: a power exceeds 31");
      r.terms_.emplace_back(((ka & kPowerMask) + (kb & kPowerMask)) | ((ka | kb) & ~kPowerMask), ca * cb);
    }
  r.normalise();
  return r;
}

IndicatorExpectation::IndicatorExpectation(const double* C, int n, const double* mu)
    : n_(n), memo_(256, std::numeric_limits<double>::quiet_NaN()) {
  if (n < 1 || n > IndicatorPoly::kMaxVars) throw std::invalid_argument("IndicatorExpectation: need 1 <= n <= 4");
  std::copy(C, C + n * n, C_);
  if (mu != nullptr) std::copy(mu, mu + n, mu_);
}

double IndicatorExpectation::operator()(const IndicatorPoly& p) {
  double sum = 0.0;
  for (const auto& [key, c] : p.terms()) {
    auto it = cache_.find(key);
    if (it == cache_.end()) {
      int pw[4] = {0, 0, 0, 0};
      for (int j = 0; j < IndicatorPoly::kMaxVars; ++j) {
        pw[j] = static_cast<int>((key >> (kPowerBits * j)) & kFieldMask);
        if (j >= n_ && (pw[j] != 0 || ((key >> (kSetShift + j)) & 1u)))
          throw std::invalid_argument("IndicatorExpectation: a term uses a variable beyond n");
      }
      const unsigned S = (key >> kSetShift) & 0xFu;
      it = cache_.emplace(key, detail::orthant_moment(C_, mu_, n_, S, pw, memo_.data())).first;
    }
    sum += c * it->second;
  }
  return sum;
}

}  // namespace twolayer
