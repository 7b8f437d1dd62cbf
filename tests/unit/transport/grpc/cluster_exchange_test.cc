// The worker-to-worker exchange (transport/grpc/grpc_link.h) when a peer
// dies: a request waiting for its messages is aborted at once, and a sender
// still connecting to a dead peer does not block the program's unloading
// (the redeploy deadlock found by integration.cluster_failover).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <future>
#include <thread>

#include "transport/grpc/grpc_channel.h"
#include "transport/grpc/grpc_link.h"
#include "util/limits.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The program of these inboxes receives message 3 (3 bytes) and message 4
// (2 bytes) from device 1.
std::map<std::pair<int, int64_t>, int64_t> SmallProgram() { return {{{1, 3}, 3}, {{1, 4}, 2}}; }

TEST_CASE("exchange: an aborted request fails its waiters at once with the reason", "[cluster][exchange]") {
  ExchangeInbox inbox(SmallProgram());
  inbox.BeginRequest(7);
  inbox.BeginRequest(8);
  const int64_t id = *ComposeMessageId(7, 3);
  auto waiter = std::async(std::launch::async, [&] { return inbox.Take(1, id, std::chrono::seconds(30)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto t0 = Clock::now();
  inbox.AbortRequest(7, Status::Unavailable("device 1 (127.0.0.1:9) went away"));
  auto got = waiter.get();
  CHECK(SecondsSince(t0) < 1.0);
  REQUIRE_FALSE(got.ok());
  CHECK(got.status().code() == StatusCode::kUnavailable);
  CHECK(got.status().message().find("went away") != std::string::npos);

  // Other requests are untouched; a message that arrived is still delivered.
  const int64_t other = *ComposeMessageId(8, 3);
  REQUIRE(inbox.Deliver(1, other, 0, 3, "abc").ok());
  auto msg = inbox.Take(1, other, std::chrono::milliseconds(100));
  REQUIRE(msg.ok());
  CHECK(*msg == "abc");

  // Finishing clears the abort: the id may be used again once it begins again.
  inbox.FinishRequest(7);
  inbox.BeginRequest(7);
  REQUIRE(inbox.Deliver(1, *ComposeMessageId(7, 4), 0, 2, "ok").ok());
  auto again = inbox.Take(1, *ComposeMessageId(7, 4), std::chrono::milliseconds(100));
  REQUIRE(again.ok());
  CHECK(*again == "ok");
}

TEST_CASE("exchange: frames for finished requests or messages the program does not receive are dropped and counted",
          "[cluster][exchange]") {
  ExchangeInbox inbox(SmallProgram());
  inbox.BeginRequest(5);
  REQUIRE(inbox.Deliver(1, *ComposeMessageId(5, 3), 0, 3, "abc").ok());
  inbox.FinishRequest(5);  // never taken: discarded and counted
  auto late = inbox.Deliver(1, *ComposeMessageId(5, 4), 0, 2, "zz");
  CHECK(late.code() == StatusCode::kFailedPrecondition);
  CHECK(late.message().find("finished") != std::string::npos);
  // A message id the program does not receive, a sender it does not hear
  // from, a size other than the program's (a claim of 2^40 bytes included).
  inbox.BeginRequest(6);
  CHECK(inbox.Deliver(1, *ComposeMessageId(6, 9), 0, 3, "abc").IsInvalidArgument());
  CHECK(inbox.Deliver(2, *ComposeMessageId(6, 3), 0, 3, "abc").IsInvalidArgument());
  auto huge = inbox.Deliver(1, *ComposeMessageId(6, 3), 0, int64_t{1} << 40, "a");
  CHECK(huge.IsInvalidArgument());
  CHECK(huge.message().find("announces 1099511627776 bytes") != std::string::npos);
  const ExchangeDropCounters d = inbox.dropped();
  CHECK(d.finished == 2);  // the untaken message and the late frame
  CHECK(d.unexpected == 3);
  CHECK(d.frames == 5);
  CHECK(d.early_bytes_held == 0);
}

TEST_CASE("exchange: frames for requests not started are held for a few requests per peer only",
          "[cluster][exchange]") {
  ExchangeInbox inbox(SmallProgram());
  // A peer may send before this device's Run arrives: those are kept...
  for (uint32_t r = 100; r < 100 + kMaxEarlyRequestsPerPeer; ++r)
    REQUIRE(inbox.Deliver(1, *ComposeMessageId(r, 3), 0, 3, "abc").ok());
  CHECK(inbox.dropped().early_bytes_held == 3 * kMaxEarlyRequestsPerPeer);
  // ...up to the cap; frames of yet more requests are refused, not kept.
  for (uint32_t r = 1000; r < 1100; ++r) {
    auto st = inbox.Deliver(1, *ComposeMessageId(r, 3), 0, 3, "abc");
    REQUIRE(st.code() == StatusCode::kResourceExhausted);
  }
  CHECK(inbox.dropped().early_over_limit == 100);
  CHECK(inbox.dropped().early_bytes_held == 3 * kMaxEarlyRequestsPerPeer);
  // An early request that then starts gets its frames.
  inbox.BeginRequest(100);
  auto msg = inbox.Take(1, *ComposeMessageId(100, 3), std::chrono::milliseconds(100));
  REQUIRE(msg.ok());
  CHECK(*msg == "abc");
  CHECK(inbox.dropped().early_bytes_held == 3 * (kMaxEarlyRequestsPerPeer - 1));
}

TEST_CASE("exchange: a sender connecting to a dead peer shuts down promptly", "[cluster][exchange]") {
  // A loopback port nobody listens on: the stream waits for the peer (wait
  // for ready) until the sender is destroyed.
  auto channel = OpenChannel("127.0.0.1:1", TransportSecurity{});
  REQUIRE(channel.ok());
  auto sender = std::make_unique<PeerSender>(*channel, "plan", 0, 1, "127.0.0.1:1");
  REQUIRE(sender->Send(*ComposeMessageId(1, 1), std::string(1000, 'x')).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the writer is now blocked connecting
  // Destroyed on a detached thread, so that a regression fails this test
  // instead of hanging it (the stuck sender is then leaked).
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([raw = sender.release(), done] {
    delete raw;
    *done = true;
  }).detach();
  const auto t0 = Clock::now();
  while (!*done && SecondsSince(t0) < 5.0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(*done);
}

}  // namespace
}  // namespace tessera
