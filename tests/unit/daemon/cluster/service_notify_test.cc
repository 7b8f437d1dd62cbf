// daemon/cluster/service_notify.h against a notify socket this test binds
// (what systemd does for Type=notify): READY=1 with STATUS=, STATUS= again on
// a change, WATCHDOG=1 only while the health check passes, STOPPING=1; and
// nothing at all without NOTIFY_SOCKET.
#include "daemon/cluster/service_notify.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

using namespace tessera;
using Clock = std::chrono::steady_clock;

namespace {

// A unix datagram socket standing in for systemd's; sets NOTIFY_SOCKET and
// WATCHDOG_USEC for the notifier made while it lives.
class NotifySocket {
 public:
  explicit NotifySocket(const char* watchdog_usec) {
    path_ = std::filesystem::temp_directory_path() / ("tessera-notify-" + std::to_string(::getpid()) + ".sock");
    std::filesystem::remove(path_);
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    ::setenv("NOTIFY_SOCKET", path_.c_str(), 1);
    if (watchdog_usec)
      ::setenv("WATCHDOG_USEC", watchdog_usec, 1);
    else
      ::unsetenv("WATCHDOG_USEC");
    ::unsetenv("WATCHDOG_PID");
  }
  ~NotifySocket() {
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("WATCHDOG_USEC");
    ::close(fd_);
    std::filesystem::remove(path_);
  }
  // The next datagram, or "" when none comes within `timeout`.
  std::string Receive(std::chrono::milliseconds timeout) {
    timeval tv{};
    tv.tv_sec = timeout.count() / 1000;
    tv.tv_usec = (timeout.count() % 1000) * 1000;
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[4096];
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    return n > 0 ? std::string(buf, n) : std::string();
  }
  // Every datagram of the next `span`.
  std::vector<std::string> ReceiveFor(std::chrono::milliseconds span) {
    std::vector<std::string> got;
    const auto end = Clock::now() + span;
    while (Clock::now() < end) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      std::string m = Receive(std::max(left, std::chrono::milliseconds(1)));
      if (!m.empty()) got.push_back(m);
    }
    return got;
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
};

int Count(const std::vector<std::string>& messages, const std::string& what) {
  int n = 0;
  for (const auto& m : messages) n += m == what;
  return n;
}

}  // namespace

TEST_CASE("service notifier: READY with STATUS, watchdog pings only while healthy, STOPPING", "[cluster][systemd]") {
  NotifySocket systemd("400000");  // WatchdogSec=0.4s: a ping every 200 ms
  std::atomic<bool> healthy{true};
  std::mutex mu;
  std::string state = "no program";
  ServiceNotifyOptions options;
  options.healthy = [&] { return healthy.load(); };
  options.describe = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return state;
  };
  ServiceNotifier notifier(std::move(options));
  REQUIRE(notifier.active());
  REQUIRE(notifier.ping_interval() == std::chrono::milliseconds(200));

  notifier.Ready();
  CHECK(systemd.Receive(std::chrono::seconds(2)) == "READY=1\nSTATUS=no program");
  // ~5 pings in 1.1 s; none lost, none much early.
  auto pings = systemd.ReceiveFor(std::chrono::milliseconds(1100));
  CHECK(Count(pings, "WATCHDOG=1") >= 3);
  CHECK(Count(pings, "WATCHDOG=1") <= 7);
  CHECK(Count(pings, "WATCHDOG=1") == static_cast<int>(pings.size()));

  // Unhealthy: the pings stop (systemd would restart the daemon), though the
  // status still changes.
  healthy = false;
  systemd.ReceiveFor(std::chrono::milliseconds(250));  // a ping already under way
  {
    std::lock_guard<std::mutex> lock(mu);
    state = "serving plan p1 as device 0";
  }
  auto silent = systemd.ReceiveFor(std::chrono::milliseconds(1100));
  CHECK(Count(silent, "WATCHDOG=1") == 0);
  CHECK(Count(silent, "STATUS=serving plan p1 as device 0") == 1);

  healthy = true;
  auto back = systemd.ReceiveFor(std::chrono::milliseconds(800));
  CHECK(Count(back, "WATCHDOG=1") >= 2);

  notifier.Stopping();
  std::string last;
  for (std::string m; !(m = systemd.Receive(std::chrono::milliseconds(300))).empty();) last = m;
  CHECK(last == "STOPPING=1\nSTATUS=stopping");
  // Nothing after STOPPING=1: the thread is gone.
  CHECK(systemd.ReceiveFor(std::chrono::milliseconds(500)).empty());
}

TEST_CASE("service notifier: no watchdog without WATCHDOG_USEC or for another pid", "[cluster][systemd]") {
  NotifySocket systemd(nullptr);
  {
    ServiceNotifier notifier({});
    CHECK(notifier.active());
    CHECK(notifier.ping_interval().count() == 0);
    notifier.Ready();
    CHECK(systemd.Receive(std::chrono::seconds(2)) == "READY=1");
    CHECK(systemd.ReceiveFor(std::chrono::milliseconds(1300)).empty());
    notifier.Stopping();
    CHECK(systemd.Receive(std::chrono::seconds(2)) == "STOPPING=1\nSTATUS=stopping");
  }
  ::setenv("WATCHDOG_USEC", "400000", 1);
  ::setenv("WATCHDOG_PID", std::to_string(::getpid() + 1).c_str(), 1);  // meant for another process
  ServiceNotifier other({});
  CHECK(other.ping_interval().count() == 0);
  ::unsetenv("WATCHDOG_PID");
}

TEST_CASE("service notifier: a no-op without NOTIFY_SOCKET", "[cluster][systemd]") {
  NotifySocket systemd("400000");
  ::unsetenv("NOTIFY_SOCKET");  // the socket exists, but nobody told the daemon
  int calls = 0;
  ServiceNotifyOptions options;
  options.healthy = [&] { return ++calls > 0; };
  options.describe = [&] { return ++calls > 0 ? "x" : "y"; };
  ServiceNotifier notifier(std::move(options));
  CHECK_FALSE(notifier.active());
  CHECK(notifier.ping_interval().count() == 0);
  notifier.Ready();
  CHECK(systemd.ReceiveFor(std::chrono::milliseconds(700)).empty());
  notifier.Stopping();
  CHECK(systemd.Receive(std::chrono::milliseconds(200)).empty());
  CHECK(calls == 0);
}
