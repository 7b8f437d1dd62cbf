#include "daemon/cluster/http_endpoint.h"

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

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
using HttpResponse = http::response<http::string_body>;

namespace {

// Runs the calls that block for an inference (Gateway::Infer) off the I/O
// threads. It starts a thread when a call finds none free, up to
// `max_threads`, and keeps it; a call that would need more is refused, so
// the pool never queues work of its own. Thread-safe.
class BlockingCallPool {
 public:
  explicit BlockingCallPool(int max_threads) : max_threads_(max_threads) {}
  BlockingCallPool(const BlockingCallPool&) = delete;
  BlockingCallPool& operator=(const BlockingCallPool&) = delete;
  // Drops calls not started yet and waits for the running ones.
  ~BlockingCallPool();

  // True when `call` will run now on a thread of the pool; false when all
  // `max_threads` are taken (or the pool is stopping).
  bool TryPost(std::function<void()> call);

 private:
  void Run();

  const int max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> calls_;  // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;         // GUARDED_BY(mu_)
  int taken_ = 0;                            // GUARDED_BY(mu_): calls queued or running
  bool stopping_ = false;                    // GUARDED_BY(mu_)
};

BlockingCallPool::~BlockingCallPool() {
  std::deque<std::function<void()>> dropped;
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    dropped.swap(calls_);
    threads.swap(threads_);
  }
  cv_.notify_all();
  dropped.clear();  // outside the lock: a call owns a connection, whose end takes other locks
  for (auto& t : threads) t.join();
}

bool BlockingCallPool::TryPost(std::function<void()> call) {
  std::lock_guard<std::mutex> lock(mu_);
  if (stopping_ || taken_ >= max_threads_) return false;
  ++taken_;
  calls_.push_back(std::move(call));
  if (static_cast<int>(threads_.size()) < taken_) threads_.emplace_back([this] { Run(); });
  cv_.notify_one();
  return true;
}

void BlockingCallPool::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !calls_.empty(); });
    if (stopping_) return;
    std::function<void()> call = std::move(calls_.front());
    calls_.pop_front();
    lock.unlock();
    call();
    call = nullptr;  // released before the lock is taken again
    lock.lock();
    --taken_;
  }
}

}  // namespace

struct HttpEndpoint::State {
  Gateway* gateway = nullptr;
  HttpEndpointOptions options;
  // Destroyed explicitly in ~HttpEndpoint, before the rest of the state:
  // destroying it ends the connections it still holds, which count
  // themselves out under `mu`.
  std::unique_ptr<asio::io_context> io;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::unique_ptr<asio::steady_timer> accept_backoff;  // between failed accepts
  std::vector<std::thread> io_threads;
  std::unique_ptr<BlockingCallPool> handlers;
  std::mutex mu;
  int connections = 0;  // GUARDED_BY(mu): open connections being served
  // The listener's trouble, for /healthz and /metrics.
  int64_t refused_over_limit = 0;     // GUARDED_BY(mu): connections answered 503
  int64_t closed_idle = 0;            // GUARDED_BY(mu): closed by the idle/body timeout
  int64_t accept_errors = 0;          // GUARDED_BY(mu)
  std::string last_accept_error;      // GUARDED_BY(mu)
  Clock::time_point last_accept_error_at{}, last_refused_at{};  // GUARDED_BY(mu)
};

namespace {

// Within this long after the listener last failed to accept or refused a
// connection over the limit, /healthz reports it.
constexpr auto kListenerTroubleWindow = std::chrono::seconds(5);
// After a failed accept (out of descriptors: EMFILE/ENFILE) the listener
// waits this long before it tries again; the pending connection stays queued.
constexpr auto kAcceptBackoff = std::chrono::milliseconds(100);
// A connection over the limit gets this long to take its 503.
constexpr auto kRefusalWriteTimeout = std::chrono::seconds(2);

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
  out += "# TYPE tessera_http_connections gauge\ntessera_http_connections " + std::to_string(s.connections) + "\n";
  out += "# TYPE tessera_http_connections_refused_total counter\ntessera_http_connections_refused_total " +
         std::to_string(s.refused_over_limit) + "\n";
  out += "# TYPE tessera_http_connections_timed_out_total counter\ntessera_http_connections_timed_out_total " +
         std::to_string(s.closed_idle) + "\n";
  out += "# TYPE tessera_http_accept_errors_total counter\ntessera_http_accept_errors_total " +
         std::to_string(s.accept_errors) + "\n";
  return out;
}

