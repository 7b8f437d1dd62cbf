// UartLink implementation: one I/O thread owns the port and the protocol
// state machine (reads, frame handling, pacing, retransmission); Send/Recv
// callers only post work to it and wait on the mailbox.
#include "transport/uart/uart_link.h"

#include <termios.h>

#include <algorithm>
#include <cmath>
#include <boost/asio.hpp>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

namespace tessera {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

namespace {

// a before b in wrapping 32-bit sequence space.
bool SeqBefore(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }

struct OutgoingMessage {
  uint8_t type;
  uint32_t message;
  std::string bytes;
  size_t next_offset = 0;
  bool started = false;  // an empty message still sends one frame
  uint32_t last_sequence = 0;
  bool framed() const { return started && next_offset >= bytes.size(); }
};

struct InFlightFrame {
  uint32_t sequence;
  std::string encoded;
  Clock::time_point sent_at;   // when its last byte left (paced), last transmission
  uint64_t tx_order = 0;       // position of its last transmission on the line
  bool retransmitted = false;  // Karn: no RTT sample from a frame sent twice
  bool sacked = false;         // the peer holds it past a gap (selective ack)
  bool lost = false;           // queued for retransmission
};

struct PartialMessage {
  uint32_t total = 0;
  std::string bytes;
};

}  // namespace

struct UartLink::State {
  explicit State(const UartLinkOptions& o) : options(o), port(io), pace_timer(io), tick_timer(io) {}

  const UartLinkOptions& options;
  asio::io_context io;
  asio::serial_port port;
  asio::steady_timer pace_timer, tick_timer;
  std::thread thread;

  // --- I/O-thread state ---
  uint32_t tx_session = 0, tx_next = 0;
  std::deque<OutgoingMessage> outq;
  std::deque<InFlightFrame> unacked;  // by sequence, from the peer's cumulative ack up
  std::deque<uint32_t> lost_queue;    // sequences to retransmit, in the order found lost
  uint64_t tx_order = 0;              // transmissions so far (new and repeated)
  uint64_t delivered_order = 0;       // latest transmission the peer acknowledged
  // Loss estimate for the frame size: frames found lost per encoded byte sent,
  // halved every kLossHorizonBytes so the size follows the line.
  double loss_frames = 0, loss_bytes = 0;
  int retries = 0;
  bool writing = false, pace_armed = false, ack_pending = false;
  std::string write_buf;
  Clock::time_point line_free_at = Clock::now();
  // Retransmission timeout, adapted to the measured ACK round trip as in
  // RFC 6298 (a peer may drain its UART far slower than the baud rate: an
  // emulated MCU, a busy one) and backed off exponentially on timeouts.
  std::chrono::milliseconds rto{0}, min_rto{0}, base_rto{0};  // rto = base_rto backed off
  double srtt_ms = -1, rttvar_ms = 0;
  // When an ACK last acknowledged something new. A frame's timeout runs
  // from its transmission or from this, whichever is later (RFC 6298 5.3:
  // restart the timer on new acknowledgements): a peer that drains slower
  // than the line (an emulated MCU on a loaded host, an MCU busy in a
  // layer) delays the frames queued behind the one it is reading; counting
  // that wait against them retransmitted whole windows it still had to
  // read, and on a loaded machine the duplicates outgrew the progress
  // (a 56 KiB program upload did not finish in 45 s).
  Clock::time_point last_progress_at{};
  bool rx_session_known = false;
  uint32_t rx_session = 0, rx_expected = 0;
  std::map<uint32_t, Frame> held;  // reliable frames past a gap, by sequence (< rx_expected + kMaxWindow)
  std::map<std::pair<uint8_t, uint32_t>, PartialMessage> partial;
  // The last frame delivered in order: what a kFrameMore continues. Reset
  // to an empty header (total 0), which ContinueFrame refuses to continue.
  wire::FrameHeader delivered{};
  std::array<uint8_t, 4096> read_buf{};
  FrameStreamDecoder decoder;

