#include "daemon/cluster/worker.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "daemon/cluster/service_notify.h"
#include "daemon/cluster/worker_mcu_bridge.h"
#include "daemon/runtime/device_memory.h"
#include "partition/compile/program_codec.h"
#include "transport/tls/content_hash.h"
#include "util/cpu_share.h"
#include "util/limits.h"
#include "util/process_memory.h"

namespace tessera {

// The promise prices each peer's link at frames of this size (device_memory.h).
static_assert(kLinkFrameBytes == static_cast<int64_t>(kExchangeFrameBytes),
              "kLinkBytesPerPeer (the promise) must follow the tensor frame size");

namespace fs = std::filesystem;

proto::TensorMsg ToTensorMsg(const TensorData& tensor) {
  proto::TensorMsg m;
  m.set_dtype("float32");
  for (int64_t d : tensor.shape) m.add_shape(d);
  m.set_data(reinterpret_cast<const char*>(tensor.values.data()), tensor.values.size() * sizeof(float));
  return m;
}

Result<TensorData> FromTensorMsg(const proto::TensorMsg& msg, const std::string& what) {
  if (!msg.dtype().empty() && msg.dtype() != "float32")
    return Status::InvalidArgument(what + " has dtype '" + msg.dtype() + "'; only float32 is accepted");
  TensorData t;
  t.shape.assign(msg.shape().begin(), msg.shape().end());
  TS_ASSIGN_OR_RETURN(const int64_t n, CheckedElementCount(t.shape, what));
  if (static_cast<int64_t>(msg.data().size()) != n * 4)
    return Status::InvalidArgument(what + " has " + std::to_string(msg.data().size()) + " bytes of data, its shape " +
                                   ShapeToString(t.shape) + " needs " + std::to_string(n * 4));
  t.values.resize(static_cast<size_t>(n));
  if (n) std::memcpy(t.values.data(), msg.data().data(), msg.data().size());
  return t;
}

// One loaded program and everything that serves it. In-flight requests hold
// a shared_ptr, so a reload never pulls a program from under a running request.
struct WorkerService::Loaded {
  proto::ProgramChunk header;  // plan id, device, peers, device names (data cleared)
  std::string program_sha256;  // the program's identity: SHA-256 of its encoded bytes
  DeviceProgram program;
  std::unique_ptr<ExchangeInbox> inbox;  // made once the program is known (its Recv steps)
  std::map<int, std::unique_ptr<PeerSender>> senders;       // devices this program sends to
  std::map<int, std::unique_ptr<proto::Worker::Stub>> stubs;  // every other device (fan-out)
  int64_t memory_bytes = 0, weight_bytes = 0;
  int64_t working_bytes = 0, buffer_bytes = 0;  // memory_bytes's parts (Linux worker)
  McuLoadInfo mcu;  // bridge mode: what the MCU holds

  // Certificate names that may start a request (Run with fan_out) with TLS:
  // every identity that loaded this very program, and the run_callers they
  // named. Grows when the same program is loaded again by someone else.
  mutable std::mutex callers_mu;
  std::set<std::string> run_callers;  // GUARDED_BY(callers_mu)

  // Kernels prepared once (weights packed once); one runner (its pipeline
  // buffers) per request in flight, taking turns in the prepared program's
  // working memories.
  std::shared_ptr<const PreparedProgram> prepared;
  std::mutex pool_mu;
  std::vector<std::unique_ptr<ProgramRunner>> idle;  // GUARDED_BY(pool_mu)
  int runners = 0;                                   // GUARDED_BY(pool_mu)

  ~Loaded() {
    if (inbox) inbox->Close();
  }
};

Result<McuPort> ParseMcuPort(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    return Status::InvalidArgument("--mcu '" + text +
                                            "': expected NAME=PORT[@BAUD][,listen=HOST:PORT], e.g. "
                                            "mcu1=/dev/ttyUSB0@115200,listen=0.0.0.0:7071");
  McuPort port;
  port.name = text.substr(0, eq);
  port.serial = text.substr(eq + 1);
  if (const size_t comma = port.serial.find(','); comma != std::string::npos) {
    const std::string option = port.serial.substr(comma + 1);
    port.serial = port.serial.substr(0, comma);
    const size_t colon = option.rfind(':');
    if (option.rfind("listen=", 0) != 0 || colon == std::string::npos || colon + 1 == option.size() ||
        option.find_first_not_of("0123456789", colon + 1) != std::string::npos)
      return Status::InvalidArgument("--mcu '" + text + "': '" + option +
                                              "' is not listen=HOST:PORT (where this worker serves the MCU)");
    port.listen = option.substr(7);
  }
  if (port.serial.empty()) return Status::InvalidArgument("--mcu '" + text + "': no serial port");
  const size_t at = port.serial.rfind('@');
  if (at != std::string::npos) {
    const std::string baud = port.serial.substr(at + 1);
    port.serial = port.serial.substr(0, at);
    char* end = nullptr;
    const unsigned long b = std::strtoul(baud.c_str(), &end, 10);
    if (baud.empty() || *end || b < 1200 || b > 4000000)
      return Status::InvalidArgument("--mcu '" + text + "': baud '" + baud + "' is not a rate in 1200..4000000");
    port.baud = static_cast<uint32_t>(b);
  }
  return port;
}

namespace {
void FillUartCounters(const UartLinkCounters& c, proto::UartCounters* out) {
  out->set_wire_bytes_sent(c.wire_bytes_sent);
  out->set_wire_bytes_received(c.wire_bytes_received);
  out->set_frames_sent(c.frames_sent);
  out->set_frames_received(c.frames_received);
  out->set_retransmissions(c.retransmissions);
  out->set_fast_retransmissions(c.fast_retransmissions);
  out->set_out_of_order(c.out_of_order);
  out->set_out_of_window(c.out_of_window);
  out->set_duplicates(c.duplicates);
  out->set_foreign_plan(c.foreign_plan);
  out->set_protocol_errors(c.protocol_errors);
  // Every reason, zeros included, so a dashboard sees the series exist.
  for (int r = 1; r < wire::kNumFrameErrors; ++r)
    (*out->mutable_bad_frames())[wire::FrameErrorName(static_cast<wire::FrameError>(r))] = c.bad_frames.by_reason[r];
}
}  // namespace

WorkerService::WorkerService(WorkerOptions options) : options_(std::move(options)) {
  flush_sends_ = options_.flush_sends == WorkerOptions::FlushSends::kOn;
  const CpuShare share = options_.mcu.serial.empty() ? ReadCpuShare() : CpuShare{};
  if (options_.mcu.serial.empty()) cpu_share_ = share.Describe();
  if (options_.flush_sends == WorkerOptions::FlushSends::kAuto && options_.mcu.serial.empty()) {
    flush_sends_ = options_.threads >= share.cpus();
    spdlog::info("worker {}: {} compute thread(s) on {}: {}", options_.name, options_.threads, share.Describe(),
                 flush_sends_ ? "the transport shares the compute's CPU, so a request's messages leave before each "
                                "of its compute runs (--flush-sends off to change)"
                              : "messages leave while the request computes");
  }
  if (!options_.data_dir.empty()) return;
  std::error_code ec;
  std::string pattern = (fs::temp_directory_path(ec) / "tessera-worker-XXXXXX").string();
  if (!ec && ::mkdtemp(pattern.data()) != nullptr) {
    scratch_dir_ = pattern;
  } else {
    spdlog::warn("worker {}: no scratch directory under the temporary directory; programs are received in memory",
                 options_.name);
  }
}

WorkerService::~WorkerService() {
  if (scratch_dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(scratch_dir_, ec);
}

Status WorkerService::OpenMcu() {
  if (options_.mcu.serial.empty() || bridge_) return Status::OK();
  McuBridgeOptions bo;
  bo.name = options_.mcu.name;
  bo.serial = options_.mcu.serial;
  bo.baud = options_.mcu.baud;
  TS_ASSIGN_OR_RETURN(bridge_, McuBridge::Open(bo));
  return Status::OK();
}

std::shared_ptr<WorkerService::Loaded> WorkerService::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loaded_;
}

std::shared_ptr<WorkerService::Loaded> WorkerService::Find(const std::string& plan_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (loaded_ && loaded_->header.plan_id() == plan_id) return loaded_;
  if (kept_ && kept_->header.plan_id() == plan_id) return kept_;
  return nullptr;
}

std::vector<std::shared_ptr<WorkerService::Loaded>> WorkerService::TakeAllBut(const std::string& keep_plan_id,
                                                                              const Loaded* except) {
  std::vector<std::shared_ptr<Loaded>> taken;
  for (std::shared_ptr<Loaded>* slot : {&loaded_, &kept_}) {
    if (!*slot || slot->get() == except) continue;
    if (!keep_plan_id.empty() && (*slot)->header.plan_id() == keep_plan_id) continue;
    taken.push_back(std::exchange(*slot, nullptr));
  }
  return taken;
}

void WorkerService::Retire(const std::vector<std::shared_ptr<Loaded>>& programs) {
  // Requests still running them wait for messages that will not come (their
  // peers run another program): woken now. Their memory goes with the last
  // request (destruction stops their exchange streams, outside mu_, so
  // Health and Status keep answering meanwhile).
  for (const auto& program : programs) program->inbox->Close();
}

void WorkerService::Adopt(std::shared_ptr<Loaded> next, const std::string& keep_plan_id) {
  std::vector<std::shared_ptr<Loaded>> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The MCU holds one program: a bridge keeps nothing beside it.
    const bool keep = !bridge_ && keep_plan_id != next->header.plan_id();
    released = TakeAllBut(keep ? keep_plan_id : std::string(), next.get());
    std::shared_ptr<Loaded> kept = loaded_ && loaded_ != next ? loaded_ : kept_ != next ? kept_ : nullptr;
    loaded_ = std::move(next);
    kept_ = std::move(kept);
  }
  Retire(released);
}

