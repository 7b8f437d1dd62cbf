#include "daemon/cluster/http_request.h"

#include "daemon/runtime/json_tensor.h"
#include "daemon/runtime/npy.h"

namespace tessera {

namespace http = boost::beast::http;

void ConfigureRequestParser(int64_t max_body_bytes, HttpRequestParser* parser) {
  parser->body_limit(static_cast<std::uint64_t>(max_body_bytes));
}

Result<HttpRequest> ParseHttpRequest(const std::string& bytes, int64_t max_body_bytes) {
  HttpRequestParser parser;
  ConfigureRequestParser(max_body_bytes, &parser);
  parser.eager(true);
  boost::beast::error_code ec;
  boost::asio::const_buffer rest(bytes.data(), bytes.size());
  while (rest.size() > 0 && !parser.is_done()) {
    const size_t used = parser.put(rest, ec);
    if (ec == http::error::need_more) break;
    if (ec == http::error::body_limit)
      return Status::ResourceExhausted("HTTP request: the body exceeds " + std::to_string(max_body_bytes) + " bytes");
    if (ec) return Status::InvalidArgument("HTTP request: " + ec.message());
    rest += used;
  }
  if (!parser.is_done()) {
    parser.put_eof(ec);
    if (ec || !parser.is_done())
      return Status::InvalidArgument("HTTP request: incomplete (" + std::to_string(bytes.size()) +
                                     " bytes end inside the " + (parser.is_header_done() ? "body)" : "header)"));
  }
  return parser.release();
}

Result<TensorData> ParseInferBody(const std::string& body, const std::string& content_type, const Shape& want) {
  if (body.rfind("\x93NUMPY", 0) == 0 || content_type.find("npy") != std::string::npos ||
      content_type.find("octet-stream") != std::string::npos)
    return ParseNpy(body, "request body");
  return ParseJsonTensor(body, want, NumElements(want), "request body");
}

}  // namespace tessera