  // --- shared with callers (mu) ---
  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<uint8_t, uint32_t>, std::string> mailbox;
  uint32_t plan_id = 0;
  bool broken = false;
  std::string broken_reason;
  size_t queued_messages = 0;  // sent by callers, not yet fully acknowledged
  size_t last_delivery_frame_bytes = 0;
  UartLinkCounters counters;

  void Break(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (broken) return;
      broken = true;
      broken_reason = why;
    }
    spdlog::warn("uart {}: link broken: {}", options.device, why);
    cv.notify_all();
  }

  // ---------------------------------------------------------------- sending
  Clock::duration WireTime(size_t bytes) const {
    return std::chrono::nanoseconds(static_cast<int64_t>(bytes) * 10 * 1'000'000'000LL / options.baud);
  }

  std::string Encode(const wire::FrameHeader& h, const void* payload) {
    uint8_t scratch[wire::kMaxRawFrame], out[wire::kMaxEncodedFrame];
    size_t n = wire::EncodeFrame(h, reinterpret_cast<const uint8_t*>(payload), scratch, out);
    return std::string(reinterpret_cast<char*>(out), n);
  }

  uint32_t CurrentPlan() {
    std::lock_guard<std::mutex> lock(mu);
    return plan_id;
  }

  // Payload bytes per new frame. On a clean line the configured maximum; when
  // frames get lost, the size that maximises the expected goodput
  //   L / (L + O) * (1 - q)^(L + O)     (O: per-frame overhead, q: loss per byte)
  // whose optimum solves L (L + O) = O / q. At 3e-4 damaged bytes per byte
  // (the bench's --faults 1e-4: corrupt + drop + duplicate) a 1 KiB frame is
  // lost 27% of the time; with compact headers (O = 10) ~180-byte frames
  // deliver ~89% of the line (~330-byte ones ~81% with full headers, O = 35).
  // Per-frame overhead: header, CRC, COBS codes and the delimiter; most
  // frames of a message are compact ones.
  double FrameOverhead() const {
    return double(options.compact_frames ? wire::kCompactHeaderBytes : wire::kHeaderBytes) + wire::kCrcBytes + 3;
  }
  static constexpr double kLossHorizonBytes = 64 * 1024;
  static constexpr double kLossPriorBytes = 2 * 1024;  // one loss alone does not shrink frames to the minimum
  static constexpr size_t kMinAdaptivePayload = 64;
  size_t FramePayload() const {
    if (!options.adapt_frame_payload || loss_frames <= 0) return options.frame_payload;
    const double q = loss_frames / (loss_bytes + kLossPriorBytes);
    const double o = FrameOverhead();
    const double best = (-o + std::sqrt(o * o + 4 * o / q)) / 2;
    return std::clamp(static_cast<size_t>(best), std::min(kMinAdaptivePayload, options.frame_payload),
                      options.frame_payload);
  }

  void CountTransmission(size_t bytes) {
    loss_bytes += static_cast<double>(bytes);
    if (loss_bytes > kLossHorizonBytes) {
      loss_bytes /= 2;
      loss_frames /= 2;
    }
  }

  // Next new frame from the queue, or false when nothing is waiting.
  bool NextNewFrame(std::string* encoded) {
    for (OutgoingMessage& m : outq) {
      if (m.framed()) continue;  // waits in the queue for its acknowledgement
      size_t n = std::min(FramePayload(), m.bytes.size() - m.next_offset);
      wire::FrameHeader h;
      h.type = m.type;
      h.length = static_cast<uint16_t>(n);
      h.plan_id = CurrentPlan();
      h.session = tx_session;
      h.sequence = tx_next++;
      h.message = m.message;
      h.offset = static_cast<uint32_t>(m.next_offset);
      h.total = static_cast<uint32_t>(m.bytes.size());
      if (options.compact_frames && m.next_offset > 0) {  // continues the frame of the sequence before
        *encoded = EncodeCompactFrame(tx_session, h.sequence, m.bytes.substr(m.next_offset, n));
      } else {
        *encoded = Encode(h, m.bytes.data() + m.next_offset);
      }
      m.next_offset += n;
      m.started = true;
      m.last_sequence = h.sequence;
      unacked.push_back({h.sequence, *encoded, {}});
      return true;
    }
    return false;
  }

  void Pump() {
    if (writing) return;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (broken) return;
    }
    Clock::time_point now = Clock::now();
    if (options.pace && now < line_free_at) {
      if (!pace_armed) {
        pace_armed = true;
        pace_timer.expires_at(line_free_at);
        pace_timer.async_wait([this](const boost::system::error_code& ec) {
          pace_armed = false;
          if (!ec) Pump();
        });
      }
      return;
    }
    InFlightFrame* in_flight = nullptr;
    if (ack_pending) {
      // Cumulative ack + the bitmap of the frames held past the gap.
      uint8_t sack[wire::kMaxSackBytes];
      size_t sack_bytes = 0;
      for (const auto& [sequence, frame] : held) {
        uint32_t i = sequence - rx_expected - 1;
        if (i < wire::kMaxSackBytes * 8) wire::SackSet(sack, &sack_bytes, i);
      }
      wire::FrameHeader h;
      h.type = wire::kFrameAck;
      h.length = static_cast<uint16_t>(sack_bytes);
      h.plan_id = CurrentPlan();
      h.session = rx_session;
      h.sequence = rx_expected;
      write_buf = Encode(h, sack);
      ack_pending = false;
      std::lock_guard<std::mutex> lock(mu);
      ++counters.acks_sent;
    } else if ((in_flight = NextLost()) != nullptr) {
      in_flight->lost = false;
      in_flight->retransmitted = true;
      write_buf = in_flight->encoded;
      std::lock_guard<std::mutex> lock(mu);
      ++counters.retransmissions;
    } else if ((unacked.empty() || tx_next - unacked.front().sequence < static_cast<uint32_t>(options.window)) &&
               NextNewFrame(&write_buf)) {
      in_flight = &unacked.back();
      std::lock_guard<std::mutex> lock(mu);
      ++counters.frames_sent;
    } else {
      return;  // idle; the tick timer watches for retransmission
    }
    line_free_at = std::max(now, line_free_at) + WireTime(write_buf.size());
    if (in_flight) {
      in_flight->sent_at = options.pace ? line_free_at : now;
      in_flight->tx_order = ++tx_order;
      CountTransmission(write_buf.size());
    }
    writing = true;
    asio::async_write(port, asio::buffer(write_buf), [this](const boost::system::error_code& ec, size_t n) {
      writing = false;
      if (ec) {
        Break("write failed: " + ec.message());
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        counters.wire_bytes_sent += n;
      }
      Pump();
    });
  }

