#include "daemon/cluster/http_endpoint.h"

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <atomic>
#include <condition_variable>
#include <list>
#include <nlohmann/json.hpp>
#include <thread>

#include "daemon/cluster/http_request.h"
#include "daemon/cluster/oip_http.h"
#include "daemon/runtime/npy.h"
#include "transport/grpc/grpc_channel.h"

namespace tessera {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

using Clock = std::chrono::steady_clock;

// One connection and the thread serving it. `deadline` (steady clock, ns
// since epoch; 0 = none) is when the watchdog shuts the socket down: set
// while the connection waits for a request or a body, cleared while the
// gateway works on the request.
struct HttpConnection {
  std::shared_ptr<tcp::socket> socket;
  std::thread thread;
  std::atomic<int64_t> deadline{0};
  std::atomic<bool> done{false};
};

struct HttpEndpoint::State {
  Gateway* gateway = nullptr;
  HttpEndpointOptions options;
  asio::io_context io;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::thread accept_thread, watchdog_thread;
  std::mutex mu;
  std::condition_variable watchdog_cv;
  std::list<std::unique_ptr<HttpConnection>> connections;  // GUARDED_BY(mu)
  bool stopping = false;                                   // GUARDED_BY(mu)
  // The listener's trouble, for /healthz and /metrics.
  int64_t refused_over_limit = 0;     // GUARDED_BY(mu): connections answered 503
  int64_t closed_idle = 0;            // GUARDED_BY(mu): closed by the idle/body timeout
  int64_t accept_errors = 0;          // GUARDED_BY(mu)
  std::string last_accept_error;      // GUARDED_BY(mu)
  Clock::time_point last_accept_error_at{}, last_refused_at{};  // GUARDED_BY(mu)
};

namespace {

int64_t NanosFromNow(std::chrono::milliseconds d) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>((Clock::now() + d).time_since_epoch()).count();
}

// Within this long after the listener last failed to accept or refused a
// connection over the limit, /healthz reports it.
constexpr auto kListenerTroubleWindow = std::chrono::seconds(5);

// "" when the listener is fine, else what is wrong with it.
std::string ListenerTrouble(HttpEndpoint::State& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  const auto now = Clock::now();
  if (s.accept_errors > 0 && now - s.last_accept_error_at < kListenerTroubleWindow)
    return "the HTTP listener cannot accept connections: " + s.last_accept_error;
  if (s.refused_over_limit > 0 && now - s.last_refused_at < kListenerTroubleWindow)
    return "HTTP connections at the limit of " + std::to_string(s.options.max_connections) +
           "; newer ones are refused (idle ones close after " + std::to_string(s.options.idle_timeout.count()) +
           " ms)";
  return "";
}

std::string ListenerMetrics(HttpEndpoint::State& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  std::string out;
  out += "# TYPE tessera_http_connections gauge\ntessera_http_connections " + std::to_string(s.connections.size()) + "\n";
  out += "# TYPE tessera_http_connections_refused_total counter\ntessera_http_connections_refused_total " +
         std::to_string(s.refused_over_limit) + "\n";
  out += "# TYPE tessera_http_connections_timed_out_total counter\ntessera_http_connections_timed_out_total " +
         std::to_string(s.closed_idle) + "\n";
  out += "# TYPE tessera_http_accept_errors_total counter\ntessera_http_accept_errors_total " +
         std::to_string(s.accept_errors) + "\n";
  return out;
}

http::response<http::string_body> JsonError(int code, const std::string& message, const char* status_name) {
  http::response<http::string_body> res{static_cast<http::status>(code), 11};
  res.set(http::field::content_type, "application/json");
  res.body() = nlohmann::json{{"error", message}, {"code", status_name}}.dump() + "\n";
  res.keep_alive(false);
  res.prepare_payload();
  return res;
}

}  // namespace

int HttpCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: case StatusCode::kNotSupported: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kFailedPrecondition: case StatusCode::kAlreadyExists: return 409;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