void WorkerService::Release(const std::string& keep_plan_id, const std::string& next_plan_id) {
  std::vector<std::shared_ptr<Loaded>> released;
  {
    std::lock_guard<std::mutex> lock(mu_);
    released = TakeAllBut(keep_plan_id, nullptr);
    if (!loaded_) loaded_ = std::exchange(kept_, nullptr);  // a kept plan still serves
  }
  for (const auto& program : released)
    spdlog::warn("worker {}: plan {} released before loading plan {} (one plan's memory at a time)", options_.name,
                 program->header.plan_id(), next_plan_id);
  Retire(released);
}

std::string WorkerService::Describe() const {
  auto loaded = current();
  if (!loaded) return "no program";
  std::string kept;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_) kept = " (plan " + kept_->header.plan_id() + " kept until retired)";
  }
  return "serving plan " + loaded->header.plan_id() + " as device " + std::to_string(loaded->header.device()) + kept;
}

namespace {
// Where LoadProgram streams a program as it arrives (in --data-dir).
constexpr const char* kReceivingFile = "program.pb.receiving";

// Writes `parts` one after the other to `path` (truncating); IOError naming the path.
Status WriteFile(const fs::path& path, const std::vector<std::string>& parts) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const std::string& bytes : parts) out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Status::IOError("cannot write " + path.string() + "; check --data-dir is writable");
  return Status::OK();
}
}  // namespace

namespace {
// Whether two load headers place the program among the same devices (the
// fields a worker acts on besides the program itself).
bool SameDevices(const proto::ProgramChunk& a, const proto::ProgramChunk& b) {
  auto as_map = [](const google::protobuf::Map<int32_t, std::string>& m) {
    return std::map<int32_t, std::string>(m.begin(), m.end());
  };
  return a.device() == b.device() && a.num_devices() == b.num_devices() && a.source() == b.source() &&
         as_map(a.peers()) == as_map(b.peers()) && as_map(a.device_names()) == as_map(b.device_names());
}

std::string JoinNames(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "nobody" : out;
}

// The first name of a caller's certificate (its CN), for messages.
std::string CallerName(const std::vector<std::string>& names) {
  return names.empty() ? "a peer without a certificate name" : "'" + names.front() + "'";
}
}  // namespace

