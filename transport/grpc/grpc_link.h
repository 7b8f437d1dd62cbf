// The gRPC Link between worker daemons (ARCHITECTURE.md "Wire rules").
//
// Every ordered pair of workers that exchanges tensors has one long-lived
// Worker.Exchange stream, opened by the sender (PeerSender). Frames of all
// in-flight requests share it; a message id on the wire is request-scoped,
// (request << 32) | program message id, so several requests can be in flight
// without a change to the Link contract. Messages larger than kExchangeFrameBytes
// travel in several frames; the receiving worker feeds frames into its
// ExchangeInbox, where GrpcLink::Recv picks complete messages up.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "proto/services.grpc.pb.h"
#include "transport/link.h"

namespace tessera {

// Request-scoped message id; InvalidArgument when `message` does not fit 32 bits.
Result<int64_t> ComposeMessageId(uint32_t request, int64_t message);

// What an ExchangeInbox refused to keep (issue 14, "Bounded by construction").
struct ExchangeDropCounters {
  int64_t frames = 0, bytes = 0;  // frames dropped, for any reason below
  int64_t unexpected = 0;         // messages the program does not receive, or of another size
  int64_t finished = 0;           // for requests that already finished here
  int64_t early_over_limit = 0;   // for requests not started here, beyond the cap or held too long
  int64_t early_bytes_held = 0;   // bytes held now for requests not started here
  int64_t wrong_sender = 0;       // from a peer that is not the plan's sender of the message
  // Not drops: received bytes held outside the receiver's memory (frames
  // before Expect named their place), now and at most.
  int64_t heap_bytes = 0, heap_peak_bytes = 0;
};

// Messages arriving from peers, by (sending device, request-scoped id).
//
// Bounded: a frame is kept only for a message the program receives, at the
// size the program says; while its request runs here (BeginRequest ..
// FinishRequest); or, before that (a peer may start sending before the
// source's Run reaches this worker), for at most kMaxEarlyRequestsPerPeer
// requests per sending device and kEarlyExchangeHoldMs (util/limits.h).
// Everything else is dropped and counted, never kept: frames for finished
// requests (the last kRememberedFinishedRequests are remembered), for
// messages the program does not receive, beyond the early cap. So what one
// peer can make this device hold is at most (requests running +
// kMaxEarlyRequestsPerPeer) × the bytes the program receives from it per
// request. Thread-safe.
class ExchangeInbox {
 public:
  // `expected`: bytes of every message the program receives, by (sending
  // device, program message id) — from its Recv steps.
  explicit ExchangeInbox(std::map<std::pair<int, int64_t>, int64_t> expected);

  // The device runs / stops running `request` here. Finish discards what is
  // left of it (its abort mark included) and drops its later frames.
  void BeginRequest(uint32_t request);
  void FinishRequest(uint32_t request);
  // Accepts one frame. InvalidArgument for a message the program does not
  // receive or a size other than the program's; DataLoss when a chunk does
  // not continue its message (offset or total out of step) — the message is
  // discarded; FailedPrecondition for a finished request; ResourceExhausted
  // beyond the early cap. Every refusal is counted.
  Status Deliver(int from, int64_t message, int64_t offset, int64_t total, const std::string& data);
  // Counts a frame of `bytes` bytes that the caller refused because its
  // sender is not the one the plan names (worker.cc checks the peer).
  void CountWrongSender(int64_t bytes);
  Result<std::string> Take(int from, int64_t message, std::chrono::milliseconds timeout);
  // Names where `message` from `from` goes (`bytes` long, the program's
  // size): what arrived of it so far is copied there and freed, later frames
  // are written there directly. REQUIRES: the request runs here.
  void Expect(int from, int64_t message, char* dst, int64_t bytes);
  // Waits for the message as Take does and puts it into `dst` (the memory
  // Expect named: nothing to copy). DataLoss when it is not `bytes` long.
  Status TakeInto(int from, int64_t message, char* dst, int64_t bytes, std::chrono::milliseconds timeout);
  // Forgets every destination Expect named for `request` from `from`: after
  // it returns, no frame is written there (later frames are held, then
  // dropped when the request finishes).
  void Forget(int from, uint32_t request);
  // Fails every present and future Take of `request` with `why` (a device of
  // the request failed: waiting for its messages is pointless).
  void AbortRequest(uint32_t request, const Status& why);
  // Wakes every waiter with Unavailable (program unloaded, shutdown).
  void Close();
  ExchangeDropCounters dropped() const;