namespace {

http::response<http::string_body> Handle(HttpEndpoint::State& s, const http::request<http::string_body>& req) {
  http::response<http::string_body> res;
  res.version(req.version());
  res.keep_alive(req.keep_alive());
  auto reply = [&](int code, const std::string& type, std::string body) {
    res.result(static_cast<http::status>(code));
    res.set(http::field::content_type, type);
    res.body() = std::move(body);
    res.prepare_payload();
    return res;
  };
  auto error = [&](const Status& st) {
    return reply(HttpCode(st.code()), "application/json",
                 nlohmann::json{{"error", st.message()}, {"code", StatusCodeName(st.code())}}.dump() + "\n");
  };
  const std::string target(req.target());
  if (req.method() == http::verb::get && target == "/healthz") {
    const std::string trouble = ListenerTrouble(s);
    if (!trouble.empty()) return reply(503, "text/plain", "degraded: " + trouble + "\n");
    const bool up = s.gateway->AllWorkersUp();
    return reply(up ? 200 : 503, "text/plain",
                 (up ? "ok: " : "degraded: a worker is down; ") + s.gateway->DescribePlan() + "\n");
  }
  if (req.method() == http::verb::get && target == "/metrics")
    return reply(200, "text/plain; version=0.0.4", s.gateway->MetricsText() + ListenerMetrics(s));
  if (target == "/v1/infer") {
    if (req.method() != http::verb::post) return error(Status::InvalidArgument("use POST for /v1/infer"));
    const auto& sig = s.gateway->options().signature;
    if (sig.input_shapes.size() != 1)
      return error(Status::NotSupported("the HTTP endpoint takes single-input models; use gRPC Gateway.Infer"));
    auto t = ParseInferBody(req.body(), std::string(req[http::field::content_type]), sig.input_shapes[0]);
    if (!t.ok()) return error(t.status());
    std::vector<TensorData> inputs;
    inputs.push_back(std::move(*t));
    auto r = s.gateway->Infer(std::move(inputs), 0, 0);
    if (!r.ok()) return error(r.status());
    const std::string accept(req[http::field::accept]);
    if (accept.find("npy") != std::string::npos && r->outputs.size() == 1)
      return reply(200, "application/x-npy", SerializeNpy(r->outputs[0]));
    nlohmann::json j = {{"request_id", r->request_id}, {"seconds", r->seconds}, {"outputs", nlohmann::json::array()}};
    for (size_t o = 0; o < r->outputs.size(); ++o)
      j["outputs"].push_back({{"name", sig.output_names[o]}, {"shape", r->outputs[o].shape}, {"data", r->outputs[o].values}});
    return reply(200, "application/json", j.dump() + "\n");
  }
  if (IsOipTarget(target)) return HandleOipRequest(*s.gateway, req);  // Open Inference Protocol v2 (oip_http.h)
  return error(Status::NotFound("no such endpoint " + target +
                                " (POST /v1/infer, GET /healthz, GET /metrics, the v2 protocol under /v2)"));
}

// A refused request's body up to this size is read (and dropped) before the
// 401 so the client sees the answer; a larger one is not read at all.
constexpr uint64_t kUnauthorizedBodyDrainBytes = 64 << 10;

// OK when the request may proceed: no tokens, an open probe endpoint, or
// an `Authorization: Bearer` header with one of the gateway's tokens.
Status Authorize(HttpEndpoint::State& s, const http::request_parser<http::string_body>::value_type& req) {
  const GatewayOptions& o = s.gateway->options();
  if (!o.tokens) return Status::OK();
  const std::string_view target(req.target().data(), req.target().size());
  if (!o.protect_metrics && req.method() == http::verb::get &&
      (target == "/healthz" || target == "/metrics" || IsOipHealthProbe(target)))
    return Status::OK();
  const auto header = req[http::field::authorization];
  return s.gateway->Authorize(std::string_view(header.data(), header.size()), "the gateway's HTTP endpoint");
}

// 401 with the Bearer challenge; nothing of the request is echoed.
http::response<http::string_body> Unauthorized(const Status& why) {
  auto res = JsonError(401, why.message(), StatusCodeName(why.code()));
  res.set(http::field::www_authenticate, kBearerChallenge);
  return res;
}

void Serve(HttpEndpoint::State& s, HttpConnection& c) {
  tcp::socket& socket = *c.socket;
  const auto too_large = [&] {
    return JsonError(413, "the body exceeds " + std::to_string(s.options.max_body_bytes) +
                              " bytes (the gateway's --max-body-bytes)", "ResourceExhausted");
  };
  beast::error_code ec;
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    ConfigureRequestParser(s.options.max_body_bytes, &parser);
    // The header (or, between requests, the next one) within the idle timeout.
    c.deadline = NanosFromNow(s.options.idle_timeout);
    http::read_header(socket, buffer, parser, ec);
    if (ec == http::error::body_limit ||
        (!ec && parser.content_length() && *parser.content_length() > static_cast<uint64_t>(s.options.max_body_bytes))) {
      // Refused before the body is read; the connection closes after the answer.
      c.deadline = NanosFromNow(s.options.body_timeout);
      auto res = too_large();
      http::write(socket, res, ec);
      break;
    }
    if (ec) break;
    c.deadline = NanosFromNow(s.options.body_timeout);
    // Tokens (--token-file) are checked on the header alone: a client
    // without one costs no body read (beyond a small one, so that its
    // answer is not lost to a reset) and no parse.
    const bool expects_continue = beast::iequals(parser.get()[http::field::expect], "100-continue");
    if (Status allowed = Authorize(s, parser.get()); !allowed.ok()) {
      const auto length = parser.content_length();
      if (!expects_continue && length && *length <= kUnauthorizedBodyDrainBytes) http::read(socket, buffer, parser, ec);
      auto res = Unauthorized(allowed);
      http::write(socket, res, ec);
      break;
    }
    // A client that asks first (curl does above 1 MB) gets its go-ahead
    // now instead of waiting a second for it.
    if (expects_continue) {
      http::response<http::empty_body> go_ahead{http::status::continue_, 11};
      http::write(socket, go_ahead, ec);
      if (ec) break;
    }
    http::read(socket, buffer, parser, ec);
    if (ec == http::error::body_limit) {  // a chunked body that grew past the limit
      auto res = too_large();
      http::write(socket, res, ec);
      break;
    }
    if (ec) break;
    c.deadline = 0;  // the gateway's own deadline bounds the work
    auto res = Handle(s, parser.get());
    c.deadline = NanosFromNow(s.options.body_timeout);  // a client that never reads its answer
    http::write(socket, res, ec);
    if (ec || !res.keep_alive()) break;
  }
  // Closed under the lock the watchdog holds, so it never shuts down a
  // descriptor number this socket gave back (and another connection reused).
  std::lock_guard<std::mutex> lock(s.mu);
  c.deadline = 0;
  socket.shutdown(tcp::socket::shutdown_both, ec);
  socket.close(ec);
  c.done = true;
}