HttpResponse JsonError(int code, const std::string& message, const char* status_name) {
  HttpResponse res{static_cast<http::status>(code), 11};
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

// The answer to one complete request. Blocks for an inference on POST
// /v1/infer and the v2 infer route; every other route answers at once.
HttpResponse Handle(HttpEndpoint::State& s, const HttpRequest& req) {
  HttpResponse res;
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
Status Authorize(HttpEndpoint::State& s, const HttpRequest& req) {
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
HttpResponse Unauthorized(const Status& why) {
  auto res = JsonError(401, why.message(), StatusCodeName(why.code()));
  res.set(http::field::www_authenticate, kBearerChallenge);
  return res;
}

HttpResponse TooLarge(const HttpEndpoint::State& s) {
  return JsonError(
      413, "the body exceeds " + std::to_string(s.options.max_body_bytes) + " bytes (the gateway's --max-body-bytes)",
      "ResourceExhausted");
}

void CountTimeout(HttpEndpoint::State& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  ++s.closed_idle;
}

// One connection, driven by completion handlers on its own strand: read a
// header (within idle_timeout), check the token, read the body (within
// body_timeout), answer, and on keep-alive start over. Owned by the pending
// operation or the handler-pool call that will continue it; counts itself
// in State::connections from construction to destruction.
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  // REQUIRES: the caller counted this connection in s.connections.
  HttpConnection(HttpEndpoint::State& s, tcp::socket socket) : s_(s), stream_(std::move(socket)) {}
  ~HttpConnection() {
    std::lock_guard<std::mutex> lock(s_.mu);
    --s_.connections;
  }
  void Start() { ReadHeader(); }

 private:
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  void ReadBody();
  void OnBody(beast::error_code ec);
  void Dispatch();
  void Send(HttpResponse res);
  void OnSent(beast::error_code ec);
  void Close();

  HttpEndpoint::State& s_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<HttpRequestParser> parser_;
  http::response<http::empty_body> go_ahead_{http::status::continue_, 11};
  HttpResponse response_;  // the answer being written
};

void HttpConnection::ReadHeader() {
  parser_.emplace();
  ConfigureRequestParser(s_.options.max_body_bytes, &*parser_);
  // The header (or, between requests, the next one) within the idle timeout.
  stream_.expires_after(s_.options.idle_timeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->OnHeader(ec); });
}

void HttpConnection::OnHeader(beast::error_code ec) {
  if (ec == beast::error::timeout) CountTimeout(s_);
  boost::optional<std::uint64_t> length;
  if (!ec) length = parser_->content_length();
  if (ec == http::error::body_limit || (length && *length > static_cast<uint64_t>(s_.options.max_body_bytes)))
    return Send(TooLarge(s_));  // refused before the body is read; closes after the answer
  if (ec) return Close();
  stream_.expires_after(s_.options.body_timeout);
  // Tokens (--token-file) are checked on the header alone: a client
  // without one costs no body read (beyond a small one, so that its
  // answer is not lost to a reset) and no parse.
  const bool expects_continue = beast::iequals(parser_->get()[http::field::expect], "100-continue");
  if (Status allowed = Authorize(s_, parser_->get()); !allowed.ok()) {
    if (expects_continue || !length || *length > kUnauthorizedBodyDrainBytes) return Send(Unauthorized(allowed));
    http::async_read(stream_, buffer_, *parser_, [self = shared_from_this(), allowed](beast::error_code, size_t) {
      self->Send(Unauthorized(allowed));
    });
    return;
  }
  if (!expects_continue) return ReadBody();
  // A client that asks first (curl does above 1 MB) gets its go-ahead
  // now instead of waiting a second for it.
  http::async_write(stream_, go_ahead_, [self = shared_from_this()](beast::error_code wec, size_t) {
    if (wec) return self->Close();
    self->ReadBody();
  });
}

void HttpConnection::ReadBody() {
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
}

void HttpConnection::OnBody(beast::error_code ec) {
  if (ec == http::error::body_limit) return Send(TooLarge(s_));  // a chunked body that grew past the limit
  if (ec == beast::error::timeout) CountTimeout(s_);
  if (ec) return Close();
  Dispatch();
}

// Requests that may run an inference go to the handler pool (the I/O
// threads never block); the others are answered here.
void HttpConnection::Dispatch() {
  auto request = std::make_shared<HttpRequest>(parser_->release());
  if (request->method() != http::verb::post) return Send(Handle(s_, *request));
  stream_.expires_never();  // the gateway's own deadline bounds the work
  auto run = [self = shared_from_this(), request] {
    HttpResponse res = Handle(self->s_, *request);
    asio::post(self->stream_.get_executor(), [self, res = std::move(res)]() mutable { self->Send(std::move(res)); });
  };
  if (s_.handlers->TryPost(std::move(run))) return;
  // Every handler thread already holds a request inside the gateway, so the
  // gateway's queue (max_in_flight + queue_capacity) is full too.
  Send(JsonError(429, "the gateway queue is full (every one of its HTTP handler threads is busy); retry later",
                 "ResourceExhausted"));
}

void HttpConnection::Send(HttpResponse res) {
  response_ = std::move(res);
  stream_.expires_after(s_.options.body_timeout);  // a client that never reads its answer
  http::async_write(stream_, response_,
                    [self = shared_from_this()](beast::error_code ec, size_t) { self->OnSent(ec); });
}

void HttpConnection::OnSent(beast::error_code ec) {
  if (ec == beast::error::timeout) CountTimeout(s_);
  if (ec || !response_.keep_alive()) return Close();
  ReadHeader();
}

void HttpConnection::Close() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

// Answers a connection over max_connections 503 and closes it.
void Refuse(HttpEndpoint::State& s, tcp::socket socket) {
  struct Refusal {
    beast::tcp_stream stream;
    HttpResponse response;
  };
  auto r =
      std::make_shared<Refusal>(Refusal{beast::tcp_stream(std::move(socket)),
                                        JsonError(503,
                                                  "the gateway serves " + std::to_string(s.options.max_connections) +
                                                      " HTTP connections at once; try again later",
                                                  "Unavailable")});
  r->stream.expires_after(kRefusalWriteTimeout);
  http::async_write(r->stream, r->response, [r](beast::error_code, size_t) {
    beast::error_code ec;
    r->stream.socket().shutdown(tcp::socket::shutdown_both, ec);
    r->stream.close();
  });
}

void Accept(HttpEndpoint::State& s);

void OnAccept(HttpEndpoint::State& s, beast::error_code aec, tcp::socket socket) {
  if (aec == asio::error::operation_aborted) return;  // the endpoint is stopping
  if (aec) {
    // Out of descriptors (EMFILE/ENFILE) or the like: the pending
    // connection stays queued; try again shortly instead of spinning.
    {
      std::lock_guard<std::mutex> lock(s.mu);
      ++s.accept_errors;
      s.last_accept_error = aec.message();
      s.last_accept_error_at = Clock::now();
    }
    spdlog::warn("gateway HTTP: accept failed: {}", aec.message());
    s.accept_backoff->expires_after(kAcceptBackoff);
    s.accept_backoff->async_wait([&s](beast::error_code ec) {
      if (!ec) Accept(s);
    });
    return;
  }
  bool admitted = false;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.connections < s.options.max_connections) {
      ++s.connections;
      admitted = true;
    } else {
      ++s.refused_over_limit;
      s.last_refused_at = Clock::now();
    }
  }
  if (admitted)
    std::make_shared<HttpConnection>(s, std::move(socket))->Start();
  else
    Refuse(s, std::move(socket));
  Accept(s);
}