  // The frame with `sequence` if it still waits for its acknowledgement.
  InFlightFrame* Find(uint32_t sequence) {
    if (unacked.empty()) return nullptr;
    uint32_t i = sequence - unacked.front().sequence;
    return i < unacked.size() ? &unacked[i] : nullptr;
  }

  InFlightFrame* NextLost() {
    while (!lost_queue.empty()) {
      InFlightFrame* f = Find(lost_queue.front());
      lost_queue.pop_front();
      if (f && f->lost && !f->sacked) return f;
    }
    return nullptr;
  }

  void MarkLost(InFlightFrame& f, bool fast) {
    f.lost = true;
    lost_queue.push_back(f.sequence);
    // Timeouts count too (most are a lost last frame); one from a slow peer
    // rather than a bad line costs a little frame size for a while.
    loss_frames += 1;
    if (fast) {
      std::lock_guard<std::mutex> lock(mu);
      ++counters.fast_retransmissions;
    }
  }

  // Periodic: retransmission timeout. Only the oldest frame still waiting
  // (not held by the peer, not already queued again) can time out, and only
  // it is sent again: frames after it were found lost by OnAck once the
  // peer acknowledged anything sent later, so a timeout means the peer is
  // silent or slow, or lost a tail. Repeating the whole window then (as
  // before) queued a window of duplicates in front of a slow peer per
  // timeout; one frame per timeout, with the timeout backed off, is what a
  // slow peer can absorb (TCP's RTO recovery, RFC 6298 5.4-5.6). A lost
  // tail of k frames costs k timeouts, each restarted by the progress of
  // the one before.
  void Tick() {
    tick_timer.expires_after(std::max(std::chrono::milliseconds(2), rto / 8));
    tick_timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      const Clock::time_point now = Clock::now();
      InFlightFrame* oldest = nullptr;
      for (InFlightFrame& f : unacked) {
        if (f.sacked || f.lost) continue;
        oldest = &f;
        break;
      }
      if (oldest && now > std::max(oldest->sent_at, last_progress_at) + rto) {
        MarkLost(*oldest, false);
        if (++retries > options.max_retries) {
          Break("no acknowledgement for sequence " + std::to_string(oldest->sequence) + " after " +
                std::to_string(options.max_retries) + " retransmissions");
          return;
        }
        rto = std::min(rto * 3 / 2, std::chrono::milliseconds(kMaxRtoMs));  // back off
        spdlog::debug("uart {}: sequence {} not acknowledged, retry {}, rto now {} ms ({} in flight)", options.device,
                      oldest->sequence, retries, rto.count(), unacked.size());
      }
      Pump();
      Tick();
    });
  }

  static constexpr int64_t kMaxRtoMs = 10000;

  void SampleRoundTrip(double ms) {
    if (srtt_ms < 0) {
      srtt_ms = ms;
      rttvar_ms = ms / 2;
    } else {
      rttvar_ms = 0.75 * rttvar_ms + 0.25 * std::abs(srtt_ms - ms);
      srtt_ms = 0.875 * srtt_ms + 0.125 * ms;
    }
    auto adapted = std::chrono::milliseconds(static_cast<int64_t>(srtt_ms + std::max(4 * rttvar_ms, 10.0)));
    base_rto = std::clamp(adapted, min_rto, std::chrono::milliseconds(kMaxRtoMs));
  }

  void OnAck(const wire::FrameHeader& h, const std::string& sack) {
    if (h.session != tx_session) return;
    if (SeqBefore(tx_next, h.sequence)) {  // acknowledges frames never sent: a confused peer
      std::lock_guard<std::mutex> lock(mu);
      ++counters.protocol_errors;
      return;
    }
    bool progress = false;
    const Clock::time_point now = Clock::now();
    auto delivered = [&](const InFlightFrame& f) {
      // Only a frame sent once says which transmission arrived (Karn): a
      // repeat acknowledged may be its first copy arriving late from a slow
      // peer, and taking the repeat's order would call everything sent in
      // between lost. A pty delivers a frame before its paced line time is
      // over: no negative round trips.
      if (!f.retransmitted) {
        SampleRoundTrip(std::max(0.0, std::chrono::duration<double, std::milli>(now - f.sent_at).count()));
        delivered_order = std::max(delivered_order, f.tx_order);
      }
      progress = true;
    };
    while (!unacked.empty() && SeqBefore(unacked.front().sequence, h.sequence)) {
      if (!unacked.front().sacked) delivered(unacked.front());
      unacked.pop_front();
    }
    const auto* bitmap = reinterpret_cast<const uint8_t*>(sack.data());
    for (InFlightFrame& f : unacked) {
      uint32_t i = f.sequence - h.sequence - 1;  // the front is the gap itself: i wraps past the bitmap
      if (f.sacked || !wire::SackHas(bitmap, sack.size(), i)) continue;
      f.sacked = true;
      f.lost = false;
      delivered(f);
    }
    if (progress) {
      last_progress_at = now;
      retries = 0;
      rto = base_rto;  // the back-off lasts only while nothing gets through
    }
    // A serial line keeps byte order: a frame transmitted before one the
    // peer has, and not held by the peer, was lost (fast retransmit; the
    // repeat is a new transmission, so it is judged again only against
    // frames sent after it).
    for (InFlightFrame& f : unacked)
      if (!f.sacked && !f.lost && f.tx_order < delivered_order) MarkLost(f, true);
    // Messages whose frames are all acknowledged leave the queue.
    size_t done = 0;
    while (!outq.empty() && outq.front().framed() &&
           (unacked.empty() || SeqBefore(outq.front().last_sequence, unacked.front().sequence))) {
      outq.pop_front();
      ++done;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      queued_messages -= done;
      ++counters.acks_received;
    }
    if (done) cv.notify_all();
  }

  // ---------------------------------------------------------------- receiving
  void StartRead() {
    port.async_read_some(asio::buffer(read_buf), [this](const boost::system::error_code& ec, size_t n) {
      if (ec) {
        if (ec != asio::error::operation_aborted) Break("read failed: " + ec.message());
        return;
      }
      std::vector<Frame> frames;
      decoder.Feed(read_buf.data(), n, &frames);
      {
        std::lock_guard<std::mutex> lock(mu);
        counters.wire_bytes_received += n;
        counters.bad_frames = decoder.errors();
      }
      for (Frame& f : frames) OnFrame(std::move(f));
      Pump();
      StartRead();
    });
  }

  void OnFrame(Frame f) {
    wire::FrameHeader& h = f.header;
    if (h.type == wire::kFrameMore) h.sequence = wire::ExpandSequence(h.sequence, rx_expected);
    if (h.type == wire::kFrameAck) {
      OnAck(h, f.payload);
      return;
    }
    if (!rx_session_known || h.session != rx_session) {
      if (h.sequence != 0) {
        std::lock_guard<std::mutex> lock(mu);
        ++counters.foreign_session;
        return;
      }
      rx_session_known = true;
      rx_session = h.session;
      rx_expected = 0;
      held.clear();
      partial.clear();
      delivered = wire::FrameHeader{};
    }
    ack_pending = true;
    if (SeqBefore(h.sequence, rx_expected)) {  // delivered already: its ACK was lost, or the line repeated it
      std::lock_guard<std::mutex> lock(mu);
      ++counters.duplicates;
      return;
    }
    if (h.sequence != rx_expected) {
      // Past a gap: kept (selective repeat) when the ACK bitmap can name it.
      std::lock_guard<std::mutex> lock(mu);
      if (h.sequence - rx_expected >= wire::kMaxWindow) {
        ++counters.out_of_window;
      } else if (held.count(h.sequence)) {
        ++counters.duplicates;
      } else {
        held.emplace(h.sequence, std::move(f));
        ++counters.out_of_order;
      }
      return;
    }
    // In order: deliver it and every held frame it makes contiguous.
    Deliver(f);
    ++rx_expected;
    for (auto it = held.find(rx_expected); it != held.end(); it = held.find(rx_expected)) {
      Deliver(it->second);
      held.erase(it);
      ++rx_expected;
    }
  }

  // A reliable frame in sequence order: exactly once per sequence. A
  // compact one (kFrameMore) is completed from the frame delivered before it.
  void Deliver(Frame& f) {
    wire::FrameHeader& h = f.header;
    const size_t header_bytes = h.type == wire::kFrameMore ? wire::kCompactHeaderBytes : wire::kHeaderBytes;
    if (h.type == wire::kFrameMore && !wire::ContinueFrame(delivered, &h)) {
      delivered = wire::FrameHeader{};  // nor may a later compact frame continue it
      std::lock_guard<std::mutex> l(mu);
      ++counters.frames_received;
      ++counters.protocol_errors;
      return;
    }
    delivered = h;
    std::unique_lock<std::mutex> lock(mu);
    ++counters.frames_received;
    if (h.type == wire::kFrameData && h.plan_id != plan_id) {
      ++counters.foreign_plan;
      spdlog::debug("uart {}: dropped tensor {} of plan {:08x} (holding {:08x})", options.device, h.message,
                    h.plan_id, plan_id);
      return;
    }
    lock.unlock();
    auto key = std::make_pair(h.type, h.message);
    PartialMessage& p = partial[key];
    if (h.offset == 0) {
      if (h.total > options.max_message_bytes) {
        partial.erase(key);
        std::lock_guard<std::mutex> l(mu);
        ++counters.protocol_errors;
        return;
      }
      p.total = h.total;
      p.bytes.clear();
      p.bytes.reserve(h.total);
    }
    // In-order delivery: each chunk continues the message exactly.
    if (h.total != p.total || h.offset != p.bytes.size()) {
      partial.erase(key);
      std::lock_guard<std::mutex> l(mu);
      ++counters.protocol_errors;
      return;
    }
    p.bytes.append(f.payload);
    if (p.bytes.size() == p.total) {
      {
        std::lock_guard<std::mutex> l(mu);
        mailbox[key] = std::move(p.bytes);
        const size_t raw = header_bytes + h.length + wire::kCrcBytes;
        last_delivery_frame_bytes = raw + raw / 254 + 2;
      }
      partial.erase(key);
      cv.notify_all();
    }
  }
};

