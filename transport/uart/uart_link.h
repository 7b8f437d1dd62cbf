// UartLink: a Link over a serial port (ARCHITECTURE.md "Wire rules"; issue 6).
//
// Boost.Asio serial_port, raw 8N1 at the configured baud. Messages are cut
// into frames (transport/wire/frame_codec.h) of at most `frame_payload` bytes.
// Reliability is selective repeat over a per-direction sequence number
// (issue 16; wire format in frame_codec.h):
//  * the receiver delivers frames strictly in sequence order, each sequence
//    exactly once; a frame past a gap is kept (up to wire::kMaxWindow - 1
//    frames past the expected one) until the gap is filled. Every reliable
//    frame is answered with an ACK: the next expected sequence (cumulative)
//    plus a bitmap of the frames held past the gap. Duplicates are dropped
//    and re-acknowledged;
//  * the sender keeps up to `window` sequences in flight and retransmits only
//    frames that are missing: at once when the peer acknowledges a frame
//    transmitted after one it does not hold (a serial line keeps byte order,
//    so that frame was lost — fast retransmit), or when the oldest frame
//    still waiting times out (a lost last frame, a silent or slow peer): then
//    only that frame is sent again. The timeout runs from the frame's
//    transmission or the last new acknowledgement, whichever is later,
//    adapts to the measured ACK round trip (RFC 6298 style; never below
//    `retransmit_timeout`) and backs off by 1.5x on every timeout; after
//    `max_retries` such timeouts in a row without progress
//    the link is broken and every pending and later call fails (Unavailable
//    / DataLoss) — a tensor arrives intact or not at all;
//  * a message's first frame carries the full header, its later frames the
//    3-byte compact one (compact_frames; wire::kFrameMore): ~25 bytes a
//    frame more for payload, which matters most on a lossy line where
//    frames are short;
//  * frames shrink when the line loses them (adapt_frame_payload): the
//    payload per frame is chosen from the measured loss per byte so that the
//    expected goodput is highest, back up to `frame_payload` on a clean line.
//  * frames that fail COBS / length / CRC / type checks are dropped and
//    counted (counters() — exported to /metrics by the daemon).
//  * the sender paces itself so the bytes it writes never exceed baud/10
//    bytes per second (8N1: 10 bits per byte), ACKs included.
// Each link instance starts a new random session; a peer that sees a new
// session at sequence 0 resets its receive state (a restarted host or MCU).
//
// Messages of the Link interface travel as DATA frames and carry the link's
// plan id; a DATA frame for another plan is acknowledged, dropped and
// counted (wire rules: refuse tensors of a plan we do not hold). PROGRAM and
// STATUS frames (the MCU control plane) travel through SendTyped/RecvTyped.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport/link.h"
#include "transport/wire/frame.h"
#include "transport/wire/mcu_program.h"
#include "util/status.h"

