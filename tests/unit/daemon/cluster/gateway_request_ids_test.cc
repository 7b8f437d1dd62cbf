// The gateway's worker-side request ids (WorkerRequestIds): random, unique in
// flight, and never one of the recently drawn ids — a worker drops early
// frames of an id it remembers as finished (ExchangeInbox), so a repeat
// inside that window would make a request wait for frames it dropped.
#include <catch2/catch.hpp>

#include <deque>
#include <set>

#include "daemon/cluster/gateway.h"

using namespace tessera;

TEST_CASE("worker request ids: a random draw that repeats a recent or in-flight id is drawn again", "[gateway][ids]") {
  // A generator with only 6 values (and 0, never an id): with a window of 4
  // every id must differ from the 4 before it.
  uint32_t k = 0;
  WorkerRequestIds ids(4, [&k] { return k++ % 7; });
  std::deque<uint32_t> last;
  for (int i = 0; i < 200; ++i) {
    const uint32_t id = ids.Take();
    INFO("draw " << i << " gave " << id);
    CHECK(id != 0);
    for (uint32_t seen : last) CHECK(id != seen);
    last.push_back(id);
    if (last.size() > 4) last.pop_front();
    ids.Release(id);
  }
}

TEST_CASE("worker request ids: in-flight ids are never drawn twice and the top bit is never set", "[gateway][ids]") {
  uint32_t k = 0;
  // Values 1..5 with the top bit set on every other: the id is taken below 2^31.
  WorkerRequestIds ids(2, [&k] {
    ++k;
    return (k % 5 + 1) | (k % 2 ? 0x80000000u : 0u);
  });
  std::set<uint32_t> held;
  for (int i = 0; i < 5; ++i) {
    const uint32_t id = ids.Take();
    CHECK(id < (1u << 31));
    CHECK(held.insert(id).second);  // not released: never drawn twice
  }
  CHECK(held == std::set<uint32_t>{1, 2, 3, 4, 5});
}

TEST_CASE("worker request ids: the default generator draws 10 000 distinct ids in a row", "[gateway][ids]") {
  WorkerRequestIds ids;
  std::set<uint32_t> seen;
  for (int i = 0; i < 10000; ++i) {
    const uint32_t id = ids.Take();
    ids.Release(id);
    REQUIRE(id != 0);
    REQUIRE(id < (1u << 31));
    seen.insert(id);
  }
  // The window is kRememberedFinishedRequests (4096): ids may repeat only
  // farther apart than that, and a random 31-bit draw practically never does.
  CHECK(seen.size() >= 9990);
}