UartLink::UartLink(const UartLinkOptions& options) : options_(options), state_(std::make_unique<State>(options_)) {}

Result<std::unique_ptr<UartLink>> UartLink::Open(const UartLinkOptions& options) {
  if (options.frame_payload == 0 || options.frame_payload > wire::kMaxPayload)
    return Status::InvalidArgument("uart " + options.device + ": frame_payload must be in 1.." +
                                   std::to_string(wire::kMaxPayload));
  if (options.baud == 0 || options.window < 1 || options.window > static_cast<int>(wire::kMaxWindow))
    return Status::InvalidArgument("uart " + options.device + ": baud must be positive and window in 1.." +
                                   std::to_string(wire::kMaxWindow));
  std::unique_ptr<UartLink> link(new UartLink(options));
  State& s = *link->state_;
  boost::system::error_code ec;
  s.port.open(options.device, ec);
  if (ec) return Status::IOError("uart " + options.device + ": cannot open: " + ec.message());
  using SP = asio::serial_port_base;
  s.port.set_option(SP::baud_rate(options.baud), ec);
  if (!ec) s.port.set_option(SP::character_size(8), ec);
  if (!ec) s.port.set_option(SP::parity(SP::parity::none), ec);
  if (!ec) s.port.set_option(SP::stop_bits(SP::stop_bits::one), ec);
  if (!ec) s.port.set_option(SP::flow_control(SP::flow_control::none), ec);
  if (ec) return Status::IOError("uart " + options.device + ": cannot configure 8N1 at " +
                                 std::to_string(options.baud) + " baud: " + ec.message());
  // Raw mode: no echo, no line editing, no CR/LF translation, no signals.
  termios tio{};
  int fd = s.port.native_handle();
  if (tcgetattr(fd, &tio) != 0) return Status::FromErrno(errno, "uart " + options.device + ": tcgetattr");
  speed_t speed = cfgetospeed(&tio);
  cfmakeraw(&tio);
  tio.c_cflag |= CLOCAL | CREAD;
  cfsetspeed(&tio, speed);
  if (tcsetattr(fd, TCSANOW, &tio) != 0) return Status::FromErrno(errno, "uart " + options.device + ": tcsetattr");
  tcflush(fd, TCIOFLUSH);

  std::random_device rd;
  s.tx_session = rd() | 1u;
  s.plan_id = options.plan_id;
  // Before the first round trip is measured: two full frame times + 50 ms
  // (the peer's ACK may queue behind a frame it is sending). Measured round
  // trips may bring it down to the floor: the configured minimum, or one
  // ACK's line time + 20 ms — a lost tail frame has no later frame to reveal
  // it, so this timeout is what a lost last frame costs.
  const auto initial = std::chrono::duration_cast<std::chrono::milliseconds>(s.WireTime(wire::kMaxEncodedFrame) * 2 +
                                                                             std::chrono::milliseconds(50));
  s.min_rto = options.retransmit_timeout.count() > 0
                  ? options.retransmit_timeout
                  : std::chrono::duration_cast<std::chrono::milliseconds>(
                        s.WireTime(wire::kHeaderBytes + wire::kMaxSackBytes + wire::kCrcBytes + 2) +
                        std::chrono::milliseconds(20));
  s.rto = s.base_rto = std::max(initial, s.min_rto);
  // A lone delimiter first: ends whatever partial garbage the peer holds.
  asio::post(s.io, [&s] {
    s.write_buf.assign(1, '\0');
    s.writing = true;
    asio::async_write(s.port, asio::buffer(s.write_buf), [&s](const boost::system::error_code&, size_t) {
      s.writing = false;
      s.Pump();
    });
    s.StartRead();
    s.Tick();
  });
  s.thread = std::thread([&s] { s.io.run(); });
  spdlog::debug("uart {}: open at {} baud, session {:08x}, rto {} ms", options.device, options.baud, s.tx_session,
                s.rto.count());
  return link;
}

