// tessera_serial_relay: a noisy serial cable for tests (issue 6). Opens a
// new raw pseudo-terminal and copies bytes between it and an existing serial
// port (e.g. QEMU's `-serial pty`), corrupting, dropping and duplicating
// bytes with the given per-byte probability in each direction
// (transport/fault_relay.h). A worker opens the new pty's slave as if it were
// the MCU's UART:
//
//   tessera worker --mcu mcu1=<slave>  <->  [relay + faults]  <->  QEMU's pty
//
// Usage: tessera_serial_relay --port PATH --pty-file FILE [--faults P] [--seed N]
// Writes the slave path to FILE once relaying; runs until SIGINT/SIGTERM and
// then prints the injected fault counts.
#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "transport/fault_relay.h"

namespace {
std::atomic<bool> g_stop{false};
void OnStop(int) { g_stop = true; }

int Usage(const char* why) {
  std::fprintf(stderr,
               "tessera_serial_relay: %s\nusage: tessera_serial_relay --port PATH --pty-file FILE [--faults P] "
               "[--seed N]\n",
               why);
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  std::string port, pty_file;
  double faults = 0;
  uint32_t seed = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return Usage(("missing value after " + a).c_str());
    const char* v = argv[++i];
    char* end = nullptr;
    if (a == "--port") port = v;
    else if (a == "--pty-file") pty_file = v;
    else if (a == "--faults") {
      faults = std::strtod(v, &end);
      if (*end || faults < 0 || faults > 0.1) return Usage("--faults takes a probability in 0..0.1");
    } else if (a == "--seed") {
      seed = static_cast<uint32_t>(std::strtoul(v, &end, 10));
      if (*end) return Usage("--seed takes an integer");
    } else {
      return Usage(("unknown option " + a).c_str());
    }
  }
  if (port.empty() || pty_file.empty()) return Usage("--port and --pty-file are required");

  const int port_fd = open(port.c_str(), O_RDWR | O_NOCTTY);
  if (port_fd < 0) {
    std::fprintf(stderr, "tessera_serial_relay: cannot open %s: %s\n", port.c_str(), std::strerror(errno));
    return 1;
  }
  termios tio{};
  tcgetattr(port_fd, &tio);
  cfmakeraw(&tio);
  tcsetattr(port_fd, TCSANOW, &tio);
  auto pty = tessera::OpenRawPty();
  if (!pty.ok()) {
    std::fprintf(stderr, "tessera_serial_relay: %s\n", pty.status().ToString().c_str());
    return 1;
  }
  std::signal(SIGINT, OnStop);
  std::signal(SIGTERM, OnStop);
  {
    tessera::SerialRelay relay(pty->master, port_fd, tessera::ByteFaults{faults, faults, faults, seed},
                               tessera::ByteFaults{faults, faults, faults, seed + 1});
    const std::string tmp = pty_file + ".tmp";
    { std::ofstream(tmp) << pty->slave_path << "\n"; }
    std::filesystem::rename(tmp, pty_file);
    while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const auto out = relay.a_to_b(), back = relay.b_to_a();
    std::printf("to the port: %llu bytes, %llu corrupted, %llu dropped, %llu duplicated\n",
                static_cast<unsigned long long>(out.bytes), static_cast<unsigned long long>(out.corrupted),
                static_cast<unsigned long long>(out.dropped), static_cast<unsigned long long>(out.duplicated));
    std::printf("from the port: %llu bytes, %llu corrupted, %llu dropped, %llu duplicated\n",
                static_cast<unsigned long long>(back.bytes), static_cast<unsigned long long>(back.corrupted),
                static_cast<unsigned long long>(back.dropped), static_cast<unsigned long long>(back.duplicated));
  }
  tessera::ClosePty(&*pty);
  close(port_fd);
  return 0;
}
