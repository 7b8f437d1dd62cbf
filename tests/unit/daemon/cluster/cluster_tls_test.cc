// Issue 14 item 1 against a real `tessera worker --tls-dir` process: a peer
// the cluster CA vouches for reaches every RPC (the control: these calls get
// the handlers' own answers); a client without a certificate, with one from
// another CA, or speaking plaintext, is refused on LoadProgram, Run, Status,
// Health and Exchange before any handler runs — and the worker lives on.
// The other direction too: a client refuses a worker whose certificate the
// cluster CA did not sign, or that does not name the address it dialled.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "proto/services.grpc.pb.h"
#include "transport/grpc/grpc_channel.h"
#include "transport/tls/cluster_ca.h"

extern char** environ;

using namespace tessera;
namespace fs = std::filesystem;

namespace {

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// `tessera worker --tls-dir DIR --name NAME` on a free loopback port.
struct TlsWorker {
  pid_t pid = -1;
  std::string address;
  fs::path log;

  TlsWorker(const fs::path& tls_dir, const std::string& name, const fs::path& scratch) {
    const std::string port_file = (scratch / (name + ".port")).string();
    log = scratch / (name + ".log");
    fs::remove(port_file);
    std::vector<std::string> args = {TESSERA_BINARY, "--log-level",    "info",        "worker",
                                     "--listen",     "127.0.0.1:0",    "--name",      name,
                                     "--tls-dir",    tls_dir.string(), "--port-file", port_file};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(posix_spawn(&pid, args[0].c_str(), &fa, nullptr, argv.data(), environ) == 0);
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 200 && address.empty(); ++i) {
      std::ifstream in(port_file);
      std::getline(in, address);
      if (address.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    INFO(Read(log));
    REQUIRE_FALSE(address.empty());
  }
  bool alive() const { return ::kill(pid, 0) == 0 && ::waitpid(pid, nullptr, WNOHANG) == 0; }
  ~TlsWorker() {
    if (pid > 0) {
      ::kill(pid, SIGTERM);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

// The cluster CA (w1, deploy), a second CA that issued its own "deploy"
// and "w1", and a w1 certificate of the cluster CA that names only an
// address the test never dials.
struct Pki {
  fs::path scratch, cluster, rogue, wrong_host;
  Pki() {
    scratch = fs::temp_directory_path() / ("tessera-tls-test-" + std::to_string(::getpid()));
    fs::remove_all(scratch);
    cluster = scratch / "cluster";
    rogue = scratch / "rogue";
    wrong_host = scratch / "wrong-host";
    for (const fs::path& dir : {cluster, rogue}) {
      CaOptions ca;
      ca.dir = dir.string();
      REQUIRE(CreateClusterCa(ca).ok());
      for (const char* name : {"w1", "deploy"}) {
        IssueOptions io;
        io.dir = dir.string();
        io.name = name;
        REQUIRE(IssueDeviceCertificate(io).ok());
      }
    }
    fs::create_directories(wrong_host);
    fs::copy_file(cluster / "ca.crt", wrong_host / "ca.crt");
    fs::copy_file(cluster / "ca.key", wrong_host / "ca.key");
    IssueOptions io;
    io.dir = wrong_host.string();
    io.name = "w1";
    io.hosts = {"10.99.0.1"};
    REQUIRE(IssueDeviceCertificate(io).ok());
  }
  ~Pki() { fs::remove_all(scratch); }
};

std::shared_ptr<grpc::Channel> Dial(const std::string& address, std::shared_ptr<grpc::ChannelCredentials> creds) {
  return grpc::CreateChannel(address, creds);
}

// TLS trusting `ca_dir`'s CA, presenting `identity_dir`/deploy.* ("" = no
// client certificate).
std::shared_ptr<grpc::ChannelCredentials> TlsClient(const fs::path& ca_dir, const fs::path& identity_dir) {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = Read(ca_dir / "ca.crt");
  if (!identity_dir.empty()) {
    o.pem_private_key = Read(identity_dir / "deploy.key");
    o.pem_cert_chain = Read(identity_dir / "deploy.crt");
  }
  return grpc::SslCredentials(o);
}

std::chrono::system_clock::time_point Soon() { return std::chrono::system_clock::now() + std::chrono::seconds(5); }

// One call of each Worker RPC; the status each got, in the order
// LoadProgram, Run, Status, Health, Exchange.
std::vector<grpc::Status> CallEveryRpc(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = proto::Worker::NewStub(channel);
  std::vector<grpc::Status> out;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Soon());
    proto::LoadProgramReply reply;
    auto writer = stub->LoadProgram(&ctx, &reply);
    writer->WritesDone();  // an empty load: the handler says so
    out.push_back(writer->Finish());
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Soon());
    proto::RunRequest req;
    req.set_plan_id("p");
    proto::RunReply reply;
    out.push_back(stub->Run(&ctx, req, &reply));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Soon());
    proto::WorkerStatusReply reply;
    out.push_back(stub->GetStatus(&ctx, proto::StatusRequest(), &reply));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Soon());
    proto::HealthReply reply;
    out.push_back(stub->Health(&ctx, proto::HealthRequest(), &reply));
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(Soon());
    auto stream = stub->Exchange(&ctx);
    stream->WritesDone();
    out.push_back(stream->Finish());
  }
  return out;
}