UartLink::~UartLink() {
  State& s = *state_;
  s.io.stop();
  if (s.thread.joinable()) s.thread.join();
  boost::system::error_code ec;
  s.port.close(ec);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.broken = true;
    s.broken_reason = "link closed";
  }
  s.cv.notify_all();
}

Status UartLink::Send(int64_t message, std::string bytes) { return SendTyped(wire::kFrameData, message, std::move(bytes)); }

Result<std::string> UartLink::Recv(int64_t message, std::chrono::milliseconds timeout) {
  return RecvTyped(wire::kFrameData, message, timeout);
}

Status UartLink::SendTyped(uint8_t type, int64_t message, std::string bytes) {
  if (!wire::IsReliableFrameType(type) || type == wire::kFrameMore || message < 0 || message > 0xFFFFFFFFll)
    return Status::InvalidArgument(description() + ": message " + std::to_string(message) +
                                   " needs a reliable frame type and a 32-bit id");
  if (bytes.size() > options_.max_message_bytes)
    return Status::InvalidArgument(description() + ": message " + std::to_string(message) + " has " +
                                   std::to_string(bytes.size()) + " bytes, above the link's limit");
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.broken) return Status::Unavailable(description() + ": " + s.broken_reason);
    ++s.queued_messages;
  }
  bytes_sent_ += static_cast<int64_t>(bytes.size());
  auto m = std::make_shared<OutgoingMessage>(OutgoingMessage{type, static_cast<uint32_t>(message), std::move(bytes)});
  asio::post(s.io, [&s, m] {
    s.outq.push_back(std::move(*m));
    s.Pump();
  });
  return Status::OK();
}