// Joins the threads of finished connections. REQUIRES: s.mu held.
void ReapFinished(HttpEndpoint::State& s) {
  for (auto it = s.connections.begin(); it != s.connections.end();) {
    if ((*it)->done) {
      if ((*it)->thread.joinable()) (*it)->thread.join();
      it = s.connections.erase(it);
    } else {
      ++it;
    }
  }
}

void AcceptLoop(HttpEndpoint::State& s) {
  for (;;) {
    auto socket = std::make_shared<tcp::socket>(s.io);
    beast::error_code aec;
    s.acceptor->accept(*socket, aec);
    std::unique_lock<std::mutex> lock(s.mu);
    if (s.stopping) break;
    if (aec) {
      // Out of descriptors (EMFILE/ENFILE) or the like: the pending
      // connection stays queued; try again shortly instead of spinning.
      ++s.accept_errors;
      s.last_accept_error = aec.message();
      s.last_accept_error_at = Clock::now();
      spdlog::warn("gateway HTTP: accept failed: {}", aec.message());
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    ReapFinished(s);
    if (static_cast<int>(s.connections.size()) >= s.options.max_connections) {
      ++s.refused_over_limit;
      s.last_refused_at = Clock::now();
      lock.unlock();
      // A fresh socket's send buffer takes this small answer without blocking.
      auto res = JsonError(503,
                           "the gateway serves " + std::to_string(s.options.max_connections) +
                               " HTTP connections at once; try again later",
                           "Unavailable");
      beast::error_code wec;
      http::write(*socket, res, wec);
      socket->shutdown(tcp::socket::shutdown_both, wec);
      socket->close(wec);
      continue;
    }
    auto c = std::make_unique<HttpConnection>();
    c->socket = socket;
    HttpConnection* raw = c.get();
    c->thread = std::thread([&s, raw] { Serve(s, *raw); });
    s.connections.push_back(std::move(c));
  }
}

// Shuts down the sockets of connections past their deadline (their
// blocked read or write then fails and the thread ends) and reaps threads.
void WatchdogLoop(HttpEndpoint::State& s) {
  std::unique_lock<std::mutex> lock(s.mu);
  while (!s.stopping) {
    s.watchdog_cv.wait_for(lock, std::chrono::milliseconds(100));
    const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    for (auto& c : s.connections) {
      const int64_t deadline = c->deadline;
      if (deadline != 0 && deadline < now && !c->done) {
        c->deadline = 0;
        ++s.closed_idle;
        beast::error_code ec;
        c->socket->shutdown(tcp::socket::shutdown_both, ec);
      }
    }
    ReapFinished(s);
  }
}

}  // namespace

