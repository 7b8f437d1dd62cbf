// The load of the soak bench (bench/soak/soak.py) and of
// integration.gateway_rejoin: N client threads send one input to a gateway's
// gRPC Gateway.Infer back to back, each request with its own deadline, and
// sort every request into one of four outcomes:
//
//   correct  answered, max|out-ref| / max|ref| <= 1e-5 against the reference
//   wrong    answered, anything else (shape or values)
//   errored  an error status from the gateway before the client gave up
//   lost     neither by deadline + grace (the client's own gRPC deadline)
//
// One CSV line per request goes to --log (start and end as Unix ms, so
// another process can line requests up with the faults it injected) and a
// JSON summary to stdout. Usage:
//   tessera_soak_client --gateway HOST:PORT --input x.npy --reference ref.npy
//       [--clients 32] [--duration-s 60] [--until-file PATH] [--deadline-ms 10000]
//       [--grace-ms 2000] [--log requests.csv]
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/cluster/worker_tensor.h"
#include "daemon/runtime/npy.h"
#include "proto/services.grpc.pb.h"
#include "transport/grpc/grpc_channel.h"

namespace tessera {
namespace {

struct SoakOptions {
  std::string gateway, input, reference, log, until_file;
  int clients = 32;
  double duration_s = 60;
  int64_t deadline_ms = 10000, grace_ms = 2000;
};

enum class Outcome { kCorrect, kWrong, kErrored, kLost };
const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kCorrect:
      return "correct";
    case Outcome::kWrong:
      return "wrong";
    case Outcome::kErrored:
      return "errored";
    case Outcome::kLost:
      return "lost";
  }
  return "?";
}

struct RequestRecord {
  int client = 0;
  int64_t start_unix_ms = 0, end_unix_ms = 0;
  double latency_ms = 0;
  Outcome outcome = Outcome::kLost;
  int code = 0;
  std::string message;
};