Result<std::string> UartLink::RecvTyped(uint8_t type, int64_t message, std::chrono::milliseconds timeout) {
  if (message < 0 || message > 0xFFFFFFFFll)
    return Status::InvalidArgument(description() + ": message id " + std::to_string(message) + " is not 32-bit");
  State& s = *state_;
  auto key = std::make_pair(type, static_cast<uint32_t>(message));
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.cv.wait_for(lock, timeout, [&] { return s.mailbox.count(key) != 0 || s.broken; }))
    return Status::DeadlineExceeded(description() + ": message " + std::to_string(message) + " did not arrive within " +
                                    std::to_string(timeout.count()) + " ms");
  auto it = s.mailbox.find(key);
  if (it == s.mailbox.end())
    return Status::DataLoss(description() + ": message " + std::to_string(message) + " lost: " + s.broken_reason);
  std::string out = std::move(it->second);
  s.mailbox.erase(it);
  return out;
}

Status UartLink::Flush(std::chrono::milliseconds timeout) {
  State& s = *state_;
  std::unique_lock<std::mutex> lock(s.mu);
  if (!s.cv.wait_for(lock, timeout, [&] { return s.queued_messages == 0 || s.broken; }))
    return Status::DeadlineExceeded(description() + ": " + std::to_string(s.queued_messages) +
                                    " messages not acknowledged within " + std::to_string(timeout.count()) + " ms");
  if (s.queued_messages != 0) return Status::Unavailable(description() + ": " + s.broken_reason);
  return Status::OK();
}

