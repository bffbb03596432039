// Activation names, and the registries of hermite and custom activations (activation.hpp): the one parser of
// activation spellings.
#include "twolayer/activation.hpp"

#include <atomic>
#include <cctype>
#include <cstdio>
#include <clocale>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace twolayer {

namespace detail {
Polynomial g_polynomials[kMaxPolynomials];
CustomTable g_custom[kMaxCustom];
}

namespace {

struct Entry {
  int n;                                // the last nonzero Hermite coefficient (0 for the zero polynomial)
  double c[kMaxHermiteDegree + 1];      // Hermite coefficients c_0..c_n
  std::string name;                     // canonical spelling
};
Entry g_entries[kMaxPolynomials];
std::atomic<int> g_count{0};
std::mutex g_mutex;

// strtod and printf follow the process's locale, which a Python program may have set (setlocale: "0,5"). The
// spellings are in the "C" locale: these two translate the decimal point at the boundary.
char locale_point() {
  const char* p = std::localeconv()->decimal_point;
  return (p && p[0] && !p[1]) ? p[0] : '.';
}

// strtod of a "C"-locale number (decimal point '.').
double read_number(const char* s, char** end) {
  const char point = locale_point();
  if (point == '.') return std::strtod(s, end);
  std::string copy(s);
  for (char& ch : copy)
    if (ch == '.') ch = point;
    else if (ch == point) ch = '.';  // the locale's point is not a "C" number's: strtod stops there
  char* e = nullptr;
  const double v = std::strtod(copy.c_str(), &e);
  *end = const_cast<char*>(s) + (e - copy.c_str());
  return v;
}

// The shortest decimal that reads back as v, written as Python's repr writes floats (fixed notation for exponents
// -4..15, scientific otherwise), without a trailing ".0": 0.5, 1, -2.25, 1e-05, 1e+16.
std::string format_coefficient(double v) {
  if (v == 0.0) return "0";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
    const char point = locale_point();
    if (char* at = std::strchr(buf, point); point != '.' && at) *at = '.';
    char* end = nullptr;
    if (read_number(buf, &end) == v) break;
  }
  const std::string s(buf);
  const std::size_t epos = s.find('e');
  const bool negative = s[0] == '-';
  std::string digits;
  for (std::size_t i = negative ? 1 : 0; i < epos; ++i)
    if (s[i] != '.') digits += s[i];
  const int e = std::atoi(s.c_str() + epos + 1);
  std::string out = negative ? "-" : "";
  const int L = static_cast<int>(digits.size());
  if (e >= -4 && e < 16) {
    if (e + 1 >= L) out += digits + std::string(static_cast<std::size_t>(e + 1 - L), '0');
    else if (e + 1 <= 0) out += "0." + std::string(static_cast<std::size_t>(-e - 1), '0') + digits;
    else out += digits.substr(0, static_cast<std::size_t>(e + 1)) + "." + digits.substr(static_cast<std::size_t>(e + 1));
  } else {
    out += digits.substr(0, 1) + (L > 1 ? "." + digits.substr(1) : "");
    char ex[16];  // |e| <= 324
    std::snprintf(ex, sizeof ex, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    out += ex;
  }
  return out;
}

// Monomial coefficients of sum_k c_k He_k, by He_{k+1} = s He_k - k He_{k-1}.
Polynomial to_monomial(const double* c, int n) {
  double he[kMaxHermiteDegree + 1][kMaxHermiteDegree + 1] = {};
  he[0][0] = 1.0;
  if (kMaxHermiteDegree >= 1) he[1][1] = 1.0;
  for (int k = 1; k < kMaxHermiteDegree; ++k)
    for (int j = 0; j <= k + 1; ++j)
      he[k + 1][j] = (j > 0 ? he[k][j - 1] : 0.0) - static_cast<double>(k) * he[k - 1][j];
  Polynomial P{n, {}};
  for (int k = 0; k <= n; ++k)
    for (int j = 0; j <= k; ++j) P.p[j] += c[k] * he[k][j];
  return P;
}

[[noreturn]] void bad_hermite(const char* argument, const std::string& name, const std::string& why) {
  throw std::invalid_argument(std::string(argument) + ": " + why + " in a hermite activation 'hermite(c_0, ..., c_n)' "
                              "(Hermite coefficients, 1 to " + std::to_string(kMaxHermiteDegree + 1) +
                              " finite numbers), got '" + name + "'");
}

// The custom registry: the tables behind detail::g_custom (never freed or moved once published).
struct CustomEntry {
  std::string name;  // "custom(name)"
  std::vector<double> edges, coef;
  std::vector<int> len;  // CustomTable::len
};
CustomEntry g_custom_entries[kMaxCustom];
std::atomic<int> g_custom_count{0};

bool identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (const char ch : s)
    if (!(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_')) return false;
  return true;
}

// The registered custom activation spelled "custom(name)", or -1.
int find_custom(const std::string& spelling) {
  const int used = g_custom_count.load(std::memory_order_acquire);
  for (int id = 0; id < used; ++id)
    if (g_custom_entries[id].name == spelling) return id;
  return -1;
}

// Whether the table is odd: edges symmetric about 0 and each panel's series the mirror of its partner's, sigma^(k)
// of parity (-1)^(k+1): c[p][k][j] = (-1)^(k+1+j) c[P-1-p][k][j], to 1e-13 of order k's largest coefficient.
bool odd_table(const CustomTable& T) {
  const int P = T.panels, n1 = T.degree + 1;
  const double range = T.edges[P] - T.edges[0];
  for (int i = 0; i <= P; ++i)
    if (std::fabs(T.edges[i] + T.edges[P - i]) > 1e-14 * range) return false;
  for (int k = 0; k < kCustomOrders; ++k) {
    double scale = 0.0;
    for (int p = 0; p < P; ++p)
      for (int j = 0; j < n1; ++j) scale = std::fmax(scale, std::fabs(T.coef[(p * kCustomOrders + k) * n1 + j]));
    for (int p = 0; p < P; ++p)
      for (int j = 0; j < n1; ++j) {
        const double sign = ((k + 1 + j) & 1) ? -1.0 : 1.0;
        const double a = T.coef[(p * kCustomOrders + k) * n1 + j], b = T.coef[((P - 1 - p) * kCustomOrders + k) * n1 + j];
        if (std::fabs(a - sign * b) > 1e-13 * scale) return false;
      }
  }
  return true;
}

}  // namespace

Activation register_custom(const std::string& name, const double* edges, int panels, const double* coef, int degree,
                           double strip, const char* argument) {
  const std::string arg(argument);
  if (!identifier(name))
    throw std::invalid_argument(arg + ": expected an identifier (letters, digits, '_'; not starting with a digit), "
                                "got '" + name + "'");
  if (panels < 1 || degree < 0)
    throw std::invalid_argument(arg + ": a custom table needs at least one panel and degree >= 0, got " +
                                std::to_string(panels) + " panels of degree " + std::to_string(degree));
  for (int i = 0; i <= panels; ++i)
    if (!std::isfinite(edges[i]) || (i > 0 && !(edges[i] > edges[i - 1])))
      throw std::invalid_argument("edges: a custom table's panel edges must be finite and increasing, got edges[" +
                                  std::to_string(i) + "] = " + std::to_string(edges[i]));
  const std::size_t ncoef = static_cast<std::size_t>(panels) * kCustomOrders * static_cast<std::size_t>(degree + 1);
  for (std::size_t i = 0; i < ncoef; ++i)
    if (!std::isfinite(coef[i]))
      throw std::invalid_argument("coefficients: a custom table's coefficients must be finite, got " +
                                  std::to_string(coef[i]));
  if (!(strip > 0.0)) throw std::invalid_argument("strip: expected a positive half-width, got " + std::to_string(strip));
  const std::string spelling = "custom(" + name + ")";
  std::vector<double> e(edges, edges + panels + 1), c(coef, coef + ncoef);
  std::lock_guard<std::mutex> lock(g_mutex);
  const int used = g_custom_count.load(std::memory_order_relaxed);
  if (const int id = find_custom(spelling); id >= 0) {
    const CustomEntry& old = g_custom_entries[id];
    if (old.edges == e && old.coef == c && detail::g_custom[id].strip == strip)
      return static_cast<Activation>(kFirstCustom + id);
    throw std::invalid_argument(arg + ": the custom activation '" + name + "' is already registered with another "
                                "function in this process (choose another name)");
  }
  if (used >= kMaxCustom)
    throw std::invalid_argument(arg + ": too many custom activations (at most " + std::to_string(kMaxCustom) +
                                " per process)");
  CustomEntry& entry = g_custom_entries[used];
  entry.name = spelling;
  entry.edges = std::move(e);
  entry.coef = std::move(c);
  CustomTable& T = detail::g_custom[used];
  T.edges = entry.edges.data();
  T.coef = entry.coef.data();
  entry.len.assign(static_cast<std::size_t>(panels) * kCustomOrders, 1);
  for (std::size_t i = 0; i < entry.len.size(); ++i)
    for (int j = degree; j >= 1; --j)
      if (entry.coef[i * (degree + 1) + j] != 0.0) {
        entry.len[i] = j + 1;
        break;
      }
  T.len = entry.len.data();
  T.panels = panels;
  T.degree = degree;
  T.strip = strip;
  T.inv_width = panels / (edges[panels] - edges[0]);
  for (int i = 1; i < panels; ++i) {
    const double w = (edges[panels] - edges[0]) / panels;
    if (std::fabs(edges[i] - (edges[0] + i * w)) > 1e-12 * (edges[panels] - edges[0])) T.inv_width = 0.0;
  }
  const std::size_t n1 = static_cast<std::size_t>(degree) + 1, last = static_cast<std::size_t>(panels - 1);
  for (int k = 0; k < 2; ++k) {  // value and slope at the left edge (x = -1, panel 0) and the right (x = 1, last)
    T.tail[0][k] = chebyshev_sum(T.coef + k * n1, degree, -1.0);
    T.tail[1][k] = chebyshev_sum(T.coef + (last * kCustomOrders + k) * n1, degree, 1.0);
  }
  T.odd = odd_table(T);
  g_custom_count.store(used + 1, std::memory_order_release);
  return static_cast<Activation>(kFirstCustom + used);
}

const char* custom_name(Activation a) {
  const int id = static_cast<int>(a) - kFirstCustom;
  if (id < 0 || id >= g_custom_count.load(std::memory_order_acquire)) return "?";
  return g_custom_entries[id].name.c_str();
}

Activation register_hermite(const double* c_in, int count, const char* argument) {
  if (count < 1 || count > kMaxHermiteDegree + 1)
    throw std::invalid_argument(std::string(argument) + ": a hermite activation takes 1 to " +
                                std::to_string(kMaxHermiteDegree + 1) + " coefficients (degree <= " +
                                std::to_string(kMaxHermiteDegree) + "), got " + std::to_string(count));
  double c[kMaxHermiteDegree + 1] = {};
  int n = 0;
  for (int k = 0; k < count; ++k) {
    if (!std::isfinite(c_in[k]))
      throw std::invalid_argument(std::string(argument) + ": hermite coefficient c_" + std::to_string(k) +
                                  " must be finite, got " + std::to_string(c_in[k]));
    c[k] = c_in[k] == 0.0 ? 0.0 : c_in[k];  // -0 -> 0
    if (c[k] != 0.0) n = k;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  const int used = g_count.load(std::memory_order_relaxed);
  for (int id = 0; id < used; ++id) {
    const Entry& e = g_entries[id];
    bool same = e.n == n;
    for (int k = 0; same && k <= n; ++k) same = e.c[k] == c[k];
    if (same) return static_cast<Activation>(kNumActivations + id);
  }
  if (used >= kMaxPolynomials)
    throw std::invalid_argument(std::string(argument) + ": too many distinct hermite activations (at most " +
                                std::to_string(kMaxPolynomials) + " per process)");
  Entry& e = g_entries[used];
  e.n = n;
  std::string name = "hermite(";
  for (int k = 0; k <= n; ++k) {
    e.c[k] = c[k];
    name += (k ? "," : "") + format_coefficient(c[k]);
  }
  e.name = name + ")";
  detail::g_polynomials[used] = to_monomial(c, n);
  g_count.store(used + 1, std::memory_order_release);
  return static_cast<Activation>(kNumActivations + used);
}

const char* hermite_name(Activation a) {
  const int id = static_cast<int>(a) - kNumActivations;
  if (id < 0 || id >= g_count.load(std::memory_order_acquire)) return "?";
  return g_entries[id].name.c_str();
}

Activation parse_activation(const std::string& name, const char* argument) {
  std::string known;
  for (int k = 0; k < kNumActivations; ++k) {
    auto a = static_cast<Activation>(k);
    if (name == activation_name(a)) return a;
    known += std::string(k ? ", '" : "'") + activation_name(a) + "'";
  }
  if (name.rfind("hermite", 0) == 0) {
    std::size_t i = 7;
    auto skip = [&] {
      while (i < name.size() && std::isspace(static_cast<unsigned char>(name[i]))) ++i;
    };
    skip();
    if (i >= name.size() || name[i] != '(') bad_hermite(argument, name, "expected '('");
    ++i;
    double c[kMaxHermiteDegree + 2];
    int count = 0;
    for (;;) {
      skip();
      const char* start = name.c_str() + i;
      char* end = nullptr;
      const double v = read_number(start, &end);
      if (end == start) bad_hermite(argument, name, "expected a number at position " + std::to_string(i));
      if (count > kMaxHermiteDegree)
        bad_hermite(argument, name, "more than " + std::to_string(kMaxHermiteDegree + 1) + " coefficients");
      if (!std::isfinite(v)) bad_hermite(argument, name, "a coefficient that is not finite");
      c[count++] = v;
      i += static_cast<std::size_t>(end - start);
      skip();
      if (i < name.size() && name[i] == ',') {
        ++i;
        continue;
      }
      if (i < name.size() && name[i] == ')') {
        ++i;
        break;
      }
      bad_hermite(argument, name, "expected ',' or ')' at position " + std::to_string(i));
    }
    skip();
    if (i != name.size()) bad_hermite(argument, name, "trailing characters after ')'");
    return register_hermite(c, count, argument);
  }
  if (name.rfind("custom(", 0) == 0) {
    if (const int id = find_custom(name); id >= 0) return static_cast<Activation>(kFirstCustom + id);
    throw std::invalid_argument(std::string(argument) + ": the custom activation '" + name +
                                "' is not registered in this process: register it with "
                                "twolayer.activations.custom(name, function) first (a spelling read from a file or "
                                "another process names a function, it never defines one)");
  }
  throw std::invalid_argument(std::string(argument) + ": expected one of " + known +
                              ", 'hermite(c_0, ..., c_n)' or a registered 'custom(name)', got '" + name + "'");
}

}  // namespace twolayer
