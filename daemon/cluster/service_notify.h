// Tells systemd how a daemon (`tessera worker`, `tessera gateway`) is doing,
// for units with Type=notify and WatchdogSec= (deploy/systemd/): the
// sd_notify(3) protocol through libsystemd.
//
//   READY=1     once the daemon listens (a worker after resuming its program)
//   STATUS=...  a one-line state ("serving plan X as device 1", "no program"),
//               sent again whenever it changes
//   WATCHDOG=1  every WATCHDOG_USEC/2, only while the daemon's own health
//               check passes: a daemon whose gRPC server stops answering is
//               restarted by systemd instead of staying up and useless
//   STOPPING=1  on SIGTERM, before the servers shut down
//
// Without NOTIFY_SOCKET (not started by systemd, or a unit of another Type)
// every call is a no-op and no thread is started.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace tessera {

struct ServiceNotifyOptions {
  // True while the daemon answers (e.g. an in-process Health call to its own
  // gRPC server). Called on the notifier's thread before each watchdog ping;
  // false withholds the ping, and a call that hangs withholds all later ones.
  // Must return within about a quarter of the watchdog interval.
  std::function<bool()> healthy;
  // A short human state for STATUS=; polled once a second (at least), sent
  // when it differs from the last one sent. May be empty (no STATUS= lines).
  std::function<std::string()> describe;
};

// Thread-safety: Ready() and Stopping() from one thread (the daemon's main
// loop); the callbacks run on the notifier's own thread.
class ServiceNotifier {
 public:
  explicit ServiceNotifier(ServiceNotifyOptions options);
  // Stops the thread; sends nothing (call Stopping() first when stopping).
  ~ServiceNotifier();
  ServiceNotifier(const ServiceNotifier&) = delete;
  ServiceNotifier& operator=(const ServiceNotifier&) = delete;

  // Sends READY=1 with the current STATUS= and starts the thread that
  // reports STATUS changes and pings the watchdog.
  void Ready();
  // Stops the thread and sends STOPPING=1.
  void Stopping();

  // Whether the process was started with a NOTIFY_SOCKET.
  bool active() const { return active_; }
  // Half of WATCHDOG_USEC (how often WATCHDOG=1 is sent); zero when systemd
  // asked for no watchdog (no WATCHDOG_USEC, or one meant for another pid).
  std::chrono::microseconds ping_interval() const { return ping_interval_; }

 private:
  void Send(const std::string& message);
  void Loop();
  void StopThread();

  const ServiceNotifyOptions options_;
  const bool active_;
  const std::chrono::microseconds ping_interval_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;         // GUARDED_BY(mu_)
  std::string last_status_;   // only touched by Ready() before the thread starts, then by the thread
  bool send_failed_ = false;  // a failed sd_notify is logged once
  std::thread thread_;
};

}  // namespace tessera