void UartLink::set_plan_id(uint32_t plan_id) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->plan_id = plan_id;
}

size_t UartLink::last_delivery_frame_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->last_delivery_frame_bytes;
}

UartLinkCounters UartLink::counters() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->counters;
}

std::string UartLink::MetricsText(const std::string& label) const {
  UartLinkCounters c = counters();
  std::string out;
  auto line = [&](const char* name, uint64_t v, const std::string& extra = "") {
    out += std::string("tessera_uart_") + name + "{link=\"" + label + "\"" + extra + "} " + std::to_string(v) + "\n";
  };
  line("frames_sent_total", c.frames_sent);
  line("retransmissions_total", c.retransmissions);
  line("frames_received_total", c.frames_received);
  line("duplicate_frames_total", c.duplicates);
  line("out_of_order_frames_total", c.out_of_order);
  line("out_of_window_frames_total", c.out_of_window);
  line("fast_retransmissions_total", c.fast_retransmissions);
  line("foreign_plan_frames_total", c.foreign_plan);
  line("protocol_errors_total", c.protocol_errors);
  line("wire_bytes_sent_total", c.wire_bytes_sent);
  line("wire_bytes_received_total", c.wire_bytes_received);
  for (int i = 1; i < wire::kNumFrameErrors; ++i)
    line("bad_frames_total", c.bad_frames.by_reason[i],
         std::string(",reason=\"") + wire::FrameErrorName(static_cast<wire::FrameError>(i)) + "\"");
  return out;
}