// One accept outstanding at a time; each connection gets a strand of its own.
void Accept(HttpEndpoint::State& s) {
  s.acceptor->async_accept(asio::make_strand(*s.io),
                           [&s](beast::error_code ec, tcp::socket socket) { OnAccept(s, ec, std::move(socket)); });
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

namespace {

// Opens s.acceptor on `listen`. REQUIRES: `listen` holds a ':'.
Status Listen(HttpEndpoint::State& s, const std::string& listen) {
  const auto colon = listen.rfind(':');
  beast::error_code ec;
  std::string host = listen.substr(0, colon);
  if (host.size() > 1 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  const auto address = asio::ip::make_address(host, ec);
  if (ec) return Status::InvalidArgument("--http: bad address '" + listen + "': " + ec.message());
  const int port = std::atoi(listen.substr(colon + 1).c_str());
  s.acceptor = std::make_unique<tcp::acceptor>(*s.io);
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  s.acceptor->open(endpoint.protocol(), ec);
  if (!ec) s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(endpoint, ec);
  if (!ec) s.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen for HTTP on " + listen + ": " + ec.message());
  return Status::OK();
}

}  // namespace

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(Gateway* gateway, const HttpEndpointOptions& options) {
  if (options.listen.rfind(':') == std::string::npos)
    return Status::InvalidArgument("--http wants host:port, got '" + options.listen + "'");
  TS_RETURN_IF_ERROR(CheckHttpListenAddress(options.listen, options.allow_remote));
  std::unique_ptr<HttpEndpoint> e(new HttpEndpoint());
  e->state_ = std::make_unique<State>();
  State& s = *e->state_;
  s.gateway = gateway;
  s.options = options;
  s.io = std::make_unique<asio::io_context>(std::max(1, options.io_threads));
  TS_RETURN_IF_ERROR(Listen(s, options.listen));
  s.accept_backoff = std::make_unique<asio::steady_timer>(*s.io);
  const GatewayOptions& g = gateway->options();
  s.handlers = std::make_unique<BlockingCallPool>(
      options.handler_threads > 0 ? options.handler_threads : std::max(1, g.max_in_flight + g.queue_capacity));
  Accept(s);
  for (int i = 0; i < std::max(1, options.io_threads); ++i) s.io_threads.emplace_back([&s] { s.io->run(); });
  return e;
}

std::string HttpEndpoint::address() const {
  const auto ep = state_->acceptor->local_endpoint();
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

HttpEndpoint::~HttpEndpoint() {
  if (!state_) return;
  State& s = *state_;
  if (!s.io) return;
  // No handler runs after this; connections mid-request are dropped.
  s.io->stop();
  for (auto& t : s.io_threads) t.join();
  // Waits for inferences under way (the gateway's deadline bounds them);
  // their answers are posted to the stopped io_context and never written.
  s.handlers.reset();
  s.accept_backoff.reset();
  s.acceptor.reset();
  // Destroys the pending operations and with them the connections they own.
  s.io.reset();
}

}  // namespace tessera