namespace tessera {

struct UartLinkOptions {
  std::string device;             // "/dev/ttyUSB0", a pty slave "/dev/pts/5"
  uint32_t baud = 115200;
  uint32_t plan_id = 0;           // stamped on every frame; DATA frames of other plans are refused
  size_t frame_payload = 1024;    // bytes of message per frame (<= wire::kMaxPayload)
  // Reliable sequences in flight, 1..wire::kMaxWindow. The peer must be able
  // to hold window - 1 frames past a gap (an MCU holds mcu::kRxSlots: use
  // mcu::kRxSlots + 1 towards it); frames it cannot hold are sent again.
  int window = 16;
  bool adapt_frame_payload = true;  // smaller frames while the line loses frames
  // A message's later frames with the 3-byte compact header (frame_codec.h
  // kFrameMore) instead of the 28-byte one. Every tessera peer (host link,
  // MCU firmware) reads both; off only for a peer built before the format.
  bool compact_frames = true;
  // Minimum retransmission timeout; 0: derived from the baud — two full
  // frame times plus 50 ms. The effective timeout adapts upwards to the peer.
  std::chrono::milliseconds retransmit_timeout{0};
  int max_retries = 40;           // consecutive timeouts without progress before the link is broken
  size_t max_message_bytes = size_t{64} << 20;
  bool pace = true;               // never write faster than baud/10 bytes per second
};

// Counters for /metrics; monotonically increasing.
struct UartLinkCounters {
  uint64_t frames_sent = 0;          // reliable frames, first transmissions
  uint64_t retransmissions = 0;      // reliable frames sent again
  uint64_t fast_retransmissions = 0;  // of them: found lost because the peer acknowledged a later frame
  uint64_t acks_sent = 0, acks_received = 0;
  uint64_t frames_received = 0;      // reliable frames delivered in order (directly or after being held)
  uint64_t duplicates = 0;           // already delivered or held (a lost ACK, a duplicated byte run)
  uint64_t out_of_order = 0;         // ahead of the expected sequence, kept until the gap is filled
  uint64_t out_of_window = 0;        // too far ahead to be named in an ACK: dropped
  uint64_t foreign_session = 0;      // from an old session of the peer
  uint64_t foreign_plan = 0;         // DATA for a plan this link does not hold
  uint64_t protocol_errors = 0;      // CRC-valid frames with inconsistent message offsets/sizes
  uint64_t wire_bytes_sent = 0, wire_bytes_received = 0;
  FrameErrorCounts bad_frames;       // dropped by the decoder, by reason
};

class UartLink final : public Link {
 public:
  // Opens and configures the port and starts the link's I/O thread.
  // IOError naming the device when it cannot be opened or configured.
  static Result<std::unique_ptr<UartLink>> Open(const UartLinkOptions& options);
  ~UartLink() override;

  Status Send(int64_t message, std::string bytes) override;
  Result<std::string> Recv(int64_t message, std::chrono::milliseconds timeout) override;
  int64_t bytes_sent() const override { return bytes_sent_; }
  std::string description() const override { return "uart " + options_.device; }

  // Any reliable frame type (wire::kFrameData / kFrameProgram / kFrameStatus).
  // Message ids travel as 32 bits; larger ids are InvalidArgument.
  Status SendTyped(uint8_t type, int64_t message, std::string bytes);
  Result<std::string> RecvTyped(uint8_t type, int64_t message, std::chrono::milliseconds timeout);

  // Until every queued message has been acknowledged by the peer (or the
  // link broke / the timeout passed).
  Status Flush(std::chrono::milliseconds timeout);

  void set_plan_id(uint32_t plan_id);
  // Encoded bytes of the frame that completed the latest delivered message
  // (bench: a pty delivers it at once, a cable after this many bytes' time).
  size_t last_delivery_frame_bytes() const;
  UartLinkCounters counters() const;
  // Prometheus text lines "tessera_uart_<counter>{link="<label>"} value".
  std::string MetricsText(const std::string& label) const;
  const UartLinkOptions& options() const { return options_; }

 private:
  struct State;
  explicit UartLink(const UartLinkOptions& options);
  UartLinkOptions options_;
  std::unique_ptr<State> state_;
  std::atomic<int64_t> bytes_sent_{0};
};

// FNV-1a of the plan's bytes folded to 32 bits, never 0 (0 means "no plan").
uint32_t PlanIdHash(const std::string& plan_id);

// A STATUS round trip with an MCU worker on `link` (message id `id`): its
// McuStatus, and with `layer_ticks` the last run's per-layer ticks
// (transport/wire/mcu_program.h DecodeStatusReply). DataLoss when the reply
// is not a status; the link's error when none arrives within `timeout`.
Result<mcu::McuStatus> QueryMcuStatus(UartLink& link, uint32_t id, std::chrono::milliseconds timeout,
                                      std::vector<uint32_t>* layer_ticks = nullptr);

}  // namespace tessera