Status WorkerService::Install(std::vector<std::string> program_chunks, const proto::ProgramChunk& header,
                              const std::string& program_sha256, bool persist, proto::LoadProgramReply* reply,
                              const std::string& program_file) {
  std::lock_guard<std::mutex> install_lock(install_mu_);
  // Who may start requests: the loader (LoadProgram sets loaded_by from its
  // certificate) and the callers it names. Kept on disk as run_callers.
  std::set<std::string> callers(header.run_callers().begin(), header.run_callers().end());
  if (!header.loaded_by().empty()) callers.insert(header.loaded_by());
  auto stored_header = [&callers](proto::ProgramChunk h) {
    h.clear_data();
    h.clear_loaded_by();
    h.clear_keep_plan_id();  // what to keep is the deploy's business, not the program's
    h.clear_run_callers();
    for (const std::string& c : callers) h.add_run_callers(c);
    return h;
  };
  const std::string plan_msg = "plan " + header.plan_id();
  if (const std::shared_ptr<Loaded> held = Find(header.plan_id())) {
    // A program is its content hash: another program (other weights, another
    // device's part) or other devices under a plan id already loaded would
    // silently change the answers of a plan everyone else runs unchanged.
    if (held->program_sha256 != program_sha256 || !SameDevices(held->header, header)) {
      ++loads_refused_;
      const std::string what = held->program_sha256 != program_sha256
                                   ? "a different program (sha256 " + program_sha256.substr(0, 12) + ")"
                                   : "the same program (sha256 " + program_sha256.substr(0, 12) +
                                         ") placed among other devices or addresses";
      return Status::AlreadyExists(
          "worker " + options_.name + " already holds " + plan_msg + " as program sha256 " +
          held->program_sha256.substr(0, 12) + "; " + what +
          " under the same plan id is refused. Deploy a changed model or cluster under a new plan id "
          "(tessera deploy and gateway derive it from the plan, the model file and the workers)");
    }
  }
  // An MCU that rebooted lost the program its bridge holds: the same
  // program again is loaded again (its redeploy), everything else is a no-op.
  bool mcu_holds_it = true;
  if (bridge_) {
    const mcu::McuStatus m = bridge_->last_status();
    mcu_holds_it = bridge_->has_status() && m.state == mcu::kStateLoaded && m.plan_id == PlanIdHash(header.plan_id());
  }
  if (const std::shared_ptr<Loaded> held = current();
      held && held->header.plan_id() == header.plan_id() && mcu_holds_it) {
    // The same program again: nothing changes but who may start requests.
    std::set<std::string> merged;
    {
      std::lock_guard<std::mutex> lock(held->callers_mu);
      held->run_callers.insert(callers.begin(), callers.end());
      merged = held->run_callers;
    }
    if (persist && !options_.data_dir.empty()) {
      callers = merged;
      const fs::path dir(options_.data_dir);
      TS_RETURN_IF_ERROR(WriteFile(dir / "program.header.tmp", {stored_header(held->header).SerializeAsString()}));
      std::error_code ec;
      fs::rename(dir / "program.header.tmp", dir / "program.header", ec);
      if (ec) return Status::IOError("cannot rename " + (dir / "program.header").string() + ".tmp: " + ec.message());
    }
    if (reply) {
      reply->set_plan_id(header.plan_id());
      reply->set_device(held->header.device());
      reply->set_bytes(header.total_bytes());
      reply->set_memory_bytes(held->memory_bytes);
      reply->set_weight_bytes(held->weight_bytes);
      reply->set_working_bytes(held->working_bytes);
      reply->set_buffer_bytes(held->buffer_bytes);
      reply->set_program_sha256(held->program_sha256);
    }
    spdlog::info("worker {}: {} device {} (sha256 {}) is already loaded; unchanged", options_.name, plan_msg,
                 held->header.device(), program_sha256.substr(0, 12));
    return Status::OK();
  }
  if (options_.security.tls)
    for (int d = 0; d < header.num_devices(); ++d)
      if (!header.device_names().count(d))
        return Status::InvalidArgument(
            "the load request gives no name for device " + std::to_string(d) +
            "; with TLS every device's certificate name is needed (deploy with this version of tessera)");
  auto loaded = std::make_shared<Loaded>();
  loaded->header = stored_header(header);
  loaded->program_sha256 = program_sha256;
  loaded->run_callers = callers;
  int64_t program_size = 0;
  for (const std::string& c : program_chunks) program_size += static_cast<int64_t>(c.size());
  if (!program_file.empty()) {
    std::error_code ec;
    program_size = static_cast<int64_t>(fs::file_size(program_file, ec));
    if (ec) return Status::IOError("cannot read " + program_file + ": " + ec.message());
  }
  // The program goes to disk first (beside, renamed into place only once it
  // loaded), so its bytes can be freed while it is decoded: one copy of the
  // program in memory at a time (issue 11). LoadProgram streams it there
  // chunk by chunk (kReceivingFile) and passes no chunks.
  persist = persist && !options_.data_dir.empty();
  const fs::path dir(options_.data_dir);
  if (persist) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (program_chunks.empty() && fs::exists(dir / kReceivingFile)) {
      program_size = header.total_bytes();
      fs::rename(dir / kReceivingFile, dir / "program.pb.tmp", ec);
      if (ec) return Status::IOError("cannot rename " + (dir / kReceivingFile).string() + ": " + ec.message());
    } else {
      TS_RETURN_IF_ERROR(WriteFile(dir / "program.pb.tmp", program_chunks));
    }
    TS_RETURN_IF_ERROR(WriteFile(dir / "program.header.tmp", {loaded->header.SerializeAsString()}));
  }
  if (header.release_current()) Release(header.keep_plan_id(), header.plan_id());
  std::string plan_id;
  const std::string origin = "program for device " + std::to_string(header.device());
  // A constant the program holds more than once (the tiles of an FFMT stack)
  // is decoded once and read by the runner from there; an MCU bridge
  // translates every subgraph with its own weights instead.
  // Decoded from a file, a Linux worker leaves every weight there until its
  // kernel reads it (a block at a time when it packs it): a load holds the
  // program as it will run plus about one chunk (issue 11 item 2).
  const bool share_constants = bridge_ == nullptr;
  if (persist) {  // parsed back from disk: the bytes are freed first
    std::vector<std::string>().swap(program_chunks);
    TS_ASSIGN_OR_RETURN(loaded->program, ParseProgramFile((dir / "program.pb.tmp").string(), origin, &plan_id,
                                                          share_constants, /*stream_constants=*/share_constants));
  } else if (!program_file.empty()) {
    TS_ASSIGN_OR_RETURN(loaded->program, ParseProgramFile(program_file, origin, &plan_id, share_constants,
                                                          /*stream_constants=*/share_constants));
  } else {
    std::string program_bytes;
    if (program_chunks.size() == 1) {
      program_bytes = std::move(program_chunks[0]);
    } else {
      program_bytes.reserve(static_cast<size_t>(program_size));  // bytes that arrived, not a claim
      for (std::string& c : program_chunks) program_bytes += c, std::string().swap(c);
    }
    TS_ASSIGN_OR_RETURN(loaded->program, ParseProgram(std::move(program_bytes), origin, &plan_id, share_constants));
  }
  if (plan_id != header.plan_id())
    return Status::InvalidArgument("the program is for plan " + plan_id + " but the load request says plan " +
                                   header.plan_id());
  if (loaded->program.device != header.device())
    return Status::InvalidArgument("the program is for device " + std::to_string(loaded->program.device) +
                                   " but the load request says device " + std::to_string(header.device()));
  if (header.num_devices() < 1 || header.device() < 0 || header.device() >= header.num_devices())
    return Status::InvalidArgument("device " + std::to_string(header.device()) + " of " +
                                   std::to_string(header.num_devices()) + " devices is out of range");
  TS_RETURN_IF_ERROR(ValidateProgram(loaded->program, header.num_devices()));
  // Every message this device receives, at its size: the inbox keeps nothing else.
  std::map<std::pair<int, int64_t>, int64_t> expected;
  for (const auto& step : loaded->program.steps)
    if (step.kind == StepKind::kRecv) expected[{step.peer, step.message}] = WireBytes(loaded->program, step);
  loaded->inbox = std::make_unique<ExchangeInbox>(std::move(expected));
  const int me = header.device();
  for (int d = 0; d < header.num_devices(); ++d)
    if (d != me && !header.peers().count(d))
      return Status::InvalidArgument("the load request gives no address for device " + std::to_string(d));

  if (bridge_) {
    // The MCU runs it: compact program over the UART, checked by STATUS.
    TS_ASSIGN_OR_RETURN(loaded->mcu, bridge_->Load(loaded->program, header.plan_id()));
    loaded->memory_bytes = loaded->mcu.status.arena_bytes - loaded->mcu.status.free_bytes;
    loaded->weight_bytes = loaded->program.WeightValues() * 4;
  } else {
    // One runner now: proves every subgraph prepares, and measures memory.
    RunnerOptions ro;
    ro.threads = options_.threads;
    ro.compute_slots = options_.compute_slots;
    ro.flush_sends = flush_sends_;
    // Each Recv waits until the request's deadline (GrpcLink caps the wait
    // at it), not a fixed minute: on Pi-class devices with requests queued
    // a message can take longer while the client's deadline is far away
    // (issue 15, bench/cluster-emulated: YOLOv2, 4 devices, 8 clients).
    ro.timeout = std::chrono::hours(24);
    // Each weight once, in the form the kernels read (issue 11): the
    // program's copy of weights a kernel repacked is freed as it prepares;
    // every request in flight gets a runner (arena) over the same kernels.
    loaded->weight_bytes = 0;
    TS_ASSIGN_OR_RETURN(loaded->prepared, PreparedProgram::PrepareReleasingWeights(&loaded->program, ro));
    loaded->program.constant_file.reset();  // every kernel has read what it needs
    TS_ASSIGN_OR_RETURN(auto runner, loaded->prepared->NewRunner());
    loaded->memory_bytes = static_cast<int64_t>(runner->memory_bytes());
    loaded->weight_bytes = static_cast<int64_t>(runner->weight_bytes());
    loaded->working_bytes = static_cast<int64_t>(loaded->prepared->working_bytes());
    loaded->buffer_bytes = static_cast<int64_t>(loaded->prepared->request_bytes());
    loaded->idle.push_back(std::move(runner));
    loaded->runners = 1;
  }

  std::set<int> send_to;
  for (const auto& s : loaded->program.steps)
    if (s.kind == StepKind::kSend) send_to.insert(s.peer);
  for (const auto& [d, address] : header.peers()) {
    if (d == me) continue;
    TS_ASSIGN_OR_RETURN(auto channel, OpenChannel(address, options_.security));
    // Connect now, not at the first request: on a slow board the first
    // handshake can outlast a fail-fast Run (issue 15, emulated Pi cluster:
    // the first request failed "failed to connect to all addresses").
    channel->GetState(/*try_to_connect=*/true);
    loaded->stubs[d] = proto::Worker::NewStub(channel);
    if (send_to.count(d)) {
      TS_ASSIGN_OR_RETURN(auto exchange_channel, OpenChannel(address, options_.security));
      exchange_channel->GetState(/*try_to_connect=*/true);
      loaded->senders[d] = std::make_unique<PeerSender>(exchange_channel, header.plan_id(), me, d, address);
    }
  }

  if (persist) {
    // Renamed into place only now: a crash or a refused program leaves the old one.
    for (const char* name : {"program.pb", "program.header"}) {
      std::error_code ec;
      fs::rename(dir / (std::string(name) + ".tmp"), dir / name, ec);
      if (ec) return Status::IOError("cannot rename " + (dir / name).string() + ".tmp: " + ec.message());
    }
  }
  if (reply) {
    reply->set_plan_id(header.plan_id());
    reply->set_device(me);
    reply->set_bytes(program_size);
    reply->set_memory_bytes(loaded->memory_bytes);
    reply->set_weight_bytes(loaded->weight_bytes);
    reply->set_working_bytes(loaded->working_bytes);
    reply->set_buffer_bytes(loaded->buffer_bytes);
    reply->set_program_sha256(program_sha256);
  }
  spdlog::info("worker {}: loaded plan {} device {} of {} ({} bytes, {} steps, sha256 {})", options_.name,
               header.plan_id(), me, header.num_devices(), program_size, loaded->program.steps.size(),
               program_sha256.substr(0, 12));
  if (!header.keep_plan_id().empty())
    spdlog::info("worker {}: plan {} stays loaded beside it until retired", options_.name, header.keep_plan_id());
  Adopt(std::move(loaded), header.keep_plan_id());
  return Status::OK();
}

