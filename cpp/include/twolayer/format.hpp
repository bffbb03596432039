// Message text without iostreams or locales: concat("diverged at t = ", t, ": ", why). The core builds its status
// and error messages with this one helper, never with std::ostringstream: a stream consults the C++ locale's facets,
// which is not safe where the module carries its own copy of libstdc++ (-static-libstdc++, as some vendor GCC
// wrappers link by default) next to the process's shared one (a crash in std::codecvt from a worker thread, issue
// 26), and costs a locale lookup in compute paths. Numbers print as an ostream's defaults did: a double as printf's
// "%.6g" in the C locale (6 significant digits, "1e-05", "inf", "nan"), an integer in decimal.
#pragma once
#include <charconv>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>

namespace twolayer {
namespace detail {

inline void append_text(std::string& out, std::string_view s) { out.append(s); }

inline void append_text(std::string& out, double v) {
  char buf[32];  // "%.6g" of any double: at most 13 characters ("-1.23457e-308")
#if defined(__cpp_lib_to_chars) && __cpp_lib_to_chars >= 201611L
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general, 6);  // printf's %g, C locale
  out.append(buf, r.ptr);
#else  // standard libraries without floating-point to_chars: snprintf (the decimal point of LC_NUMERIC)
  const int n = std::snprintf(buf, sizeof buf, "%.6g", v);
  out.append(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
#endif
}

template <class I, std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool> && !std::is_same_v<I, char>,
                                    int> = 0>
void append_text(std::string& out, I v) {
  char buf[24];  // any 64-bit integer with its sign
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

}  // namespace detail

// The parts (text, doubles, integers) written one after another into one string.
template <class... Parts>
std::string concat(const Parts&... parts) {
  std::string out;
  (detail::append_text(out, parts), ...);
  return out;
}

}  // namespace twolayer