Status CheckHttpListenAddress(const std::string& listen, bool allow_remote) {
  if (!IsLoopbackAddress(listen) && !allow_remote)
    return Status::FailedPrecondition("refusing to serve plaintext HTTP on " + listen +
                                      ": only loopback addresses are allowed (HTTP has no TLS, --tls-dir covers gRPC "
                                      "only); serve it on loopback behind a TLS-terminating proxy, or pass "
                                      "--insecure on a trusted network");
  return Status::OK();
}

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(Gateway* gateway, const HttpEndpointOptions& options) {
  const std::string& listen = options.listen;
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("--http wants host:port, got '" + listen + "'");
  TS_RETURN_IF_ERROR(CheckHttpListenAddress(listen, options.allow_remote));
  std::unique_ptr<HttpEndpoint> e(new HttpEndpoint());
  e->state_ = std::make_unique<State>();
  State& s = *e->state_;
  s.gateway = gateway;
  s.options = options;
  beast::error_code ec;
  std::string host = listen.substr(0, colon);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return Status::InvalidArgument("--http: bad address '" + listen + "': " + ec.message());
  const int port = std::atoi(listen.substr(colon + 1).c_str());
  s.acceptor = std::make_unique<tcp::acceptor>(s.io);
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  s.acceptor->open(endpoint.protocol(), ec);
  if (!ec) s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(endpoint, ec);
  if (!ec) s.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen for HTTP on " + listen + ": " + ec.message());
  s.accept_thread = std::thread([&s] { AcceptLoop(s); });
  s.watchdog_thread = std::thread([&s] { WatchdogLoop(s); });
  return e;
}

std::string HttpEndpoint::address() const {
  const auto ep = state_->acceptor->local_endpoint();
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

HttpEndpoint::~HttpEndpoint() {
  if (!state_) return;
  State& s = *state_;
  beast::error_code ec;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stopping = true;
  }
  s.watchdog_cv.notify_all();
  if (s.watchdog_thread.joinable()) s.watchdog_thread.join();
  // Wake the blocked accept() with a connection of our own.
  tcp::socket waker(s.io);
  waker.connect(s.acceptor->local_endpoint(), ec);
  if (s.accept_thread.joinable()) s.accept_thread.join();
  waker.close(ec);
  std::list<std::unique_ptr<HttpConnection>> connections;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.acceptor->close(ec);
    for (auto& c : s.connections)
      if (!c->done) c->socket->shutdown(tcp::socket::shutdown_both, ec);
    connections.swap(s.connections);
  }
  // Joined without the lock: a connection ending takes it to close its socket.
  for (auto& c : connections)
    if (c->thread.joinable()) c->thread.join();
}

}  // namespace tessera
