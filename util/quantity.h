// Quantities with units as written in cluster files: memory sizes
// ("564KiB", "2GiB"), link bandwidths ("1Gbit/s", "115200baud") and
// durations ("0.2ms"). Each parser returns InvalidArgument with a message
// that lists the accepted units, so the cluster loader can add file:line.
#pragma once

#include <cstdint>
#include <string>

#include "util/status.h"

namespace tessera {

// Bytes. Binary units KiB/MiB/GiB/TiB (1024ⁿ), decimal kB/KB/MB/GB/TB
// (1000ⁿ), "B" or no unit = bytes. "2GiB" -> 2147483648.
Result<int64_t> ParseByteSize(const std::string& text);

// A link's payload rate in bytes per second. bit/s, kbit/s, Mbit/s, Gbit/s
// (also bps/kbps/Mbps/Gbps) divide by 8; "NNNbaud" is a UART in 8N1 framing,
// 10 bits on the wire per payload byte (METHODS §5), so it divides by 10;
// B/s, kB/s, MB/s, GB/s, KiB/s, MiB/s, GiB/s are bytes already.
struct Bandwidth {
  double bytes_per_s = 0;
  bool uart = false;  // given in baud
};
Result<Bandwidth> ParseBandwidth(const std::string& text);

// Seconds. s, ms, us (µs), ns; a bare number is seconds.
Result<double> ParseDuration(const std::string& text);

// Hertz. Hz, kHz, MHz, GHz or a bare number ("480e6").
Result<double> ParseFrequency(const std::string& text);

// 2147483648 -> "2.00 GiB"; used in tables and error messages.
std::string FormatBytes(double bytes);

}  // namespace tessera
