#include "daemon/cli/demo_support.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <csignal>
#include <fstream>
#include <thread>

#include "daemon/cluster/worker_tensor.h"
#include "daemon/runtime/executor.h"
#include "daemon/runtime/seeded_input.h"

namespace tessera::demo {

namespace {

// Worker processes of this demo; also read by the signal handler.
pid_t g_workers[kMaxChildren];
volatile sig_atomic_t g_num_workers = 0;

void KillWorkers(int sig) {
  for (int i = 0; i < g_num_workers; ++i)
    if (g_workers[i] > 0) kill(g_workers[i], sig);
}

void OnSignal(int sig) {
  KillWorkers(SIGKILL);
  _exit(128 + sig);
}

}  // namespace

ChildProcesses::~ChildProcesses() {
  KillWorkers(SIGTERM);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (int i = 0; i < g_num_workers; ++i) {
    while (g_workers[i] > 0 && waitpid(g_workers[i], nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > until) {
        kill(g_workers[i], SIGKILL);
        waitpid(g_workers[i], nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    g_workers[i] = 0;
  }
  g_num_workers = 0;
}

void InstallSignalHandlers() {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
}

void KillChild(int slot, int sig) {
  if (slot >= 0 && slot < g_num_workers && g_workers[slot] > 0) kill(g_workers[slot], sig);
}

Result<int> SpawnChild(const std::string& program, std::vector<std::string> args, const std::string& log_path) {
  if (g_num_workers >= kMaxChildren) return Status::ResourceExhausted("too many child processes");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return Status::FromErrno(errno, "fork");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    if (!log_path.empty()) {
      const int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
      }
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(program.c_str(), argv.data());
    _exit(127);
  }
  const int index = g_num_workers;
  g_workers[index] = pid;
  g_num_workers = index + 1;
  return index;
}

Result<std::vector<std::string>> StartWorkers(int n, const std::string& dir, int threads,
                                              const std::vector<std::vector<std::string>>& extra_args,
                                              std::vector<int>* slots) {
  InstallSignalHandlers();
  const std::string level = spdlog::level::to_string_view(spdlog::get_level()).data();
  std::vector<int> slot(n);
  for (int i = 0; i < n; ++i) {
    const std::string name = "w" + std::to_string(i + 1);
    const std::string port_file = dir + "/" + name + ".port";
    const std::string t = std::to_string(threads), data = dir + "/" + name;
    std::vector<std::string> args = {"tessera", "--log-level", level, "worker", "--listen", "127.0.0.1:0", "--name",
                                     name, "--port-file", port_file, "--data-dir", data, "--threads", t};
    if (i < static_cast<int>(extra_args.size())) args.insert(args.end(), extra_args[i].begin(), extra_args[i].end());
    TS_ASSIGN_OR_RETURN(slot[i], SpawnChild("/proc/self/exe", args, ""));
  }
  if (slots) *slots = slot;
  std::vector<std::string> addresses(n);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int i = 0; i < n; ++i) {
    const std::string port_file = dir + "/w" + std::to_string(i + 1) + ".port";
    const pid_t pid = g_workers[slot[i]];
    while (!std::filesystem::exists(port_file)) {
      int wstatus = 0;
      if (waitpid(pid, &wstatus, WNOHANG) == pid) {
        g_workers[slot[i]] = 0;
        return Status::Unavailable("worker w" + std::to_string(i + 1) + " exited before listening");
      }
      if (std::chrono::steady_clock::now() > until)
        return Status::DeadlineExceeded("worker w" + std::to_string(i + 1) + " did not start listening within 30 s");
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    std::ifstream(port_file) >> addresses[i];
  }
  return addresses;
}

std::vector<double> QuantizedOutputSteps(const Graph& graph) {
  std::vector<double> steps;
  for (int v : graph.outputs) {
    double step = 0;
    for (const Node& n : graph.nodes)
      if (n.op == "QuantizeDequantize" && !n.outputs.empty() && n.outputs[0] == v) step = n.attrs.Float("scale", 0.0);
    steps.push_back(step);
  }
  return steps;
}

std::pair<double, double> Differences(const std::vector<TensorData>& got, const std::vector<TensorData>& want) {
  double max_abs = 0, max_ref = 0;
  for (size_t o = 0; o < want.size(); ++o) {
    if (o >= got.size() || got[o].values.size() != want[o].values.size()) return {INFINITY, INFINITY};
    for (size_t k = 0; k < want[o].values.size(); ++k) {
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(got[o].values[k] - want[o].values[k])));
      max_ref = std::max(max_ref, static_cast<double>(std::fabs(want[o].values[k])));
    }
  }
  return {max_abs, max_ref > 0 ? max_abs / max_ref : max_abs};
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Result<std::unique_ptr<LocalGateway>> StartLocalGateway(GatewayOptions options) {
  auto lg = std::make_unique<LocalGateway>();
  TS_ASSIGN_OR_RETURN(lg->gateway, Gateway::Create(std::move(options)));
  lg->service = std::make_unique<GatewayService>(lg->gateway.get());
  std::string address;
  TS_ASSIGN_OR_RETURN(lg->server, StartGatewayServer(lg->service.get(), "127.0.0.1:0", TransportSecurity{}, &address));
  TS_ASSIGN_OR_RETURN(auto channel, OpenChannel(address, TransportSecurity{}));
  lg->stub = proto::Gateway::NewStub(channel);
  return lg;
}

Status InferThroughGateway(proto::Gateway::Stub& stub, const std::vector<TensorData>& inputs, uint64_t request_id,
                           int64_t timeout_ms, std::vector<TensorData>* outputs, double* ms) {
  proto::InferRequest req;
  req.set_request_id(request_id);
  req.set_deadline_unix_ms(UnixMillisNow() + timeout_ms);
  for (const auto& t : inputs) *req.add_inputs() = ToTensorMsg(t);
  grpc::ClientContext ctx;
  proto::InferReply reply;
  const auto s0 = std::chrono::steady_clock::now();
  grpc::Status gs = stub.Infer(&ctx, req, &reply);
  *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s0).count();
  TS_RETURN_IF_ERROR(FromGrpcStatus(gs, "Infer"));
  outputs->clear();
  for (int o = 0; o < reply.outputs_size(); ++o) {
    TS_ASSIGN_OR_RETURN(auto t, FromTensorMsg(reply.outputs(o), "output " + std::to_string(o)));
    outputs->push_back(std::move(t));
  }
  return Status::OK();
}

std::optional<proto::WorkerStatusReply> WorkerStatus(const std::string& address) {
  auto channel = OpenChannel(address, TransportSecurity{});
  if (!channel.ok()) return std::nullopt;
  auto stub = proto::Worker::NewStub(*channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  proto::StatusRequest req;
  proto::WorkerStatusReply reply;
  if (!stub->GetStatus(&ctx, req, &reply).ok()) return std::nullopt;
  return reply;
}

Result<Reference> RunReference(const Graph& graph, int threads, int kinds, int first_repeats) {
  ExecutorOptions eo;
  eo.threads = threads;
  TS_ASSIGN_OR_RETURN(auto ex, Executor::Create(graph, eo));
  Reference r;
  r.inputs.resize(kinds);
  r.outputs.resize(kinds);
  for (int k = 0; k < kinds; ++k) {
    for (size_t i = 0; i < graph.inputs.size(); ++i)
      r.inputs[k].push_back(SeededInput(graph.values[graph.inputs[i]].shape, 1 + k * 16 + i));
    for (int rep = 0; rep < (k == 0 ? first_repeats : 1); ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      TS_RETURN_IF_ERROR(ex->Run(r.inputs[k], &r.outputs[k]));
      r.ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  return r;
}

std::string FindMcuFirmware() {
  if (const char* env = std::getenv("TESSERA_MCU_FIRMWARE")) return env;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  return (exe.parent_path() / "firmware" / "tessera_mcu_worker.elf").string();
}

bool QemuInstalled() {
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    const size_t end = p.find(':', start);
    const std::string dir = p.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty() && access((dir + "/qemu-system-arm").c_str(), X_OK) == 0) return true;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return false;
}

Result<std::string> BootQemuMcu(const std::string& firmware, const std::string& log_path,
                                const std::vector<std::string>& more_serials) {
  std::vector<std::string> args = {"qemu-system-arm", "-M",   "mps2-an386", "-nodefaults", "-display", "none",
                                   "-monitor",        "none", "-serial",    "pty"};
  for (const std::string& serial : more_serials) {
    args.push_back("-serial");
    args.push_back(serial);
  }
  args.push_back("-kernel");
  args.push_back(firmware);
  TS_ASSIGN_OR_RETURN(const int slot, SpawnChild("qemu-system-arm", args, log_path));
  const pid_t pid = g_workers[slot];
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    std::ifstream in(log_path);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find("/dev/pts/");
    if (at != std::string::npos) {
      size_t end = at + 9;
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      if (end > at + 9) return text.substr(at, end - at);
    }
    int wstatus = 0;
    if (waitpid(pid, &wstatus, WNOHANG) == pid)
      return Status::Unavailable("qemu-system-arm exited at boot: " + text);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::DeadlineExceeded("qemu-system-arm did not report its serial pty within 10 s (" + log_path + ")");
}

}  // namespace tessera::demo