double MaxRelDiff(const TensorData& a, const TensorData& b) {
  if (a.shape != b.shape || a.values.size() != b.values.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.values.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a.values[i] - b.values[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b.values[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// One request: the gateway gets the deadline; the client waits grace longer
// before it calls the request lost.
RequestRecord OneRequest(proto::Gateway::Stub& stub, const proto::TensorMsg& input, const TensorData& reference,
                         const SoakOptions& o, int client) {
  RequestRecord r;
  r.client = client;
  proto::InferRequest req;
  r.start_unix_ms = UnixMillisNow();
  req.set_deadline_unix_ms(r.start_unix_ms + o.deadline_ms);
  *req.add_inputs() = input;
  grpc::ClientContext ctx;
  ctx.set_deadline(DeadlineFromUnixMillis(r.start_unix_ms + o.deadline_ms + o.grace_ms));
  proto::InferReply reply;
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status gs = stub.Infer(&ctx, req, &reply);
  r.latency_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  r.end_unix_ms = UnixMillisNow();
  r.code = gs.error_code();
  if (!gs.ok()) {
    // The client's own deadline: nobody answered in deadline + grace.
    const bool gave_up = gs.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
                         r.latency_ms >= static_cast<double>(o.deadline_ms + o.grace_ms) - 5;
    r.outcome = gave_up ? Outcome::kLost : Outcome::kErrored;
    r.message = gs.error_message();
    return r;
  }
  if (reply.outputs_size() != 1) {
    r.outcome = Outcome::kWrong;
    r.message = std::to_string(reply.outputs_size()) + " outputs";
    return r;
  }
  auto out = FromTensorMsg(reply.outputs(0), "output");
  const double diff = out.ok() ? MaxRelDiff(*out, reference) : INFINITY;
  r.outcome = diff <= 1e-5 ? Outcome::kCorrect : Outcome::kWrong;
  if (r.outcome == Outcome::kWrong) r.message = "max rel diff " + std::to_string(diff);
  return r;
}

std::string CsvField(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r' || c == ',' || c == '"') c = ' ';
  return s;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(std::ceil(p / 100.0 * v.size())) - (p > 0 ? 1 : 0));
  return v[i];
}

int Run(const SoakOptions& o) {
  auto input = ReadNpy(o.input);
  auto reference = ReadNpy(o.reference);
  if (!input.ok() || !reference.ok()) {
    std::fprintf(stderr, "soak: %s\n", (!input.ok() ? input.status() : reference.status()).ToString().c_str());
    return 2;
  }
  const proto::TensorMsg input_msg = ToTensorMsg(*input);
  auto channel = OpenChannel(o.gateway, TransportSecurity{});
  if (!channel.ok()) {
    std::fprintf(stderr, "soak: %s\n", channel.status().ToString().c_str());
    return 2;
  }
  auto stub = proto::Gateway::NewStub(*channel);
  std::mutex mu;
  std::vector<RequestRecord> records;
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.duration_s);
  // Bounded either way: --duration-s caps a run that waits for --until-file.
  auto keep_going = [&] {
    if (!o.until_file.empty() && std::filesystem::exists(o.until_file)) return false;
    return std::chrono::steady_clock::now() < until;
  };
  const int64_t t_begin = UnixMillisNow();
  std::vector<std::thread> threads;
  for (int c = 0; c < o.clients; ++c)
    threads.emplace_back([&, c] {
      while (keep_going()) {
        RequestRecord r = OneRequest(*stub, input_msg, *reference, o, c);
        std::lock_guard<std::mutex> lock(mu);
        records.push_back(std::move(r));
      }
    });
  for (auto& t : threads) t.join();
  const int64_t t_end = UnixMillisNow();

  int64_t counts[4] = {0, 0, 0, 0}, late = 0;
  std::vector<double> answered_ms;
  for (const auto& r : records) {
    ++counts[static_cast<int>(r.outcome)];
    if (r.outcome == Outcome::kCorrect) answered_ms.push_back(r.latency_ms);
    if (r.outcome == Outcome::kErrored && r.latency_ms > static_cast<double>(o.deadline_ms)) ++late;
  }
  if (!o.log.empty()) {
    std::ofstream log(o.log);
    log << "client,start_unix_ms,end_unix_ms,latency_ms,outcome,grpc_code,message\n";
    for (const auto& r : records)
      log << r.client << "," << r.start_unix_ms << "," << r.end_unix_ms << "," << r.latency_ms << ","
          << OutcomeName(r.outcome) << "," << r.code << "," << CsvField(r.message) << "\n";
  }
  std::printf(
      "{\"requests\": %zu, \"correct\": %lld, \"wrong\": %lld, \"errored\": %lld, \"lost\": %lld, "
      "\"errored_after_deadline\": %lld, \"p50_ms\": %.2f, \"p99_ms\": %.2f, \"seconds\": %.2f, "
      "\"clients\": %d, \"deadline_ms\": %lld, \"grace_ms\": %lld}\n",
      records.size(), static_cast<long long>(counts[0]), static_cast<long long>(counts[1]),
      static_cast<long long>(counts[2]), static_cast<long long>(counts[3]), static_cast<long long>(late),
      Percentile(answered_ms, 50), Percentile(answered_ms, 99), (t_end - t_begin) / 1000.0, o.clients,
      static_cast<long long>(o.deadline_ms), static_cast<long long>(o.grace_ms));
  return counts[1] + counts[3] > 0 ? 1 : 0;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::SoakOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "soak: %s needs a value\n", flag.c_str());
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--gateway")
      o.gateway = value;
    else if (flag == "--input")
      o.input = value;
    else if (flag == "--reference")
      o.reference = value;
    else if (flag == "--log")
      o.log = value;
    else if (flag == "--until-file")
      o.until_file = value;
    else if (flag == "--clients")
      o.clients = std::max(1, std::atoi(value.c_str()));
    else if (flag == "--duration-s")
      o.duration_s = std::atof(value.c_str());
    else if (flag == "--deadline-ms")
      o.deadline_ms = std::atoll(value.c_str());
    else if (flag == "--grace-ms")
      o.grace_ms = std::atoll(value.c_str());
    else {
      std::fprintf(stderr, "soak: unknown flag %s (see bench/soak/soak_client.cc)\n", flag.c_str());
      return 2;
    }
  }
  if (o.gateway.empty() || o.input.empty() || o.reference.empty()) {
    std::fprintf(stderr,
                 "usage: tessera_soak_client --gateway HOST:PORT --input x.npy --reference ref.npy "
                 "[--clients N] [--duration-s S | --until-file PATH] [--deadline-ms D] [--grace-ms G] "
                 "[--log requests.csv]\n");
    return 2;
  }
  return tessera::Run(o);
}