Status WorkerService::ResumeFromDisk() {
  if (options_.data_dir.empty()) return Status::OK();
  const fs::path dir(options_.data_dir);
  if (!fs::exists(dir / "program.pb") || !fs::exists(dir / "program.header")) return Status::OK();
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  proto::ProgramChunk header;
  if (!header.ParseFromString(slurp(dir / "program.header")))
    return Status::DataLoss((dir / "program.header").string() + " is corrupt; redeploy (tessera deploy)");
  // Hashed and decoded from the file, a buffer at a time (never held whole).
  Sha256 content;
  {
    std::ifstream in(dir / "program.pb", std::ios::binary);
    std::vector<char> buffer(1 << 16);
    while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0)
      content.Update(std::string_view(buffer.data(), static_cast<size_t>(in.gcount())));
    if (in.bad()) return Status::IOError("cannot read " + (dir / "program.pb").string());
  }
  return Install({}, header, content.HexDigest(), /*persist=*/false, nullptr, (dir / "program.pb").string())
      .WithContext("resuming from " + options_.data_dir);
}

grpc::Status WorkerService::LoadProgram(grpc::ServerContext* context, grpc::ServerReader<proto::ProgramChunk>* reader,
                                        proto::LoadProgramReply* reply) {
  proto::ProgramChunk chunk, header;
  // The chunks as they arrive: memory follows the bytes received, never
  // the size the header announces (issue 14: 8 GiB announced were
  // reserved up front). With a --data-dir each chunk goes straight to
  // kReceivingFile and is freed (issue 11: a load holds one chunk, then
  // Install decodes the file once); without one they are kept for Install.
  std::vector<std::string> chunks;
  const fs::path receive_dir = options_.data_dir.empty() ? fs::path(scratch_dir_) : fs::path(options_.data_dir);
  const bool stream = !receive_dir.empty();
  const fs::path receiving = receive_dir / kReceivingFile;
  std::ofstream out;
  struct RemoveOnExit {
    const fs::path& path;
    bool active;
    ~RemoveOnExit() {
      std::error_code ec;
      if (active) fs::remove(path, ec);
    }
  } cleanup{receiving, stream};
  int64_t received = 0;
  int64_t expected_seq = 0;
  Sha256 content;  // of the encoded program, as it arrives: the program's identity
  const std::string peer = DescribePeer(*context);
  spdlog::info("worker {}: program load from {}", options_.name, peer);
  while (reader->Read(&chunk)) {
    if (chunk.seq() != expected_seq)
      return ToGrpcStatus(Status::InvalidArgument("program chunk " + std::to_string(chunk.seq()) +
                                                  " arrived, expected " + std::to_string(expected_seq)));
    if (expected_seq == 0) {
      header = chunk;
      header.clear_data();
      if (header.total_bytes() <= 0 || header.total_bytes() > kMaxProgramBytes)
        return ToGrpcStatus(Status::InvalidArgument(
            "program size " + std::to_string(header.total_bytes()) + " bytes is out of range: a device program may have 1 to " +
            std::to_string(kMaxProgramBytes) + " bytes (util/limits.h kMaxProgramBytes)"));
    } else if (chunk.plan_id() != header.plan_id() && !chunk.plan_id().empty()) {
      return ToGrpcStatus(Status::InvalidArgument("program chunks of two plans in one load"));
    }
    received += static_cast<int64_t>(chunk.data().size());
    if (received > header.total_bytes())
      return ToGrpcStatus(Status::InvalidArgument("program chunks exceed the announced " +
                                                  std::to_string(header.total_bytes()) + " bytes"));
    content.Update(chunk.data());
    if (stream) {
      if (!out.is_open()) {
        std::error_code ec;
        fs::create_directories(receive_dir, ec);
        out.open(receiving, std::ios::binary | std::ios::trunc);
      }
      out.write(chunk.data().data(), static_cast<std::streamsize>(chunk.data().size()));
      if (!out)
        return ToGrpcStatus(Status::IOError("cannot write " + receiving.string() + "; check --data-dir is writable"));
      ++expected_seq;
      continue;
    }
    // Small chunks are joined (up to kChunkBytes each): what a load holds
    // follows the bytes received, not how many chunks a peer cut them into.
    if (!chunks.empty() && chunks.back().size() + chunk.data().size() <= kChunkBytes)
      chunks.back() += chunk.data();
    else
      chunks.push_back(std::move(*chunk.mutable_data()));
    ++expected_seq;
  }
  if (expected_seq == 0) return ToGrpcStatus(Status::InvalidArgument("empty program load"));
  if (received != header.total_bytes())
    return ToGrpcStatus(Status::DataLoss("program load ended after " + std::to_string(received) + " of " +
                                         std::to_string(header.total_bytes()) + " bytes"));
  if (stream) {
    out.close();
    if (!out) return ToGrpcStatus(Status::IOError("cannot write " + receiving.string()));
  }
  // Who loaded it is what its certificate says, never what the request says.
  header.clear_loaded_by();
  if (const std::vector<std::string> names = PeerCertificateNames(*context); !names.empty())
    header.set_loaded_by(names.front());
  // With --data-dir Install moves the file into place; without, it decodes
  // the scratch file, removed when this returns (cleanup above).
  Status st = Install(std::move(chunks), header, content.HexDigest(), /*persist=*/true, reply,
                      options_.data_dir.empty() && stream ? receiving.string() : std::string());
  if (!st.ok()) spdlog::warn("worker {}: load from {} refused: {}", options_.name, peer, st.ToString());
  return ToGrpcStatus(st);
}

