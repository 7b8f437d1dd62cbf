#include "daemon/cluster/gateway_tokens.h"

#include <cctype>
#include <fstream>

#include "transport/tls/content_hash.h"

namespace tessera {

namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The tokens of `path` in order (see GatewayTokens::Load).
Result<std::vector<std::string>> ReadTokens(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument("--token-file " + path + " cannot be read");
  std::vector<std::string> tokens;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const std::string_view token = Trim(line);
    if (token.empty() || token.front() == '#') continue;
    for (unsigned char c : token)
      if (c <= ' ' || c == 0x7f)
        return Status::InvalidArgument("--token-file " + path + ": line " + std::to_string(number) +
                                       " holds blanks or control characters inside its token; one token per line");
    tokens.emplace_back(token);
  }
  if (in.bad()) return Status::InvalidArgument("--token-file " + path + " cannot be read");
  if (tokens.empty())
    return Status::InvalidArgument("--token-file " + path +
                                   " holds no token (one per line; blank lines and # comments are ignored)");
  return tokens;
}

}  // namespace

Result<GatewayTokens> GatewayTokens::Load(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::vector<std::string> tokens, ReadTokens(path));
  GatewayTokens out;
  for (std::string& t : tokens) {
    out.digests_.push_back(Sha256Digest(t));
    std::fill(t.begin(), t.end(), '\0');
  }
  return out;
}

Result<std::string> GatewayTokens::FirstToken(const std::string& path) {
  TS_ASSIGN_OR_RETURN(std::vector<std::string> tokens, ReadTokens(path));
  return tokens.front();
}

bool GatewayTokens::Accepts(std::string_view authorization) const {
  authorization = Trim(authorization);
  constexpr std::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() || authorization[kScheme.size()] != ' ') return false;
  for (size_t i = 0; i < kScheme.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  const std::string presented = Sha256Digest(Trim(authorization.substr(kScheme.size() + 1)));
  // Every digest is compared, so the time does not say which one matched.
  bool match = false;
  for (const std::string& d : digests_) match |= ConstantTimeEquals(presented, d);
  return match;
}

}  // namespace tessera
