#include "daemon/cluster/service_notify.h"

#include <spdlog/spdlog.h>
#include <systemd/sd-daemon.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace tessera {

namespace {

std::chrono::microseconds WatchdogPingInterval() {
  uint64_t usec = 0;
  // > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID (if set) is us.
  if (sd_watchdog_enabled(/*unset_environment=*/0, &usec) <= 0 || usec == 0) return std::chrono::microseconds(0);
  return std::chrono::microseconds(std::max<uint64_t>(usec / 2, 1));
}

// STATUS= is one line: a newline would start another assignment.
std::string OneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

}  // namespace

ServiceNotifier::ServiceNotifier(ServiceNotifyOptions options)
    : options_(std::move(options)),
      active_(std::getenv("NOTIFY_SOCKET") != nullptr && *std::getenv("NOTIFY_SOCKET") != '\0'),
      ping_interval_(active_ ? WatchdogPingInterval() : std::chrono::microseconds(0)) {}

ServiceNotifier::~ServiceNotifier() { StopThread(); }

void ServiceNotifier::Send(const std::string& message) {
  if (!active_) return;
  const int rc = sd_notify(/*unset_environment=*/0, message.c_str());
  if (rc < 0 && !send_failed_) {
    send_failed_ = true;
    spdlog::warn("systemd notify socket {}: {} ({}); systemd may consider this service not ready",
                 std::getenv("NOTIFY_SOCKET"), std::strerror(-rc), message.substr(0, message.find('\n')));
  }
}

void ServiceNotifier::Ready() {
  if (!active_) return;
  std::string message = "READY=1";
  if (options_.describe) {
    last_status_ = OneLine(options_.describe());
    if (!last_status_.empty()) message += "\nSTATUS=" + last_status_;
  }
  Send(message);
  if (ping_interval_.count() > 0)
    spdlog::info("systemd watchdog: pinging every {} ms while healthy", ping_interval_.count() / 1000);
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void ServiceNotifier::Stopping() {
  StopThread();
  Send("STOPPING=1\nSTATUS=stopping");
}

void ServiceNotifier::StopThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ServiceNotifier::Loop() {
  using Clock = std::chrono::steady_clock;
  // Wake at least once a second for STATUS changes; pings only every
  // ping_interval_ (a failed health check is retried at the next wake).
  const auto tick = ping_interval_.count() > 0
                        ? std::min<std::chrono::microseconds>(ping_interval_, std::chrono::seconds(1))
                        : std::chrono::microseconds(std::chrono::seconds(1));
  Clock::time_point last_ping = Clock::now();  // READY=1 counts as alive for systemd
  bool unhealthy_logged = false;
  std::unique_lock<std::mutex> lock(mu_);
  while (!wake_.wait_for(lock, tick, [this] { return stop_; })) {
    lock.unlock();
    if (options_.describe) {
      std::string status = OneLine(options_.describe());
      if (status != last_status_) {
        last_status_ = status;
        Send("STATUS=" + status);
      }
    }
    // A small margin so that jitter of the wake-up does not skip a ping.
    if (ping_interval_.count() > 0 && Clock::now() - last_ping >= ping_interval_ * 9 / 10) {
      if (!options_.healthy || options_.healthy()) {
        Send("WATCHDOG=1");
        last_ping = Clock::now();
        if (unhealthy_logged) spdlog::info("systemd watchdog: health check passes again; pinging");
        unhealthy_logged = false;
      } else if (!unhealthy_logged) {
        unhealthy_logged = true;
        spdlog::warn(
            "systemd watchdog: own health check failed; ping withheld (systemd restarts the service "
            "when this lasts WatchdogSec)");
      }
    }
    lock.lock();
  }
}

}  // namespace tessera