grpc::Status WorkerService::Health(grpc::ServerContext*, const proto::HealthRequest* request,
                                   proto::HealthReply* reply) {
  auto loaded = current();
  reply->set_name(options_.name);
  reply->set_seq(request->seq());
  reply->set_plan_id(loaded ? loaded->header.plan_id() : "");
  reply->set_device(loaded ? loaded->header.device() : -1);
  // A plan kept beside the current one still serves (a gateway swapping plans).
  reply->set_serving(request->plan_id().empty() || Find(request->plan_id()) != nullptr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_) reply->set_kept_plan_id(kept_->header.plan_id());
  }
  if (bridge_ && loaded && bridge_->has_status()) {
    // An MCU that rebooted (or refused) no longer holds the plan: not serving
    // until redeployed. Figures from the last STATUS (Status RPC, load).
    const mcu::McuStatus s = bridge_->last_status();
    if (s.state != mcu::kStateLoaded || s.plan_id != PlanIdHash(loaded->header.plan_id())) reply->set_serving(false);
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::GetStatus(grpc::ServerContext* context, const proto::StatusRequest* request,
                                   proto::WorkerStatusReply* reply) {
  auto loaded = current();
  reply->set_name(options_.name);
  if (bridge_) {
    // Free RAM and program id from the MCU itself (a STATUS frame); when it
    // does not answer in time (busy computing) the last known figures.
    // Within the caller's deadline (the gateway polls with 500 ms).
    auto budget = std::chrono::milliseconds(3000);
    if (context) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(context->deadline() -
                                                                             std::chrono::system_clock::now()) -
                        std::chrono::milliseconds(100);
      budget = std::clamp(left, std::chrono::milliseconds(1), budget);
    }
    // A STATUS frame queues behind tensors on the UART: no answer in time is
    // normal during a request (the last figures are reported then).
    if (auto s = bridge_->QueryStatus(budget); !s.ok())
      spdlog::debug("worker {}: reporting the last MCU status: {}", options_.name, s.status().ToString());
  }
  reply->set_seq(request->seq());
  if (options_.mcu.serial.empty()) {
    reply->set_flush_sends(flush_sends_);
    reply->set_cpu_share(cpu_share_);
  }
  reply->set_requests_ok(requests_ok_);
  reply->set_requests_failed(requests_failed_);
  reply->set_in_flight(in_flight_);
  reply->set_peak_in_flight(peak_in_flight_);
  const ProcessMemory memory = ReadProcessMemory();
  reply->set_rss_bytes(memory.rss_bytes);
  reply->set_peak_rss_bytes(memory.peak_rss_bytes);
  reply->set_requests_refused(requests_refused_);
  reply->set_loads_refused(loads_refused_);
  proto::ExchangeDrops* x = reply->mutable_exchange_dropped();
  x->set_foreign_plan(foreign_plan_frames_);
  x->set_frames(foreign_plan_frames_);
  x->set_bytes(foreign_plan_bytes_);
  if (!loaded) return grpc::Status::OK;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_) reply->set_kept_plan_id(kept_->header.plan_id());
  }
  reply->set_plan_id(loaded->header.plan_id());
  reply->set_program_sha256(loaded->program_sha256);
  reply->set_device(loaded->header.device());
  reply->set_num_devices(loaded->header.num_devices());
  reply->set_memory_bytes(loaded->memory_bytes);
  if (bridge_ && bridge_->has_status()) {
    const mcu::McuStatus s = bridge_->last_status();
    reply->set_memory_bytes(static_cast<int64_t>(s.arena_bytes) - s.free_bytes);
  }
  if (bridge_) FillUartCounters(bridge_->counters(), reply->mutable_uart());
  if (bridge_ && bridge_->has_status()) {
    const mcu::McuStatus s = bridge_->last_status();
    proto::McuState* m = reply->mutable_mcu();
    m->set_state(s.state);
    m->set_plan_id(s.plan_id);
    m->set_arena_bytes(s.arena_bytes);
    m->set_free_bytes(s.free_bytes);
    m->set_last_error(s.last_error);
    m->set_runs(s.runs);
    m->set_last_run_ms(s.last_run_ms);
    m->set_flash_bytes(s.flash_bytes);
    m->set_flash_free_bytes(s.flash_free_bytes);
    m->set_firmware_ram_bytes(s.firmware_ram_bytes);
    m->set_stack_peak_bytes(s.stack_peak_bytes);
    for (uint32_t k = 0; k < mcu::kMaxPorts; ++k) {
      m->add_port_payload_sent(s.port_payload_sent[k]);
      m->add_port_payload_received(s.port_payload_received[k]);
    }
  }
  reply->set_weight_bytes(loaded->weight_bytes);
  reply->set_working_bytes(loaded->working_bytes);
  reply->set_buffer_bytes(loaded->buffer_bytes);
  if (loaded->prepared) reply->set_working_memories(loaded->prepared->working_memories());
  {
    std::lock_guard<std::mutex> lock(loaded->pool_mu);
    reply->set_runners(loaded->runners);
  }
  const ExchangeDropCounters dropped = loaded->inbox->dropped();
  x->set_frames(x->frames() + dropped.frames);
  x->set_bytes(x->bytes() + dropped.bytes);
  x->set_wrong_sender(dropped.wrong_sender);
  x->set_unexpected(dropped.unexpected);
  x->set_finished(dropped.finished);
  x->set_early_over_limit(dropped.early_over_limit);
  x->set_early_bytes_held(dropped.early_bytes_held);
  proto::ExchangeMemory* em = reply->mutable_exchange_memory();
  em->set_heap_bytes(dropped.heap_bytes);
  em->set_heap_peak_bytes(dropped.heap_peak_bytes);
  for (const auto& [d, sender] : loaded->senders) {
    const LinkCountersSnapshot c = sender->counters();
    auto* l = reply->add_links();
    l->set_from_device(c.from);
    l->set_to_device(c.to);
    l->set_payload_bytes(c.payload_bytes);
    l->set_wire_bytes(c.wire_bytes);
    l->set_messages(c.messages);
    em->set_copied_messages(em->copied_messages() + c.copied_messages);
    em->set_arena_messages(em->arena_messages() + c.messages - c.copied_messages);
  }
  return grpc::Status::OK;
}

