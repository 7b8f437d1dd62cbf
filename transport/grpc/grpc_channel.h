// Channel and server credentials for every gRPC connection tessera makes —
// chosen here and only here. With a TLS identity (`--tls-dir`) every channel
// and every server is mutual TLS under the cluster CA (issue 14): servers
// require a client certificate and verify it against ca.crt, clients verify
// the server's certificate (CA and the address's host among its
// subjectAltNames) and present their own; plaintext is then never used.
// Without one, plaintext is allowed without asking only when the address is
// loopback; a cluster on a real network must say so explicitly
// (`--insecure`, trusted labs only).
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/tls/cluster_ca.h"
#include "util/status.h"

namespace tessera {

struct TransportSecurity {
  // Plaintext to non-loopback addresses (a trusted LAN; ignored with tls).
  bool allow_plaintext_remote = false;
  // Set: mutual TLS on every channel and server (transport/tls/cluster_ca.h).
  std::shared_ptr<const TlsIdentity> tls;
};

// `--tls-dir DIR` with identity NAME: the security every channel and server
// of the process uses (LoadTlsIdentity's checks; errors name the file).
// An empty dir keeps plaintext (`insecure` = allow_plaintext_remote).
Result<TransportSecurity> MakeTransportSecurity(const std::string& tls_dir, const std::string& tls_name,
                                                bool insecure);

// 127.0.0.0/8, ::1, localhost (with a port).
bool IsLoopbackAddress(const std::string& address);

// Largest gRPC message tessera sends unchunked (requests with model inputs).
inline constexpr int kMaxGrpcMessageBytes = 256 << 20;
// Chunk size of program loads (below gRPC's 4 MiB default).
inline constexpr size_t kChunkBytes = 1 << 20;
// Largest tensor frame between workers (PeerSender). Each Exchange stream
// holds up to about two frames in flight on each end (the frame's copy and
// gRPC's serialized or received message), outside the device arena the
// promise counts. VGG-16's memory plan on 4 loopback workers (3 peers each
// way, messages up to 13 MB), peak RSS after 6 requests against the
// promise: 1 MiB frames 7.9-11 MiB over, 256 KiB 1.7-2.3 MiB over, 64 KiB
// (gRPC's default stream window) 0.5 MiB under to 0.5 MiB over, flat, as
// fast. Framing: ~40 bytes a frame.
inline constexpr size_t kExchangeFrameBytes = 64 << 10;

Result<std::shared_ptr<grpc::Channel>> OpenChannel(const std::string& address, const TransportSecurity& security);
Result<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(const std::string& listen_address,
                                                                      const TransportSecurity& security);

// Waits up to `timeout` for `channel` (opened by OpenChannel(address,
// security)) to connect. Unavailable otherwise, with gRPC's reason and what
// to check: a TLS handshake refused by either side (wrong CA, a certificate
// that does not name the address, no --tls-dir on one side) never succeeds
// by waiting longer, so callers that would wait minutes ask this first.
Status WaitUntilConnected(const std::shared_ptr<grpc::Channel>& channel, const std::string& address,
                          const TransportSecurity& security, std::chrono::milliseconds timeout);

// The caller of a server RPC, for logs: "NAME (ADDR)" with NAME from its
// TLS certificate (the first subjectAltName, which `tessera certs issue`
// makes the device name), "ADDR" in plaintext.
std::string DescribePeer(const grpc::ServerContext& context);

// Who the caller of a server RPC proved to be: the names in its verified
// TLS client certificate (subject CN and every subjectAltName), empty in
// plaintext (a plaintext caller proves nothing). A peer "is" device NAME
// when NAME is among them (`tessera certs issue --name NAME` puts it in both).
std::vector<std::string> PeerCertificateNames(const grpc::ServerContext& context);
// Whether `name` is among PeerCertificateNames(context).
bool PeerIs(const std::vector<std::string>& peer_names, const std::string& name);

// The settings every tessera gRPC server shares (worker and gateway):
// message size limits, the handshake timeout, and HTTP/2 flow control
// without BDP probing (OpenChannel sets the same for every channel).
//
// Why no BDP probing: gRPC widens a connection's receive windows to the
// bandwidth-delay product it estimates from how long its pings take to be
// answered. A receiver whose CPU is throttled (a board's quota, a busy
// core) answers late, the estimate grows, and the sender fills the wider
// windows: received slices wait in the receiver's heap. Measured on 4
// workers at 8.7 % of a CPU each (VGG-16, loopback, two runs each): with
// probing, workers peaked at up to 11 MiB (60 MiB on the device holding
// the most weights) over their memory promise, 13 MB of it gRPC's read
// slices at the peak (heaptrack); without it every worker stayed under its
// promise, deploy and requests as fast. gRPC's default windows (64 KiB a
// stream) then bound what a connection buffers.
void ConfigureServer(grpc::ServerBuilder* builder);

grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status, const std::string& context);

// Absolute deadline (ms since the Unix epoch) <-> steady remaining time.
int64_t UnixMillisNow();
std::chrono::system_clock::time_point DeadlineFromUnixMillis(int64_t unix_ms);

}  // namespace tessera
