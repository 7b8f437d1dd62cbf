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

// Destroys `sender` on a detached thread and says whether that finished
// within `seconds`: a regression fails the test instead of hanging it (the
// stuck sender is then leaked).
bool DestroyedWithin(std::unique_ptr<PeerSender> sender, double seconds) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([raw = sender.release(), done] {
    delete raw;
    *done = true;
  }).detach();
  const auto t0 = Clock::now();
  while (!*done && SecondsSince(t0) < seconds) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return *done;
}

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

TEST_CASE("exchange: an expected message is written straight into the receiver's memory, frame by frame",
          "[cluster][exchange]") {
  // The program receives message 3 (6 bytes, in frames) and message 4 (2 bytes).
  ExchangeInbox inbox({{{1, 3}, 6}, {{1, 4}, 2}});
  inbox.BeginRequest(9);
  const int64_t m3 = *ComposeMessageId(9, 3), m4 = *ComposeMessageId(9, 4);
  char arena[8] = {'.', '.', '.', '.', '.', '.', '.', '.'};
  // A frame that came before Expect is copied there (and freed); the rest lands there directly.
  REQUIRE(inbox.Deliver(1, m3, 0, 6, "ab").ok());
  inbox.Expect(1, m3, arena, 6);
  CHECK(std::string(arena, 2) == "ab");
  REQUIRE(inbox.Deliver(1, m3, 2, 6, "cd").ok());
  CHECK(std::string(arena, 4) == "abcd");
  // Out of order: refused; the sender's restart from offset 0 starts over.
  CHECK(inbox.Deliver(1, m3, 5, 6, "f").code() == StatusCode::kDataLoss);
  REQUIRE(inbox.Deliver(1, m3, 0, 6, "AB").ok());
  REQUIRE(inbox.Deliver(1, m3, 2, 6, "CD").ok());
  auto waiter =
      std::async(std::launch::async, [&] { return inbox.TakeInto(1, m3, arena, 6, std::chrono::seconds(30)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  CHECK(waiter.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);  // not complete yet
  REQUIRE(inbox.Deliver(1, m3, 4, 6, "EF").ok());
  REQUIRE(waiter.get().ok());
  CHECK(std::string(arena, 8) == "ABCDEF..");
  // Once forgotten, nothing writes there: a later frame is held and dropped at the end.
  inbox.Expect(1, m4, arena + 6, 2);
  inbox.Forget(1, 9);
  REQUIRE(inbox.Deliver(1, m4, 0, 2, "zz").ok());
  CHECK(std::string(arena, 8) == "ABCDEF..");
  // A message nobody expected is still received, copied into place.
  char other[2];
  REQUIRE(inbox.TakeInto(1, m4, other, 2, std::chrono::milliseconds(100)).ok());
  CHECK(std::string(other, 2) == "zz");
  CHECK(inbox.dropped().frames == 1);  // the out-of-order frame
  inbox.FinishRequest(9);
  // A finished request's messages are never written anywhere.
  inbox.Expect(1, m4, arena + 6, 2);
  CHECK(inbox.Deliver(1, m4, 0, 2, "yy").code() == StatusCode::kFailedPrecondition);
  CHECK(std::string(arena, 8) == "ABCDEF..");
}

TEST_CASE("exchange: a sender connecting to a dead peer shuts down promptly", "[cluster][exchange]") {
  // A loopback port nobody listens on: the stream waits for the peer (wait
  // for ready) until the sender is destroyed.
  auto channel = OpenChannel("127.0.0.1:1", TransportSecurity{});
  REQUIRE(channel.ok());
  auto sender = std::make_unique<PeerSender>(*channel, "plan", 0, 1, "127.0.0.1:1");
  REQUIRE(sender->Send(*ComposeMessageId(1, 1), std::string(1000, 'x')).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the writer is now blocked connecting
  CHECK(DestroyedWithin(std::move(sender), 5.0));
}

TEST_CASE("exchange: a request that ends takes its borrowed messages back at once, even from a dead peer's sender",
          "[cluster][exchange]") {
  auto channel = OpenChannel("127.0.0.1:1", TransportSecurity{});
  REQUIRE(channel.ok());
  auto sender = std::make_unique<PeerSender>(*channel, "plan", 0, 1, "127.0.0.1:1");
  std::vector<char> arena(4096, 'a');
  const int64_t m1 = *ComposeMessageId(5, 1), m2 = *ComposeMessageId(5, 2), other = *ComposeMessageId(6, 1);
  REQUIRE(sender->SendBorrowed(m1, arena.data(), 1000).ok());
  REQUIRE(sender->SendBorrowed(m2, arena.data() + 1000, 1000).ok());
  REQUIRE(sender->SendBorrowed(other, arena.data() + 2000, 1000).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the writer took m1 and waits for the peer
  // Not sent: waiting for it ends at the deadline, with the reason.
  const auto t0 = Clock::now();
  const Status waited = sender->WaitSent(m1, Clock::now() + std::chrono::milliseconds(200));
  CHECK(waited.code() == StatusCode::kDeadlineExceeded);
  CHECK(waited.message().find("was not sent by the request's deadline") != std::string::npos);
  CHECK(SecondsSince(t0) < 2.0);
  // The request ends: its messages are given back at once, the queued and the one being written.
  const auto t1 = Clock::now();
  sender->Drop(5);
  CHECK(SecondsSince(t1) < 1.0);
  CHECK(sender->WaitSent(m1, Clock::now()).ok());
  CHECK(sender->WaitSent(m2, Clock::now()).ok());
  // Another request's message is still the link's.
  CHECK(sender->WaitSent(other, Clock::now() + std::chrono::milliseconds(50)).code() == StatusCode::kDeadlineExceeded);
  CHECK(DestroyedWithin(std::move(sender), 5.0));
}

}  // namespace
}  // namespace tessera