Status WorkerService::RunRequest(Loaded& loaded, const proto::RunRequest& request, proto::RunReply* reply) {
  const DeviceProgram& program = loaded.program;
  const int me = loaded.header.device();
  const std::string who = "worker " + options_.name + " (device " + std::to_string(me) + ")";
  if (request.request_id() >= (1u << 31))
    return Status::InvalidArgument("request id " + std::to_string(request.request_id()) + " must be below 2^31");
  const uint32_t request_id = static_cast<uint32_t>(request.request_id());
  const int64_t now_ms = UnixMillisNow();
  const int64_t deadline_ms = request.deadline_unix_ms() > 0 ? request.deadline_unix_ms() : now_ms + 60000;
  if (deadline_ms <= now_ms) return Status::DeadlineExceeded("request " + std::to_string(request_id) + " arrived after its deadline");
  const auto steady_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms - now_ms);

  // One model of a merged plan (a scenario): its steps only.
  int scenario = -1;
  if (!request.model().empty()) {
    std::string names;
    for (size_t s = 0; s < program.scenarios.size(); ++s) {
      if (program.scenarios[s].name == request.model()) scenario = static_cast<int>(s);
      names += (names.empty() ? "'" : ", '") + program.scenarios[s].name + "'";
    }
    if (scenario < 0)
      return Status::InvalidArgument(who + ": the plan has no model '" + request.model() + "'" +
                                     (names.empty() ? " (it serves one model; name none)" : "; it has " + names));
    if (bridge_)
      return Status::FailedPrecondition(who +
                                        " is a microcontroller, whose firmware runs every step of its "
                                        "program: a request for one model of merged ones cannot run on a plan "
                                        "with an MCU; send it without a model name");
  }
  auto needed_input = [&](int value) {
    if (scenario < 0) return true;
    const auto& in = program.scenarios[scenario].inputs;
    return std::find(in.begin(), in.end(), value) != in.end();
  };
  // Inputs: matched by graph value id against the buffers the program fills.
  std::vector<TensorData> inputs(program.model_inputs.size());
  std::vector<bool> given(program.model_inputs.size(), false);
  if (request.inputs_size() != request.input_values_size())
    return Status::InvalidArgument("the request has " + std::to_string(request.inputs_size()) + " inputs but " +
                                   std::to_string(request.input_values_size()) + " input value ids");
  for (int i = 0; i < request.inputs_size(); ++i) {
    size_t k = 0;
    while (k < program.model_inputs.size() && program.model_inputs[k].first != request.input_values(i)) ++k;
    if (k == program.model_inputs.size())
      return Status::InvalidArgument(who + " does not take graph value " + std::to_string(request.input_values(i)) +
                                     " as a model input");
    TS_ASSIGN_OR_RETURN(inputs[k], FromTensorMsg(request.inputs(i), "input " + std::to_string(i)));
    const Shape want = program.buffers[program.model_inputs[k].second].shape();
    if (inputs[k].shape != want)
      return Status::InvalidArgument("input " + std::to_string(i) + " has shape " + ShapeToString(inputs[k].shape) +
                                     ", the model expects " + ShapeToString(want));
    given[k] = true;
  }
  for (size_t k = 0; k < given.size(); ++k)
    if (!given[k] && needed_input(program.model_inputs[k].first))
      return Status::InvalidArgument(who + " needs model input (graph value " +
                                     std::to_string(program.model_inputs[k].first) + ") and the request lacks it");

  if (bridge_) return RelayToMcu(loaded, request, steady_deadline, reply);

  // A runner from the pool (one per in-flight request).
  std::unique_ptr<ProgramRunner> runner;
  {
    std::lock_guard<std::mutex> lock(loaded.pool_mu);
    if (!loaded.idle.empty()) {
      runner = std::move(loaded.idle.back());
      loaded.idle.pop_back();
    } else if (loaded.runners >= options_.max_in_flight) {
      return Status::ResourceExhausted(who + " already runs " + std::to_string(loaded.runners) + " requests");
    } else {
      ++loaded.runners;
    }
  }
  if (!runner) {
    auto created = loaded.prepared->NewRunner();
    if (!created.ok()) {
      std::lock_guard<std::mutex> lock(loaded.pool_mu);
      --loaded.runners;
      return created.status();
    }
    runner = std::move(*created);
  }

  // The source starts the request on every other device of the plan.
  std::vector<std::pair<int, std::future<grpc::Status>>> peers_done;
  std::vector<std::shared_ptr<grpc::ClientContext>> peer_contexts;  // cancelled if this device fails
  if (request.fan_out()) {
    for (auto& [d, stub] : loaded.stubs) {
      proto::Worker::Stub* s = stub.get();
      proto::RunRequest peer_request;
      peer_request.set_plan_id(request.plan_id());
      peer_request.set_request_id(request.request_id());
      peer_request.set_deadline_unix_ms(deadline_ms);
      peer_request.set_fan_out(false);
      peer_request.set_model(request.model());
      // A device that fails (its worker died, or refused the request) aborts
      // the request here at once: the source stops waiting for messages that
      // will not come, and the gateway can fail over while time is left.
      const std::string peer_name = "device " + std::to_string(d) + " (" + loaded.header.peers().at(d) + ")";
      ExchangeInbox* inbox = loaded.inbox.get();
      auto ctx = std::make_shared<grpc::ClientContext>();
      ctx->set_deadline(DeadlineFromUnixMillis(deadline_ms));
      peer_contexts.push_back(ctx);
      // gRPC's callback API: no thread of ours waits on the peer's Run (a
      // thread per peer per request cost the source a thread start each).
      // The callback runs on a gRPC thread; everything it touches is owned
      // by it or outlives the futures waited on below.
      auto done = std::make_shared<std::promise<grpc::Status>>();
      auto call =
          std::make_shared<std::pair<proto::RunRequest, proto::RunReply>>(std::move(peer_request), proto::RunReply{});
      peers_done.emplace_back(d, done->get_future());
      s->async()->Run(ctx.get(), &call->first, &call->second, [done, call, inbox, peer_name, ctx](grpc::Status gs) {
        if (!gs.ok())
          inbox->AbortRequest(static_cast<uint32_t>(call->first.request_id()), FromGrpcStatus(gs, peer_name));
        done->set_value(gs);
      });
    }
  }

  std::vector<std::unique_ptr<GrpcLink>> links;
  std::vector<Link*> peers(static_cast<size_t>(loaded.header.num_devices()), nullptr);
  for (int d = 0; d < loaded.header.num_devices(); ++d) {
    if (d == me) continue;
    auto it = loaded.senders.find(d);
    links.push_back(std::make_unique<GrpcLink>(it == loaded.senders.end() ? nullptr : it->second.get(),
                                               loaded.inbox.get(), d, request_id, steady_deadline));
    peers[d] = links.back().get();
  }
  std::vector<TensorData> outputs;
  const auto t0 = std::chrono::steady_clock::now();
  Status st =
      runner->Run(peers, inputs, &outputs, scenario).WithContext(who + ", request " + std::to_string(request_id));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  {
    std::lock_guard<std::mutex> lock(loaded.pool_mu);
    loaded.idle.push_back(std::move(runner));
  }
  // Failed here (a peer died, a message never came): stop the peers' Runs
  // instead of waiting for them to run into the deadline too.
  if (!st.ok())
    for (auto& ctx : peer_contexts) ctx->TryCancel();
  for (auto& [d, done] : peers_done) {
    grpc::Status ps = done.get();
    if (!ps.ok() && st.ok())
      st = FromGrpcStatus(ps, "device " + std::to_string(d) + " (" + loaded.header.peers().at(d) + ")");
  }
  if (!st.ok()) return st;
  reply->set_plan_id(request.plan_id());
  reply->set_request_id(request.request_id());
  reply->set_seconds(seconds);
  for (size_t k = 0; k < outputs.size(); ++k) {
    if (scenario >= 0 && outputs[k].values.empty()) continue;  // another model's
    *reply->add_outputs() = ToTensorMsg(outputs[k]);
    reply->add_output_values(program.model_outputs[k].first);
  }
  return Status::OK();
}

