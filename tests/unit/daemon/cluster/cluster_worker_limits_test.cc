// Issue 14, "Unbounded memory", against real `tessera worker` processes on
// loopback: this test is the hostile peer. A LoadProgram that announces
// 8 GiB must not make the worker reserve it; Exchange frames for requests
// the worker never runs (or already finished) must be dropped and counted,
// not kept; and the workers still answer correctly afterwards.
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "daemon/cluster/gateway.h"
#include "tests/unit/daemon/cluster/cluster_test_support.h"
#include "daemon/cluster/gateway_plan.h"
#include "daemon/cluster/worker_tensor.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/seeded_input.h"
#include "partition/import/model_import.h"
#include "util/limits.h"

extern char** environ;

using namespace tessera;

namespace {

// The default cluster of these tests, at 448² (large messages).
struct LimitsCluster : TwoWorkerCluster {
  LimitsCluster() : TwoWorkerCluster("worker-limits") {}
};

}  // namespace

TEST_CASE("worker: a LoadProgram announcing 8 GiB is refused at once and reserves nothing (issue 14)",
          "[cluster][limits]") {
  const auto scratch = std::filesystem::temp_directory_path() / ("tessera-load-limit-" + std::to_string(::getpid()));
  WorkerProcess worker("w", scratch);
  auto stub = WorkerStub(worker.address);
  const int64_t vm_before = ProcStatusBytes(worker.pid, "VmSize");
  REQUIRE(vm_before > 0);
  for (const int64_t announced : {int64_t{8} << 30, kMaxProgramBytes}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    proto::LoadProgramReply reply;
    auto writer = stub->LoadProgram(&ctx, &reply);
    proto::ProgramChunk header;
    header.set_plan_id("p");
    header.set_seq(0);
    header.set_num_devices(1);
    header.set_total_bytes(announced);
    header.set_data(std::string(kChunkBytes, 'x'));
    writer->Write(header);
    // The stream stays open: whatever the worker reserves for the claim is held now.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const int64_t vm_during = ProcStatusBytes(worker.pid, "VmSize");
    INFO("announced " << announced << " bytes; worker VmSize " << vm_before << " -> " << vm_during);
    CHECK(vm_during - vm_before < (int64_t{256} << 20));
    writer->WritesDone();
    grpc::Status st = writer->Finish();
    REQUIRE_FALSE(st.ok());
    if (announced > kMaxProgramBytes) {
      CHECK(st.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
      CHECK_THAT(st.error_message(), Catch::Contains("out of range") && Catch::Contains(std::to_string(kMaxProgramBytes)));
    } else {
      CHECK(st.error_code() == grpc::StatusCode::DATA_LOSS);  // ended after 1 MiB of the announced size
    }
  }
  CHECK(worker.alive());
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
}

TEST_CASE("worker: exchange frames for requests it never runs or already finished are dropped, not kept (issue 14)",
          "[cluster][limits]") {
  LimitsCluster c;
  c.InferAndCheck();  // warm: runners and streams exist
  // The device that receives the largest message, and from whom.
  int target = -1;
  std::tuple<int, int64_t, int64_t> largest{-1, -1, 0};
  for (int d = 0; d < 2; ++d) {
    auto l = LargestReceived(c.served.programs[d]);
    if (std::get<2>(l) > std::get<2>(largest)) largest = l, target = d;
  }
  const auto [from, message, bytes] = largest;
  INFO("device " << target << " receives message " << message << " of " << bytes << " bytes from device " << from);
  REQUIRE(bytes >= (int64_t{1} << 20));  // large enough that keeping 100 of them shows
  int64_t per_request_from_peer = 0;
  for (const auto& s : c.served.programs[target].steps)
    if (s.kind == StepKind::kRecv && s.peer == from) per_request_from_peer += s.bytes();

  const pid_t pid = c.workers[target]->pid;
  auto stub = WorkerStub(c.workers[target]->address);
  const int64_t rss_before = ProcStatusBytes(pid, "VmRSS");
  const std::string payload(static_cast<size_t>(bytes), '\x01');
  {
    // 100 request ids nobody will run (far from the gateway's ids).
    HostilePeer peer(*stub);
    for (uint32_t r = 0; r < 100; ++r) peer.Send(c.served.plan_id, from, 0x7ff00000u + r, message, payload);
    auto codes = peer.Close();
    CHECK(codes[static_cast<int>(StatusCode::kResourceExhausted)] >= 100 - kMaxEarlyRequestsPerPeer);
  }
  const int64_t rss_after = ProcStatusBytes(pid, "VmRSS");
  const int64_t bound = (kMaxEarlyRequestsPerPeer + 1) * per_request_from_peer + (int64_t{48} << 20);
  INFO("worker RSS " << rss_before << " -> " << rss_after << " after 100 x " << bytes << " bytes; bound +" << bound);
  CHECK(rss_after - rss_before < bound);
  auto status = WorkerStatus(*stub);
  CHECK(status.exchange_dropped().early_over_limit() >= 100 - kMaxEarlyRequestsPerPeer);
  CHECK(status.exchange_dropped().early_bytes_held() <= kMaxEarlyRequestsPerPeer * per_request_from_peer);

  // A frame for a request that already finished here is dropped at once.
  const uint64_t done = c.InferAndCheck().worker_request_id;
  {
    HostilePeer peer(*stub);
    peer.Send(c.served.plan_id, from, static_cast<uint32_t>(done), message, payload);
    auto codes = peer.Close();
    CHECK(codes[static_cast<int>(StatusCode::kFailedPrecondition)] >= 1);
  }
  // A message the program does not receive, and a size it does not expect.
  {
    HostilePeer peer(*stub);
    peer.Send(c.served.plan_id, from, static_cast<uint32_t>(done) + 1000, 0xfffffff, "abcd");
    proto::TensorFrame f;
    f.set_plan_id(c.served.plan_id);
    f.set_from_device(from);
    f.set_message((static_cast<int64_t>(done + 1001) << 32) | message);
    f.set_total_bytes(int64_t{1} << 40);  // a claim of 1 TiB
    f.set_data("x");
    REQUIRE(peer.stream->Write(f));
    auto codes = peer.Close();
    CHECK(codes[static_cast<int>(StatusCode::kInvalidArgument)] == 2);
  }
  status = WorkerStatus(*stub);
  CHECK(status.exchange_dropped().finished() >= 1);
  CHECK(status.exchange_dropped().unexpected() >= 2);
  // The workers survived all of it and still answer correctly.
  for (auto& w : c.workers) CHECK(w->alive());
  c.InferAndCheck();
}