void RequireRefusedEverywhere(const std::vector<grpc::Status>& got, const std::string& who) {
  const char* rpcs[] = {"LoadProgram", "Run", "Status", "Health", "Exchange"};
  REQUIRE(got.size() == 5);
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(who << " " << rpcs[i] << ": " << got[i].error_code() << " " << got[i].error_message());
    CHECK(got[i].error_code() == grpc::StatusCode::UNAVAILABLE);
  }
}

}  // namespace

TEST_CASE("a TLS worker answers a client the cluster CA vouches for on every RPC") {
  Pki pki;
  TlsWorker w(pki.cluster, "w1", pki.scratch);
  auto got = CallEveryRpc(Dial(w.address, TlsClient(pki.cluster, pki.cluster)));
  REQUIRE(got.size() == 5);
  // The handlers' own answers: the calls got through.
  CHECK(got[0].error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(got[0].error_message(), Catch::Contains("empty program load"));
  CHECK(got[1].error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK_THAT(got[1].error_message(), Catch::Contains("holds no program"));
  CHECK(got[2].ok());
  CHECK(got[3].ok());
  CHECK(got[4].ok());
  // The worker knows who called: the name in the caller's certificate.
  CHECK_THAT(Read(w.log), Catch::Contains("w1: program load from deploy (ipv4:127.0.0.1:"));
}

TEST_CASE("a TLS worker refuses a client without a certificate on every RPC") {
  Pki pki;
  TlsWorker w(pki.cluster, "w1", pki.scratch);
  RequireRefusedEverywhere(CallEveryRpc(Dial(w.address, TlsClient(pki.cluster, ""))), "no client certificate");
  CHECK(w.alive());
}

TEST_CASE("a TLS worker refuses a client whose certificate another CA signed on every RPC") {
  Pki pki;
  TlsWorker w(pki.cluster, "w1", pki.scratch);
  // The client trusts the worker (cluster CA) but presents the other CA's
  // "deploy": only the worker's check can refuse it.
  RequireRefusedEverywhere(CallEveryRpc(Dial(w.address, TlsClient(pki.cluster, pki.rogue))), "other CA");
  CHECK(w.alive());
}

TEST_CASE("a TLS worker refuses plaintext on every RPC") {
  Pki pki;
  TlsWorker w(pki.cluster, "w1", pki.scratch);
  RequireRefusedEverywhere(CallEveryRpc(Dial(w.address, grpc::InsecureChannelCredentials())), "plaintext");
  // tessera's own plaintext channel (no --tls-dir) gets the same.
  auto channel = OpenChannel(w.address, TransportSecurity{});
  REQUIRE(channel.ok());
  RequireRefusedEverywhere(CallEveryRpc(*channel), "OpenChannel without TLS");
  CHECK(w.alive());
  // And the worker still serves its cluster afterwards.
  auto got = CallEveryRpc(Dial(w.address, TlsClient(pki.cluster, pki.cluster)));
  CHECK(got[2].ok());
}

TEST_CASE("tessera's TLS channel reaches a cluster worker and refuses impostors") {
  Pki pki;
  auto security = MakeTransportSecurity(pki.cluster.string(), "deploy", false);
  REQUIRE(security.ok());
  SECTION("the cluster's own worker: every RPC reaches its handler") {
    TlsWorker w(pki.cluster, "w1", pki.scratch);
    auto channel = OpenChannel(w.address, *security);
    REQUIRE(channel.ok());
    auto got = CallEveryRpc(*channel);
    CHECK(got[0].error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(got[2].ok());
  }
  SECTION("a worker whose certificate another CA signed") {
    TlsWorker w(pki.rogue, "w1", pki.scratch);
    auto channel = OpenChannel(w.address, *security);
    REQUIRE(channel.ok());
    RequireRefusedEverywhere(CallEveryRpc(*channel), "worker of another CA");
  }
  SECTION("a worker whose certificate does not name the address dialled") {
    TlsWorker w(pki.wrong_host, "w1", pki.scratch);
    auto channel = OpenChannel(w.address, *security);
    REQUIRE(channel.ok());
    RequireRefusedEverywhere(CallEveryRpc(*channel), "certificate for 10.99.0.1 at 127.0.0.1");
  }
}

TEST_CASE("with a TLS identity non-loopback addresses need no --insecure and without one they still do") {
  Pki pki;
  auto tls = MakeTransportSecurity(pki.cluster.string(), "deploy", false);
  REQUIRE(tls.ok());
  CHECK(OpenChannel("10.0.0.11:7070", *tls).ok());
  CHECK(ServerCredentialsFor("0.0.0.0:7070", *tls).ok());
  auto plain = OpenChannel("10.0.0.11:7070", TransportSecurity{});
  CHECK_FALSE(plain.ok());
  CHECK_THAT(plain.status().message(), Catch::Contains("--tls-dir") && Catch::Contains("--insecure"));
  CHECK_FALSE(ServerCredentialsFor("0.0.0.0:7070", TransportSecurity{}).ok());
  auto missing = MakeTransportSecurity(pki.cluster.string(), "gateway", false);
  REQUIRE_FALSE(missing.ok());
  CHECK_THAT(missing.status().message(), Catch::Contains((pki.cluster / "gateway.crt").string()));
}