 private:
  struct Partial {
    std::string bytes;
    int64_t total = 0;
  };
  // A message that goes straight to its receiver's memory (Expect).
  struct Sink {
    char* dst = nullptr;
    int64_t total = 0;
    int64_t got = 0;  // bytes written, in order from offset 0
  };
  // Waits until `key` is complete (in complete_ or a full sink), its request
  // aborted, or the inbox closed; the reason it stopped otherwise. REQUIRES: lock holds mu_.
  Status WaitFor(std::unique_lock<std::mutex>& lock, const std::pair<int, int64_t>& key,
                 std::chrono::milliseconds timeout);
  using Key = std::pair<int, int64_t>;  // (from, request-scoped message id)
  // Counts a dropped frame of `bytes` bytes in `*reason`. REQUIRES: mu_ held.
  void CountDrop(int64_t bytes, int64_t* reason);
  // Discards what is kept of `request` (from `from` only, or from all when
  // from < 0); returns the bytes. REQUIRES: mu_ held.
  int64_t Discard(uint32_t request, int from);
  // Drops early requests held longer than kEarlyExchangeHoldMs. REQUIRES: mu_ held.
  void ExpireEarly(std::chrono::steady_clock::time_point now);
  int64_t EarlyBytes() const;  // REQUIRES: mu_ held
  int64_t HeapBytes() const;   // bytes in complete_ and partial_; REQUIRES: mu_ held

  const std::map<std::pair<int, int64_t>, int64_t> expected_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, std::string> complete_;                        // GUARDED_BY(mu_)
  std::map<Key, Partial> partial_;                             // GUARDED_BY(mu_)
  std::map<Key, Sink> sinks_;                                  // GUARDED_BY(mu_)
  std::map<uint32_t, Status> aborted_;                         // GUARDED_BY(mu_)
  std::set<uint32_t> running_;                                 // GUARDED_BY(mu_)
  std::set<uint32_t> finished_;                                // GUARDED_BY(mu_)
  std::deque<uint32_t> finished_order_;                        // GUARDED_BY(mu_), oldest first
  // Requests not started here that a device sent frames for: when first seen.
  std::map<int, std::map<uint32_t, std::chrono::steady_clock::time_point>> early_;  // GUARDED_BY(mu_)
  ExchangeDropCounters dropped_;                               // GUARDED_BY(mu_)
  int64_t heap_peak_bytes_ = 0;                                // GUARDED_BY(mu_)
  bool closed_ = false;                                        // GUARDED_BY(mu_)
};

struct LinkCountersSnapshot {
  int from = 0, to = 0;
  int64_t payload_bytes = 0, wire_bytes = 0, messages = 0;
  int64_t copied_messages = 0;  // sent from a copy (Send), not from the sender's memory (SendBorrowed)
};

// The outgoing side of one (this device -> peer) exchange stream. Send
// queues and returns; a writer thread cuts messages into frames and writes
// them. A broken stream is reopened for the next message (the lost messages
// surface as a Recv deadline on the peer, failing that request only).
class PeerSender {
 public:
  PeerSender(std::shared_ptr<grpc::Channel> channel, std::string plan_id, int from, int to, std::string address);
  ~PeerSender();
  PeerSender(const PeerSender&) = delete;
  PeerSender& operator=(const PeerSender&) = delete;

