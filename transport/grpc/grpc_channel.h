// Channel and server credentials for every gRPC connection tessera makes —
// chosen here and only here (issue 5: mutual TLS slots in at this one place).
// Today only plaintext exists, and it is allowed without asking only when
// every address involved is loopback; a cluster on a real network must say
// so explicitly (`--insecure`) until TLS lands.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "util/status.h"

namespace tessera {

struct TransportSecurity {
  // Plaintext to non-loopback addresses (a trusted LAN). TLS comes next.
  bool allow_plaintext_remote = false;
};

// 127.0.0.0/8, ::1, localhost (with a port).
bool IsLoopbackAddress(const std::string& address);

// Largest gRPC message tessera sends unchunked (requests with model inputs).
inline constexpr int kMaxGrpcMessageBytes = 256 << 20;
// Chunk size of program loads and tensor frames (below gRPC's 4 MiB default).
inline constexpr size_t kChunkBytes = 1 << 20;

Result<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address, const TransportSecurity& security);
Result<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(const std::string& listen_address,
                                                                      const TransportSecurity& security);

grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status, const std::string& context);

// Absolute deadline (ms since the Unix epoch) <-> steady remaining time.
int64_t UnixMillisNow();
std::chrono::system_clock::time_point DeadlineFromUnixMillis(int64_t unix_ms);

}  // namespace tessera
