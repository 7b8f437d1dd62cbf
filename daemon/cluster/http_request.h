// The gateway's HTTP request parsing apart from its sockets (issue 14, the
// fuzzers in tests/fuzz/): Beast's request parser configured the way the
// endpoint (http_endpoint.cc) configures it, and the /v1/infer body.
#pragma once

#include <boost/beast/http.hpp>
#include <cstdint>
#include <string>

#include "partition/graph/graph.h"
#include "util/status.h"

namespace tessera {

using HttpRequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;
using HttpRequest = boost::beast::http::request<boost::beast::http::string_body>;

// The endpoint's limits on a parser: bodies over `max_body_bytes` are
// refused (http::error::body_limit) before they are stored.
void ConfigureRequestParser(int64_t max_body_bytes, HttpRequestParser* parser);

// One complete request held in `bytes` (the endpoint reads from its socket
// instead; tests and fuzzers use this). InvalidArgument for a malformed or
// incomplete request, ResourceExhausted for a body over `max_body_bytes`.
Result<HttpRequest> ParseHttpRequest(const std::string& bytes, int64_t max_body_bytes);

// A /v1/infer body: an .npy (by its magic or an npy/octet-stream content
// type) or a JSON tensor of shape `want`. Errors name "request body".
Result<TensorData> ParseInferBody(const std::string& body, const std::string& content_type, const Shape& want);

}  // namespace tessera