  Status Send(int64_t message, std::string bytes);
  // Sends `size` bytes at `data` without copying them first: they must stay
  // unchanged until WaitSent(message) or Drop() of its request returns.
  Status SendBorrowed(int64_t message, const char* data, size_t size);
  // Waits until the writer no longer reads a borrowed message (its last
  // bytes are in a frame, or it was given up); DeadlineExceeded at `deadline`.
  Status WaitSent(int64_t message, std::chrono::steady_clock::time_point deadline);
  // Drops the borrowed messages of `request` not yet written and stops the
  // one being written (after the frame being cut): afterwards nothing of the
  // request is read. Returns at once, whatever state the stream is in.
  void Drop(uint32_t request);
  LinkCountersSnapshot counters() const;
  const std::string& address() const { return address_; }

 private:
  void WriterLoop();
  bool OpenStream();
  // A queued message: its own bytes, or borrowed ones (data != nullptr).
  struct Outgoing {
    int64_t message = 0;
    std::string owned;
    const char* data = nullptr;
    size_t size = 0;
  };
  // Writes one message in frames; *released once a borrowed message's
  // memory was given back (Release). False when the stream broke.
  bool WriteMessage(const Outgoing& item, bool* released);
  void Release(int64_t message);  // a borrowed message is no longer read
  void CloseStream();

  const std::string plan_id_;
  const int from_, to_;
  const std::string address_;
  std::unique_ptr<proto::Worker::Stub> stub_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Outgoing> queue_;       // GUARDED_BY(mu_)
  std::set<int64_t> borrowed_;       // GUARDED_BY(mu_): borrowed, queued or being written
  std::condition_variable sent_cv_;  // borrowed_ shrank
  // The borrowed message the writer took last (-1: none) and whether its
  // request dropped it; the writer copies borrowed bytes only under read_mu_.
  // Lock order: mu_ before read_mu_.
  std::mutex read_mu_;
  int64_t current_ = -1;                                // GUARDED_BY(read_mu_)
  bool abandoned_ = false;                              // GUARDED_BY(read_mu_)
  bool stopping_ = false;                               // GUARDED_BY(mu_)

  // Writer-thread state. context_ is also read (TryCancel) by the
  // destructor, under context_mu_: a stream still connecting to a dead peer
  // (wait-for-ready) must not block the shutdown forever.
  std::mutex context_mu_;
  std::unique_ptr<grpc::ClientContext> context_;  // written under context_mu_
  std::unique_ptr<grpc::ClientReaderWriter<proto::TensorFrame, proto::ExchangeAck>> stream_;
  std::thread ack_reader_;
  int64_t frame_seq_ = 0;
  std::atomic<bool> stream_ended_{false};

  std::atomic<int64_t> payload_bytes_{0}, wire_bytes_{0}, messages_{0}, copied_messages_{0};
  std::thread writer_;
};

// One request's view of the link to one peer. Recv waits at most until the
// request's `deadline`, whatever timeout the runner asks for.
class GrpcLink final : public Link {
 public:
  GrpcLink(PeerSender* sender, ExchangeInbox* inbox, int peer, uint32_t request,
           std::chrono::steady_clock::time_point deadline)
      : sender_(sender), inbox_(inbox), peer_(peer), request_(request), deadline_(deadline) {}
  Status Send(int64_t message, std::string bytes) override;
  Result<std::string> Recv(int64_t message, std::chrono::milliseconds timeout) override;
  Status SendFrom(int64_t message, const void* data, size_t bytes) override;
  Status WaitSent(int64_t message) override;
  void Expect(int64_t message, void* dst, size_t bytes) override;
  Status RecvInto(int64_t message, void* dst, size_t bytes, std::chrono::milliseconds timeout) override;
  void Detach() override;
  int64_t bytes_sent() const override { return bytes_sent_; }
  std::string description() const override;

 private:
  PeerSender* const sender_;
  ExchangeInbox* const inbox_;
  const int peer_;
  const uint32_t request_;
  const std::chrono::steady_clock::time_point deadline_;
  std::atomic<int64_t> bytes_sent_{0};
};

}  // namespace tessera