Status WorkerService::RelayToMcu(Loaded& loaded, const proto::RunRequest& request,
                                         std::chrono::steady_clock::time_point deadline, proto::RunReply* reply) {
  const int me = loaded.header.device();
  const uint32_t request_id = static_cast<uint32_t>(request.request_id());
  std::vector<std::unique_ptr<GrpcLink>> links;
  std::vector<Link*> peers(static_cast<size_t>(loaded.header.num_devices()), nullptr);
  for (int d = 0; d < loaded.header.num_devices(); ++d) {
    if (d == me) continue;
    auto it = loaded.senders.find(d);
    links.push_back(std::make_unique<GrpcLink>(it == loaded.senders.end() ? nullptr : it->second.get(),
                                               loaded.inbox.get(), d, request_id, deadline));
    peers[d] = links.back().get();
  }
  const auto t0 = std::chrono::steady_clock::now();
  Status st = bridge_->Relay(loaded.program, peers, deadline)
                           .WithContext("MCU " + options_.name + " (device " + std::to_string(me) + "), request " +
                                        std::to_string(request_id));
  if (!st.ok()) return st;
  reply->set_plan_id(request.plan_id());
  reply->set_request_id(request.request_id());
  reply->set_seconds(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return Status::OK();
}

Status WorkerService::CheckRunCaller(const Loaded& loaded, const std::vector<std::string>& caller,
                                              bool fan_out) const {
  if (!options_.security.tls) return Status::OK();  // plaintext: nobody proves a name
  const std::string plan = "plan " + loaded.header.plan_id();
  if (fan_out) {
    std::lock_guard<std::mutex> lock(loaded.callers_mu);
    for (const std::string& name : loaded.run_callers)
      if (PeerIs(caller, name)) return Status::OK();
    return Status::PermissionDenied(
        "worker " + options_.name + " refuses to start a request of " + plan + " for " + CallerName(caller) +
        ": only " + JoinNames(loaded.run_callers) +
        " may (the identity that deployed the plan and the gateways it named, tessera deploy --gateway-name)");
  }
  // Without fan_out a Run joins a request the source device started.
  const auto it = loaded.header.device_names().find(loaded.header.source());
  if (it != loaded.header.device_names().end() && PeerIs(caller, it->second)) return Status::OK();
  return Status::PermissionDenied(
      "worker " + options_.name + " refuses Run of " + plan + " from " + CallerName(caller) +
      ": its requests reach device " + std::to_string(loaded.header.device()) + " only from the source device " +
      std::to_string(loaded.header.source()) + " ('" +
      (it == loaded.header.device_names().end() ? std::string("?") : it->second) + "')");
}

grpc::Status WorkerService::Run(grpc::ServerContext* context, const proto::RunRequest* request, proto::RunReply* reply) {
  auto loaded = Find(request->plan_id());
  if (!loaded) {
    const auto held = current();
    if (!held)
      return ToGrpcStatus(Status::FailedPrecondition("worker " + options_.name +
                                                     " holds no program; deploy one first (tessera deploy)"));
    return ToGrpcStatus(Status::FailedPrecondition("worker " + options_.name + " holds plan " + held->header.plan_id() +
                                                   ", not plan '" + request->plan_id() + "'"));
  }
  if (context) {
    if (Status allowed = CheckRunCaller(*loaded, PeerCertificateNames(*context), request->fan_out());
        !allowed.ok()) {
      ++requests_refused_;
      spdlog::warn("worker {}: request {} refused: {}", options_.name, request->request_id(), allowed.message());
      return ToGrpcStatus(allowed);
    }
  }
  const int now_running = ++in_flight_;
  for (int peak = peak_in_flight_.load(); now_running > peak && !peak_in_flight_.compare_exchange_weak(peak, now_running);) {
  }
  // Frames for this request are kept from here until it finishes, and
  // dropped after (ExchangeInbox).
  const uint32_t inbox_id = static_cast<uint32_t>(request->request_id());
  const bool valid_id = request->request_id() < (1u << 31);
  if (valid_id) loaded->inbox->BeginRequest(inbox_id);
  Status st = RunRequest(*loaded, *request, reply);
  if (valid_id) loaded->inbox->FinishRequest(inbox_id);
  --in_flight_;
  if (st.ok()) {
    ++requests_ok_;
  } else {
    ++requests_failed_;
    spdlog::warn("worker {}: request {} failed: {}", options_.name, request->request_id(), st.ToString());
  }
  return ToGrpcStatus(st);
}

grpc::Status WorkerService::Exchange(grpc::ServerContext* context,
                                     grpc::ServerReaderWriter<proto::ExchangeAck, proto::TensorFrame>* stream) {
  // Frames are accepted only from the peer the plan says sends them: with
  // TLS the name in the caller's certificate must be the plan's name for
  // from_device; in plaintext (nobody proves a name) from_device must be a
  // device that sends this message to this one (ExchangeInbox checks it)
  // and stays the same on one stream (a PeerSender speaks for one device).
  const std::vector<std::string> caller = context ? PeerCertificateNames(*context) : std::vector<std::string>();
  const bool tls = options_.security.tls != nullptr;
  int stream_from = -1;
  proto::TensorFrame frame;
  while (stream->Read(&frame)) {
    auto loaded = Find(frame.plan_id());
    const int from = frame.from_device();
    const int64_t size = static_cast<int64_t>(frame.data().size());
    Status st;
    if (!loaded) {
      ++foreign_plan_frames_;
      foreign_plan_bytes_ += size;
      st = Status::FailedPrecondition("worker " + options_.name + " does not hold plan '" + frame.plan_id() +
                                               "'; frame dropped");
    } else if (from < 0 || from >= loaded->header.num_devices()) {
      loaded->inbox->CountWrongSender(size);
      st = Status::InvalidArgument("frame claims device " + std::to_string(from) + ", which plan " +
                                            loaded->header.plan_id() + " does not have; dropped");
    } else if (stream_from >= 0 && from != stream_from) {
      loaded->inbox->CountWrongSender(size);
      st = Status::PermissionDenied("this exchange stream carries device " + std::to_string(stream_from) +
                                             "'s frames; a frame claiming device " + std::to_string(from) +
                                             " is dropped");
    } else if (from == loaded->header.device()) {
      loaded->inbox->CountWrongSender(size);
      st = Status::InvalidArgument("frame claims device " + std::to_string(from) +
                                            ", this worker's own device; dropped");
    } else if (const auto name = loaded->header.device_names().find(from);
               tls && (name == loaded->header.device_names().end() || !PeerIs(caller, name->second))) {
      loaded->inbox->CountWrongSender(size);
      st = Status::PermissionDenied(
          "frame claims device " + std::to_string(from) + " ('" +
          (name == loaded->header.device_names().end() ? std::string("?") : name->second) + "') of plan " +
          loaded->header.plan_id() + " but comes from " + CallerName(caller) + "; dropped");
    } else {
      stream_from = from;
      st = loaded->inbox->Deliver(from, frame.message(), frame.offset(), frame.total_bytes(), frame.data());
    }
    if (!st.ok()) {
      proto::ExchangeAck ack;
      ack.set_seq(frame.seq());
      ack.set_code(static_cast<int>(st.code()));
      ack.set_error(st.message());
      if (!stream->Write(ack)) break;
    }
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::Retire(grpc::ServerContext* context, const proto::RetireRequest* request,
                                   proto::RetireReply* reply) {
  std::shared_ptr<Loaded> retired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    reply->set_plan_id(loaded_ ? loaded_->header.plan_id() : "");
    if (loaded_ && loaded_->header.plan_id() == request->plan_id())
      return ToGrpcStatus(Status::FailedPrecondition("worker " + options_.name + " runs plan " + request->plan_id() +
                                                     " as its current program; only a plan kept beside the "
                                                     "current one (a gateway swapping plans) is retired"));
    if (!kept_ || kept_->header.plan_id() != request->plan_id()) return grpc::Status::OK;
    // Only who may start the kept plan's requests may end its life.
    if (context)
      if (Status allowed = CheckRunCaller(*kept_, PeerCertificateNames(*context), /*fan_out=*/true); !allowed.ok())
        return ToGrpcStatus(allowed);
    retired = std::exchange(kept_, nullptr);
  }
  retired->inbox->Close();
  retired.reset();
  reply->set_released(true);
  spdlog::info("worker {}: plan {} retired; serving plan {}", options_.name, request->plan_id(), reply->plan_id());
  return grpc::Status::OK;
}

namespace {
std::atomic<bool> g_stop{false};
void OnStopSignal(int) { g_stop = true; }
}  // namespace

Status ServeWorker(const std::string& listen, const WorkerOptions& options, const std::string& port_file,
                   const std::vector<McuPort>& mcus) {
  WorkerService service(options);
  if (Status st = service.ResumeFromDisk(); !st.ok())
    spdlog::warn("worker {}: not resuming: {}", options.name, st.ToString());
  TS_ASSIGN_OR_RETURN(auto credentials, ServerCredentialsFor(listen, options.security));
  const std::string host = listen.substr(0, listen.rfind(':'));
  auto start = [&](WorkerService* s, const std::string& address, int* port) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(address, credentials, port);
    ConfigureServer(&builder);
    builder.RegisterService(s);
    return builder.BuildAndStart();
  };
  int port = 0;
  std::unique_ptr<grpc::Server> server = start(&service, listen, &port);
  if (!server || port == 0) return Status::Unavailable("cannot listen on " + listen + " (address in use?)");
  const std::string bound = host + ":" + std::to_string(port);
  spdlog::info("worker {} listening on {}", options.name, bound);
  std::string port_lines = bound + "\n";

  // The MCUs this worker owns: one Worker service each, on a port of their
  // own, so the gateway and the peers address them as devices.
  std::vector<std::unique_ptr<WorkerService>> mcu_services;
  std::vector<std::unique_ptr<grpc::Server>> mcu_servers;
  for (const McuPort& mcu : mcus) {
    WorkerOptions mo = options;
    mo.name = mcu.name;
    mo.data_dir.clear();  // the MCU keeps nothing across its own reboot; redeploy
    mo.max_in_flight = std::max(options.max_in_flight, 1);
    mo.mcu = mcu;
    auto s = std::make_unique<WorkerService>(mo);
    TS_RETURN_IF_ERROR(s->OpenMcu().WithContext("worker " + options.name + ", MCU " + mcu.name));
    int mcu_port = 0;
    const std::string mcu_listen = mcu.listen.empty() ? host + ":0" : mcu.listen;
    if (!mcu.listen.empty()) TS_RETURN_IF_ERROR(ServerCredentialsFor(mcu.listen, options.security).status());
    auto srv = start(s.get(), mcu_listen, &mcu_port);
    if (!srv || mcu_port == 0)
      return Status::Unavailable("cannot listen on " + mcu_listen + " for MCU " + mcu.name + " (address in use?)");
    const std::string mcu_bound = mcu_listen.substr(0, mcu_listen.rfind(':')) + ":" + std::to_string(mcu_port);
    spdlog::info("worker {}: MCU {} ({}) served on {}", options.name, mcu.name, mcu.serial, mcu_bound);
    port_lines += mcu.name + "=" + mcu_bound + "\n";
    mcu_services.push_back(std::move(s));
    mcu_servers.push_back(std::move(srv));
  }
  if (!port_file.empty()) {
    const std::string tmp = port_file + ".tmp";
    { std::ofstream(tmp) << port_lines; }
    std::filesystem::rename(tmp, port_file);
  }
  // systemd (Type=notify, WatchdogSec=): ready now that it listens with the
  // program of --data-dir resumed. The watchdog pings while the server
  // answers its own Health call: in-process (no TLS handshake) but through
  // the same handler threads a remote caller gets.
  auto self = proto::Worker::NewStub(server->InProcessChannel(grpc::ChannelArguments()));
  ServiceNotifyOptions notify;
  notify.healthy = [&self, &options, probe_budget = std::chrono::milliseconds(500)] {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + probe_budget);
    proto::HealthRequest request;
    proto::HealthReply reply;
    const grpc::Status st = self->Health(&context, request, &reply);
    if (!st.ok()) spdlog::warn("worker {}: own Health call failed: {}", options.name, st.error_message());
    return st.ok();
  };
  notify.describe = [&service, &mcu_services, &mcus] {
    std::string line = service.Describe();
    for (size_t i = 0; i < mcu_services.size(); ++i)
      line += "; MCU " + mcus[i].name + ": " + mcu_services[i]->Describe();
    return line;
  };
  ServiceNotifier notifier(std::move(notify));
  std::signal(SIGINT, OnStopSignal);
  std::signal(SIGTERM, OnStopSignal);
  notifier.Ready();
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  notifier.Stopping();
  for (auto& srv : mcu_servers) srv->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return Status::OK();
}

}  // namespace tessera
