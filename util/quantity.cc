#include "util/quantity.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

namespace tessera {

namespace {

// Splits "1.5GiB" into 1.5 and "GiB". Fails when there is no leading number.
bool SplitNumberAndUnit(const std::string& text, double* number, std::string* unit) {
  size_t b = 0, e = text.size();
  while (b < e && std::isspace(static_cast<unsigned char>(text[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(text[e - 1]))) --e;
  const std::string t = text.substr(b, e - b);
  if (t.empty()) return false;
  char* end = nullptr;
  *number = std::strtod(t.c_str(), &end);
  if (end == t.c_str() || !std::isfinite(*number)) return false;
  std::string rest(end);
  size_t k = 0;
  while (k < rest.size() && std::isspace(static_cast<unsigned char>(rest[k]))) ++k;
  *unit = rest.substr(k);
  return true;
}

struct UnitScale {
  const char* unit;
  double scale;
};

bool LookUp(const std::vector<UnitScale>& table, const std::string& unit, double* scale) {
  for (const auto& u : table)
    if (unit == u.unit) {
      *scale = u.scale;
      return true;
    }
  return false;
}

}  // namespace

Result<int64_t> ParseByteSize(const std::string& text) {
  static const std::vector<UnitScale> kUnits = {
      {"", 1},          {"B", 1},         {"KiB", 1024.0},  {"MiB", 1048576.0}, {"GiB", 1073741824.0},
      {"TiB", 1099511627776.0}, {"kB", 1e3}, {"KB", 1e3},   {"MB", 1e6},        {"GB", 1e9},
      {"TB", 1e12}};
  double number = 0, scale = 1;
  std::string unit;
  const std::string hint = "write a size such as 564KiB, 2GiB, 512MB or a number of bytes";
  if (!SplitNumberAndUnit(text, &number, &unit)) return Status::InvalidArgument("bad size '" + text + "'; " + hint);
  if (!LookUp(kUnits, unit, &scale))
    return Status::InvalidArgument("unknown size unit '" + unit + "' in '" + text + "'; " + hint);
  const double bytes = number * scale;
  if (bytes < 0 || bytes > 9.0e18) return Status::InvalidArgument("size '" + text + "' is out of range; " + hint);
  return static_cast<int64_t>(std::llround(bytes));
}

Result<Bandwidth> ParseBandwidth(const std::string& text) {
  static const std::vector<UnitScale> kBits = {
      {"bit/s", 1},   {"bps", 1},    {"kbit/s", 1e3}, {"Kbit/s", 1e3}, {"kbps", 1e3}, {"Mbit/s", 1e6},
      {"Mbps", 1e6},  {"Gbit/s", 1e9}, {"Gbps", 1e9}};
  static const std::vector<UnitScale> kBytes = {
      {"B/s", 1},      {"kB/s", 1e3},        {"KB/s", 1e3},          {"MB/s", 1e6},
      {"GB/s", 1e9},   {"KiB/s", 1024.0},    {"MiB/s", 1048576.0},   {"GiB/s", 1073741824.0}};
  const std::string hint = "write a bandwidth such as 1Gbit/s, 100Mbit/s, 12MB/s or 115200baud";
  double number = 0, scale = 1;
  std::string unit;
  if (!SplitNumberAndUnit(text, &number, &unit))
    return Status::InvalidArgument("bad bandwidth '" + text + "'; " + hint);
  if (number <= 0) return Status::InvalidArgument("bandwidth '" + text + "' must be positive; " + hint);
  Bandwidth bw;
  if (unit == "baud" || unit == "Bd") {
    bw.bytes_per_s = number / 10.0;  // UART 8N1: start + 8 data + stop bits per byte
    bw.uart = true;
  } else if (LookUp(kBits, unit, &scale)) {
    bw.bytes_per_s = number * scale / 8.0;
  } else if (LookUp(kBytes, unit, &scale)) {
    bw.bytes_per_s = number * scale;
  } else if (unit.empty()) {
    return Status::InvalidArgument("bandwidth '" + text + "' has no unit; " + hint);
  } else {
    return Status::InvalidArgument("unknown bandwidth unit '" + unit + "' in '" + text + "'; " + hint);
  }
  return bw;
}

Result<double> ParseDuration(const std::string& text) {
  static const std::vector<UnitScale> kUnits = {{"", 1},     {"s", 1},     {"ms", 1e-3},
                                                {"us", 1e-6}, {"µs", 1e-6}, {"ns", 1e-9}};
  const std::string hint = "write a duration such as 0.2ms, 50us or 1s";
  double number = 0, scale = 1;
  std::string unit;
  if (!SplitNumberAndUnit(text, &number, &unit)) return Status::InvalidArgument("bad duration '" + text + "'; " + hint);
  if (!LookUp(kUnits, unit, &scale))
    return Status::InvalidArgument("unknown duration unit '" + unit + "' in '" + text + "'; " + hint);
  if (number < 0) return Status::InvalidArgument("duration '" + text + "' must not be negative; " + hint);
  return number * scale;
}

Result<double> ParseFrequency(const std::string& text) {
  static const std::vector<UnitScale> kUnits = {{"", 1}, {"Hz", 1}, {"kHz", 1e3}, {"MHz", 1e6}, {"GHz", 1e9}};
  const std::string hint = "write a clock such as 480e6, 480MHz or 1.5GHz";
  double number = 0, scale = 1;
  std::string unit;
  if (!SplitNumberAndUnit(text, &number, &unit)) return Status::InvalidArgument("bad clock '" + text + "'; " + hint);
  if (!LookUp(kUnits, unit, &scale))
    return Status::InvalidArgument("unknown clock unit '" + unit + "' in '" + text + "'; " + hint);
  if (number <= 0) return Status::InvalidArgument("clock '" + text + "' must be positive; " + hint);
  return number * scale;
}

std::string FormatBytes(double bytes) {
  char buf[48];
  const double a = std::fabs(bytes);
  if (a >= 1073741824.0) std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / 1073741824.0);
  else if (a >= 1048576.0) std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
  else if (a >= 1024.0) std::snprintf(buf, sizeof buf, "%.1f KiB", bytes / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.0f B", bytes);
  return buf;
}

}  // namespace tessera
