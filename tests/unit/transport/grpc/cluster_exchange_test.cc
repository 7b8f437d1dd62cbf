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

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

TEST_CASE("exchange: an aborted request fails its waiters at once with the reason", "[cluster][exchange]") {
  ExchangeInbox inbox;
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

  // DropRequest clears the abort: the id may be used again.
  inbox.DropRequest(7);
  REQUIRE(inbox.Deliver(1, id, 0, 2, "ok").ok());
  auto again = inbox.Take(1, id, std::chrono::milliseconds(100));
  REQUIRE(again.ok());
  CHECK(*again == "ok");
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
