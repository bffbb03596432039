// Exact Gaussian expectations of piecewise polynomials: sums of terms
//   c * prod_j l_j^p_j * prod_{j in S} 1(l_j > 0),   l ~ N(mu, C) with at most four variables,
// the form every product of linear, quadratic, relu and step units (and of polynomials of the fields) takes:
// relu(l) = l 1(l > 0), relu'(l) = step(l) = 1(l > 0), 1(l > 0)^2 = 1(l > 0). Each term's expectation is an
// orthant moment (gaussian_orthant.hpp: Stein's lemma down to the orthant probabilities, closed form up to three
// indicators, the one-dimensional Price-path integral for four; with means certified quadrature from three
// indicators on), so the result is exact to rounding (~1e-11 relative where four indicators meet). Used for the
// diffusion term of relu SGD (sde.hpp), whose integrands have kinks that defeat Gauss-Hermite product rules.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

namespace twolayer {

// A sparse piecewise polynomial in l_0..l_3 (terms sorted by key, no zero coefficients). Powers up to 31 each.
class IndicatorPoly {
 public:
  static constexpr int kMaxVars = 4, kMaxPower = 31;
  IndicatorPoly() = default;
  static IndicatorPoly constant(double c);
  // c * l_j^power, times 1(l_j > 0) when indicator.
  static IndicatorPoly monomial(int j, int power, bool indicator, double c = 1.0);
  // this += c * p.
  void axpy(double c, const IndicatorPoly& p);
  IndicatorPoly operator*(const IndicatorPoly& q) const;
  bool empty() const { return terms_.empty(); }
  // (key, coefficient): powers in 5-bit fields (variable j at bit 5 j), indicator set S in bits 20..23.
  const std::vector<std::pair<std::uint32_t, double>>& terms() const { return terms_; }

 private:
  void normalise();
  std::vector<std::pair<std::uint32_t, double>> terms_;
};

// E[p(l)] for l ~ N(mu, C) (n x n row-major PSD, n <= 4; mu nullptr: zero means); the orthant moments of one
// (C, mu) are cached, and so are the orthant probabilities they reduce to, so many polynomials over the same (C, mu)
// share them. Throws std::invalid_argument when a power exceeds 31 (overflow).
class IndicatorExpectation {
 public:
  IndicatorExpectation(const double* C, int n, const double* mu = nullptr);
  double operator()(const IndicatorPoly& p);

 private:
  double C_[16], mu_[4] = {0, 0, 0, 0};
  int n_;
  std::unordered_map<std::uint32_t, double> cache_;
  std::vector<double> memo_;  // orthant probabilities (gaussian_orthant.hpp orthant_moment's memo)
};

}  // namespace twolayer
