#include "daemon/cluster/http_endpoint.h"

#include <spdlog/spdlog.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <list>
#include <nlohmann/json.hpp>
#include <thread>

#include "daemon/runtime/npy.h"

namespace tessera {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct HttpEndpoint::State {
  Gateway* gateway = nullptr;
  int64_t max_body_bytes = 0;
  asio::io_context io;
  std::unique_ptr<tcp::acceptor> acceptor;
  std::thread accept_thread;
  std::mutex mu;
  std::list<std::pair<std::shared_ptr<tcp::socket>, std::thread>> connections;  // GUARDED_BY(mu)
  bool stopping = false;                                                        // GUARDED_BY(mu)
};

namespace {

// Nested JSON arrays -> (shape, values); InvalidArgument for ragged or non-numeric data.
Status FlattenJson(const nlohmann::json& j, size_t depth, Shape* shape, std::vector<float>* values) {
  if (j.is_number()) {
    if (depth != shape->size() && !shape->empty()) return Status::InvalidArgument("ragged JSON array");
    values->push_back(j.get<float>());
    return Status::OK();
  }
  if (!j.is_array()) return Status::InvalidArgument("the JSON body must be an array of numbers");
  if (depth == shape->size()) {
    if (!values->empty()) return Status::InvalidArgument("ragged JSON array");
    shape->push_back(static_cast<int64_t>(j.size()));
  } else if (depth > shape->size() || (*shape)[depth] != static_cast<int64_t>(j.size())) {
    return Status::InvalidArgument("ragged JSON array");
  }
  for (const auto& e : j) TS_RETURN_IF_ERROR(FlattenJson(e, depth + 1, shape, values));
  return Status::OK();
}

Result<TensorData> ParseBody(const std::string& body, const std::string& content_type, const Shape& want) {
  if (body.rfind("\x93NUMPY", 0) == 0 || content_type.find("npy") != std::string::npos ||
      content_type.find("octet-stream") != std::string::npos)
    return ParseNpy(body, "request body");
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Status::InvalidArgument("the body is neither JSON nor .npy");
  if (j.is_object() && j.contains("inputs")) j = j["inputs"];
  TensorData t;
  TS_RETURN_IF_ERROR(FlattenJson(j, 0, &t.shape, &t.values));
  // A flat array of the right length takes the model's shape.
  if (t.shape.size() == 1 && static_cast<int64_t>(t.values.size()) == NumElements(want)) t.shape = want;
  return t;
}

int HttpCode(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: case StatusCode::kNotSupported: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

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
    const bool up = s.gateway->AllWorkersUp();
    return reply(up ? 200 : 503, "text/plain", up ? "ok\n" : "degraded: a worker is down\n");
  }
  if (req.method() == http::verb::get && target == "/metrics")
    return reply(200, "text/plain; version=0.0.4", s.gateway->MetricsText());
  if (target == "/v1/infer") {
    if (req.method() != http::verb::post) return error(Status::InvalidArgument("use POST for /v1/infer"));
    const auto& sig = s.gateway->options().signature;
    if (sig.input_shapes.size() != 1)
      return error(Status::NotSupported("the HTTP endpoint takes single-input models; use gRPC Gateway.Infer"));
    auto t = ParseBody(req.body(), std::string(req[http::field::content_type]), sig.input_shapes[0]);
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
  return error(Status::NotFound("no such endpoint " + target + " (POST /v1/infer, GET /healthz, GET /metrics)"));
}

void Serve(HttpEndpoint::State& s, std::shared_ptr<tcp::socket> socket) {
  beast::error_code ec;
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(static_cast<std::uint64_t>(s.max_body_bytes));
    http::read(*socket, buffer, parser, ec);
    if (ec == http::error::body_limit) {
      http::response<http::string_body> res{http::status::bad_request, 11};
      res.set(http::field::content_type, "application/json");
      res.body() = nlohmann::json{{"error", "the body exceeds " + std::to_string(s.max_body_bytes) + " bytes"},
                                  {"code", "InvalidArgument"}}.dump() + "\n";
      res.prepare_payload();
      http::write(*socket, res, ec);
      break;
    }
    if (ec) break;
    auto res = Handle(s, parser.get());
    http::write(*socket, res, ec);
    if (ec || !res.keep_alive()) break;
  }
  socket->shutdown(tcp::socket::shutdown_both, ec);
  socket->close(ec);
}

}  // namespace

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(Gateway* gateway, const std::string& listen,
                                                          int64_t max_body_bytes) {
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) return Status::InvalidArgument("--http wants host:port, got '" + listen + "'");
  std::unique_ptr<HttpEndpoint> e(new HttpEndpoint());
  e->state_ = std::make_unique<State>();
  State& s = *e->state_;
  s.gateway = gateway;
  s.max_body_bytes = max_body_bytes;
  beast::error_code ec;
  const auto address = asio::ip::make_address(listen.substr(0, colon), ec);
  if (ec) return Status::InvalidArgument("--http: bad address '" + listen + "': " + ec.message());
  const int port = std::atoi(listen.substr(colon + 1).c_str());
  s.acceptor = std::make_unique<tcp::acceptor>(s.io);
  tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  s.acceptor->open(endpoint.protocol(), ec);
  if (!ec) s.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor->bind(endpoint, ec);
  if (!ec) s.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Status::Unavailable("cannot listen for HTTP on " + listen + ": " + ec.message());
  s.accept_thread = std::thread([&s] {
    for (;;) {
      auto socket = std::make_shared<tcp::socket>(s.io);
      beast::error_code aec;
      s.acceptor->accept(*socket, aec);
      std::lock_guard<std::mutex> lock(s.mu);
      if (s.stopping) break;
      if (aec) continue;
      s.connections.emplace_back(socket, std::thread([&s, socket] { Serve(s, socket); }));
      // Reap finished connections now and then: a closed socket means its thread is done or ending.
      for (auto it = s.connections.begin(); it != s.connections.end();) {
        if (!it->first->is_open() && it->second.joinable()) {
          it->second.join();
          it = s.connections.erase(it);
        } else {
          ++it;
        }
      }
    }
  });
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
  // Wake the blocked accept() with a connection of our own.
  tcp::socket waker(s.io);
  waker.connect(s.acceptor->local_endpoint(), ec);
  if (s.accept_thread.joinable()) s.accept_thread.join();
  waker.close(ec);
  std::lock_guard<std::mutex> lock(s.mu);
  s.acceptor->close(ec);
  for (auto& [socket, thread] : s.connections) socket->shutdown(tcp::socket::shutdown_both, ec);
  for (auto& [socket, thread] : s.connections)
    if (thread.joinable()) thread.join();
}

}  // namespace tessera