uint32_t PlanIdHash(const std::string& plan_id) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : plan_id) h = (h ^ c) * 1099511628211ull;
  uint32_t folded = static_cast<uint32_t>(h ^ (h >> 32));
  return folded ? folded : 1u;
}

Result<mcu::McuStatus> QueryMcuStatus(UartLink& link, uint32_t id, std::chrono::milliseconds timeout,
                                      std::vector<uint32_t>* layer_ticks) {
  TS_RETURN_IF_ERROR(link.SendTyped(wire::kFrameStatus, id, ""));
  TS_ASSIGN_OR_RETURN(std::string bytes, link.RecvTyped(wire::kFrameStatus, id, timeout));
  mcu::McuStatus s;
  uint32_t ticks[mcu::kMaxTimedLayers], layers = 0;
  if (!mcu::DecodeStatusReply(bytes.data(), bytes.size(), &s, ticks, mcu::kMaxTimedLayers, &layers))
    return Status::DataLoss("a STATUS reply of " + std::to_string(bytes.size()) +
                            " bytes that is not a status (expected " + std::to_string(sizeof s) +
                            " bytes + 4 per timed layer, and its magic)");
  if (layer_ticks) layer_ticks->assign(ticks, ticks + std::min(layers, mcu::kMaxTimedLayers));
  return s;
}

}  // namespace tessera
