// Bearer tokens of the gateway (`tessera gateway --token-file FILE`, issue 14
// item 2): a client must present one of them — HTTP as
// `Authorization: Bearer TOKEN`, gRPC as `authorization: Bearer TOKEN`
// metadata. Only SHA-256 digests of the tokens are kept; a presented token is
// hashed and compared with every digest in constant time
// (transport/tls/content_hash.h), so neither its length nor how many leading
// bytes match shows in the time taken. Tokens are never logged.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "util/status.h"

namespace tessera {

class GatewayTokens {
 public:
  // Reads FILE: one token per line; surrounding blanks are trimmed, blank
  // lines and lines starting with '#' are ignored. InvalidArgument naming
  // the file when it cannot be read, holds no token, or a token contains
  // blanks or control characters (it would not survive an HTTP header).
  static Result<GatewayTokens> Load(const std::string& path);
  // The first token of FILE, for a client (`tessera infer --token-file`).
  static Result<std::string> FirstToken(const std::string& path);

  // Whether `authorization` (the header / metadata value) is "Bearer TOKEN"
  // (scheme case-insensitive) with TOKEN one of the file's.
  bool Accepts(std::string_view authorization) const;
  size_t size() const { return digests_.size(); }

 private:
  std::vector<std::string> digests_;  // SHA-256 of each token
};

// The WWW-Authenticate value of a 401 answer.
inline constexpr const char* kBearerChallenge = "Bearer realm=\"tessera\"";

}  // namespace tessera
