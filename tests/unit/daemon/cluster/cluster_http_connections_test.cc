// The gateway's HTTP endpoint under many connections (issue 14 item 6), on
// a real gateway over two `tessera worker` processes (no mocks): idle
// connections cost no threads, a client that stops mid-header is closed
// after the idle timeout, a connection over the limit is answered 503, and
// requests are still answered while the idle connections stay open.
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <catch2/catch.hpp>

#include "daemon/cluster/http_endpoint.h"
#include "daemon/runtime/npy.h"
#include "tests/unit/daemon/cluster/cluster_test_support.h"

using namespace tessera;

namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

TwoWorkerClusterOptions SmallInput() {
  TwoWorkerClusterOptions o;
  o.input_shape = {1, 3, 64, 64};
  return o;
}

int ThreadsOfThisProcess() {
  int n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

tcp::endpoint EndpointOf(const std::string& address) {
  const auto colon = address.rfind(':');
  return {asio::ip::make_address(address.substr(0, colon)),
          static_cast<unsigned short>(std::stoi(address.substr(colon + 1)))};
}

// One request on a fresh connection; (status, body), or (-1, error).
std::pair<int, std::string> HttpCall(const std::string& address, http::verb method, const std::string& target,
                                     const std::string& body = "", const std::string& content_type = "") {
  asio::io_context io;
  tcp::socket socket(io);
  boost::beast::error_code ec;
  socket.connect(EndpointOf(address), ec);
  if (ec) return {-1, ec.message()};
  http::request<http::string_body> req{method, target, 11};
  req.set(http::field::host, address);
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  if (method == http::verb::post) req.set(http::field::accept, "application/x-npy");
  req.body() = body;
  req.prepare_payload();
  http::write(socket, req, ec);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(socket, buffer, res, ec);
  if (ec) return {-1, ec.message()};
  return {static_cast<int>(res.result_int()), res.body()};
}

// HttpCall, tried again (up to 2 s) while the endpoint refuses it over
// max_connections: the server sees a client's close a moment after it.
std::pair<int, std::string> HttpCallWhenAdmitted(const std::string& address, const std::string& target,
                                                 http::verb method = http::verb::get, const std::string& body = "",
                                                 const std::string& content_type = "") {
  auto answer = HttpCall(address, method, target, body, content_type);
  for (int i = 0; i < 100 && answer.first == 503 && answer.second.find("at once") != std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    answer = HttpCall(address, method, target, body, content_type);
  }
  return answer;
}

// Value of an unlabelled /metrics line `name`; -1 when absent.
int64_t MetricValue(const std::string& metrics, const std::string& name) {
  const auto at = metrics.find("\n" + name + " ");
  return at == std::string::npos ? -1 : std::stoll(metrics.substr(at + name.size() + 2));
}

// Waits up to 10 s for /metrics to show `want` open connections (the ones
// of this test plus the one asking).
bool WaitForConnections(const std::string& address, int64_t want) {
  for (int i = 0; i < 200; ++i) {
    auto [code, metrics] = HttpCall(address, http::verb::get, "/metrics");
    if (code == 200 && MetricValue(metrics, "tessera_http_connections") >= want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// An inference over HTTP, checked against the single-device answer.
void InferOverHttp(const std::string& address, TwoWorkerCluster& c) {
  auto [code, body] =
      HttpCallWhenAdmitted(address, "/v1/infer", http::verb::post, SerializeNpy(c.input), "application/x-npy");
  INFO(body.substr(0, 300));
  REQUIRE(code == 200);
  auto out = ParseNpy(body, "answer");
  REQUIRE(out.ok());
  CHECK(MaxRelDiff(*out, c.reference) <= 1e-5);
}

std::vector<std::unique_ptr<tcp::socket>> OpenIdle(asio::io_context& io, const std::string& address, int n) {
  std::vector<std::unique_ptr<tcp::socket>> sockets;
  for (int i = 0; i < n; ++i) {
    sockets.push_back(std::make_unique<tcp::socket>(io));
    sockets.back()->connect(EndpointOf(address));
  }
  return sockets;
}

}  // namespace

TEST_CASE("http: 200 idle connections add no threads and requests are answered alongside them", "[cluster][http]") {
  TwoWorkerCluster c("http-connections", SmallInput());
  HttpEndpointOptions ho;
  ho.listen = "127.0.0.1:0";
  ho.idle_timeout = std::chrono::seconds(60);  // they stay open for the whole test
  auto endpoint = HttpEndpoint::Start(c.gateway.get(), ho);
  REQUIRE(endpoint.ok());
  const std::string address = (*endpoint)->address();
  InferOverHttp(address, c);  // the handler pool has started its first thread
  const int before = ThreadsOfThisProcess();

  constexpr int kIdle = 200;
  asio::io_context io;
  auto idle = OpenIdle(io, address, kIdle);
  REQUIRE(WaitForConnections(address, kIdle + 1));
  const int after = ThreadsOfThisProcess();
  WARN("threads of the test process: " << before << ", with " << kIdle << " idle connections open " << after);
  // Thread per connection would add 200; the async server adds none.
  CHECK(after - before < 8);

  // Still served: /healthz and inferences from 4 clients at once.
  auto [code, health] = HttpCall(address, http::verb::get, "/healthz");
  CHECK(code == 200);
  CHECK_THAT(health, Catch::StartsWith("ok: "));
  std::vector<std::thread> clients;
  std::atomic<int> answered{0};
  for (int i = 0; i < 4; ++i)
    clients.emplace_back([&] {
      auto [c2, body] = HttpCall(address, http::verb::post, "/v1/infer", SerializeNpy(c.input), "application/x-npy");
      auto out = ParseNpy(body, "answer");
      if (c2 == 200 && out.ok() && MaxRelDiff(*out, c.reference) <= 1e-5) ++answered;
    });
  for (auto& t : clients) t.join();
  CHECK(answered == 4);
  // The idle connections are all still open: none was closed under them.
  auto [mcode, metrics] = HttpCall(address, http::verb::get, "/metrics");
  CHECK(mcode == 200);
  // (>: the server may not have seen the other probes' closes yet.)
  CHECK(MetricValue(metrics, "tessera_http_connections") >= kIdle + 1);
  CHECK(MetricValue(metrics, "tessera_http_connections_timed_out_total") == 0);
  CHECK(ThreadsOfThisProcess() - before < 8);
}

TEST_CASE("http: a client that stops mid-header is closed after the idle timeout", "[cluster][http]") {
  TwoWorkerCluster c("http-connections", SmallInput());
  HttpEndpointOptions ho;
  ho.listen = "127.0.0.1:0";
  ho.idle_timeout = std::chrono::milliseconds(300);
  auto endpoint = HttpEndpoint::Start(c.gateway.get(), ho);
  REQUIRE(endpoint.ok());
  const std::string address = (*endpoint)->address();

  asio::io_context io;
  tcp::socket slow(io);
  slow.connect(EndpointOf(address));
  asio::write(slow, asio::buffer(std::string("GET /healthz HTTP/1.1\r\nHost: x\r\n")));  // and nothing more
  const auto start = std::chrono::steady_clock::now();
  char byte;
  boost::beast::error_code ec;
  const size_t n = slow.read_some(asio::buffer(&byte, 1), ec);  // blocks until the server closes
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("closed after " << waited << " s: " << ec.message());
  CHECK(n == 0);
  CHECK(ec);
  CHECK(waited >= 0.25);
  CHECK(waited < 5);
  auto [code, metrics] = HttpCall(address, http::verb::get, "/metrics");
  CHECK(code == 200);
  CHECK(MetricValue(metrics, "tessera_http_connections_timed_out_total") == 1);

  // A keep-alive connection that sends nothing after its first answer is closed too.
  tcp::socket kept(io);
  kept.connect(EndpointOf(address));
  http::request<http::string_body> req{http::verb::get, "/healthz", 11};
  req.set(http::field::host, address);
  http::write(kept, req);
  boost::beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(kept, buffer, res);
  CHECK(res.result_int() == 200);
  CHECK(res.keep_alive());
  const size_t more = kept.read_some(asio::buffer(&byte, 1), ec);
  CHECK(more == 0);
  CHECK(ec);
}

TEST_CASE("http: a connection over max_connections is answered 503 and /healthz reports the limit", "[cluster][http]") {
  TwoWorkerCluster c("http-connections", SmallInput());
  HttpEndpointOptions ho;
  ho.listen = "127.0.0.1:0";
  ho.max_connections = 4;
  ho.idle_timeout = std::chrono::seconds(60);
  auto endpoint = HttpEndpoint::Start(c.gateway.get(), ho);
  REQUIRE(endpoint.ok());
  const std::string address = (*endpoint)->address();

  asio::io_context io;
  // The first 4 connections to a fresh endpoint are the ones admitted
  // (accepted in order); no probe before them, whose close could race.
  auto idle = OpenIdle(io, address, 4);
  auto [code, body] = HttpCall(address, http::verb::get, "/healthz");  // the fifth
  CHECK(code == 503);
  CHECK_THAT(body, Catch::Contains("serves 4 HTTP connections at once"));

  idle.pop_back();  // one closes: room for a probe, which reports the limit just hit
  std::tie(code, body) = HttpCallWhenAdmitted(address, "/healthz");
  CHECK(code == 503);
  CHECK_THAT(body, Catch::Contains("HTTP connections at the limit of 4"));
  idle.clear();
  std::tie(code, body) = HttpCallWhenAdmitted(address, "/metrics");
  CHECK(code == 200);
  CHECK(MetricValue(body, "tessera_http_connections_refused_total") >= 1);
  InferOverHttp(address, c);  // and requests are served again
}

TEST_CASE("http: out of descriptors the listener backs off, /healthz says so, and it serves again once they free up",
          "[cluster][http]") {
  TwoWorkerCluster c("http-connections", SmallInput());
  HttpEndpointOptions ho;
  ho.listen = "127.0.0.1:0";
  auto endpoint = HttpEndpoint::Start(c.gateway.get(), ho);
  REQUIRE(endpoint.ok());
  const std::string address = (*endpoint)->address();

  rlimit saved{};
  REQUIRE(::getrlimit(RLIMIT_NOFILE, &saved) == 0);
  int open_fds = 0;
  for ([[maybe_unused]] const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) ++open_fds;
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(open_fds + 12);
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
  // Client sockets take the rest of this process's descriptors; the
  // connections beyond what the server could accept wait in its backlog.
  std::vector<int> clients;
  const tcp::endpoint to = EndpointOf(address);
  for (int i = 0; i < 40; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) break;
    ::connect(fd, to.data(), static_cast<socklen_t>(to.size()));
    clients.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // several failed accepts, 100 ms apart
  for (int fd : clients) ::close(fd);
  // Still under the tight limit: the listener must recover by itself.
  auto [code, health] = HttpCallWhenAdmitted(address, "/healthz");
  for (int i = 0; i < 50 && code < 0; ++i) {  // -1: this side or the server still short of descriptors
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::tie(code, health) = HttpCallWhenAdmitted(address, "/healthz");
  }
  ::setrlimit(RLIMIT_NOFILE, &saved);
  INFO("client sockets opened: " << clients.size() << "; /healthz: " << health);
  CHECK(code == 503);
  CHECK_THAT(health, Catch::Contains("cannot accept connections") && Catch::Contains("Too many open files"));
  auto [mcode, metrics] = HttpCall(address, http::verb::get, "/metrics");
  CHECK(mcode == 200);
  const int64_t errors = MetricValue(metrics, "tessera_http_accept_errors_total");
  CHECK(errors >= 1);
  // Backing off (one try per 100 ms), not spinning.
  const auto elapsed = std::chrono::steady_clock::now() - start;
  CHECK(errors <= 2 + std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() / 100);
  InferOverHttp(address, c);
}

TEST_CASE("http: a full gateway queue is 429 over HTTP and every admitted request is answered", "[cluster][http]") {
  TwoWorkerCluster c("http-connections", SmallInput());
  GatewayOptions o;
  o.served = {c.served.plan_id, c.served.plan.source, c.served.workers, {}};
  o.signature = ModelSignature::Of(c.graph);
  o.max_in_flight = 1;
  o.queue_capacity = 1;
  auto gateway = Gateway::Create(o);
  REQUIRE(gateway.ok());
  HttpEndpointOptions ho;
  ho.listen = "127.0.0.1:0";
  auto endpoint = HttpEndpoint::Start(gateway->get(), ho);  // 2 handler threads: max_in_flight + queue_capacity
  REQUIRE(endpoint.ok());
  const std::string address = (*endpoint)->address();
  const std::string npy = SerializeNpy(c.input);

  constexpr int kClients = 10;
  std::atomic<int> answered{0}, rejected{0}, other{0};
  // Several rounds at most: a round where no two requests overlap proves nothing.
  for (int round = 0; round < 10 && rejected == 0; ++round) {
    std::atomic<int> ready{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < kClients; ++i)
      clients.emplace_back([&] {
        ++ready;
        while (ready < kClients) std::this_thread::yield();
        auto [code, body] = HttpCall(address, http::verb::post, "/v1/infer", npy, "application/x-npy");
        auto out = code == 200 ? ParseNpy(body, "answer") : Result<TensorData>(Status::NotFound("no answer"));
        if (code == 200 && out.ok() && MaxRelDiff(*out, c.reference) <= 1e-5)
          ++answered;
        else if (code == 429 && body.find("queue is full") != std::string::npos)
          ++rejected;
        else
          ++other;
      });
    for (auto& t : clients) t.join();
  }
  INFO("answered " << answered << ", rejected " << rejected << ", other " << other);
  CHECK(rejected >= 1);
  CHECK(answered >= 1);
  CHECK(other == 0);
}
