// tessera MCU worker (issue 6): bare-metal Cortex-M4 firmware for QEMU's
// mps2-an386 (CMSDK APB UART0..2). It speaks the UART frame protocol of
// transport/wire/frame_codec.h — the same code the host's UartLink compiles — and
// follows the same reliability rules, so from the host it is just a UartLink
// peer. UART0 (port 0) goes to the Linux board that owns the MCU; UART1 and
// UART2 (ports 1, 2) are direct links to other MCUs (issue 16 item 4,
// mcu_program.h kMaxPorts), each with its own sessions, sequences and held
// frames, and the same rules on every port:
//   receiving: selective repeat — frames are delivered in sequence order,
//              each exactly once; up to mcu::kRxSlots frames past a gap are
//              kept in slots (~1 KiB each) and named in the ACK's bitmap
//              (cumulative sequence + selective-ack bitmap); a message's
//              later frames may come compact (kFrameMore, 3-byte header),
//              completed from the frame delivered before them;
//   sending:   stop-and-wait per frame (its replies are small), per-boot
//              session, retransmission on timeout;
//   PROGRAM message  -> (port 0 only) written to the flash region, validated,
//                       plan adopted
//   STATUS request   -> (port 0 only) McuStatus reply (state, plan id, free
//                       RAM, counters, the last run's ticks in all and per layer)
//   DATA (inputs)    -> (the port its IoEntry names) written into the
//                       activation region; the program runs
//                       in phases (mcu_program.h): each layer once the inputs
//                       of its phase have arrived, each output as a DATA
//                       message as soon as the layers before it have run
// Memory: the program (layers and weights) in a flash region
// (TESSERA_MCU_FLASH_BYTES, in the FLASH memory of the linker script),
// written once as the PROGRAM message arrives and only read afterwards; its
// activations in one static RAM arena (TESSERA_MCU_ARENA_BYTES); no heap.
// Outside the arena: per port the frame decoder (~2.1 KiB) and the receive
// slots (kRxSlots x ~1.05 KiB = ~4.2 KiB); the transmit buffers (~2.1 KiB).
// RX is polled: QEMU's UART model holds the host back until a byte is read;
// on a real board the RX path would be an interrupt-fed ring buffer. With
// nothing to do the core sleeps (WFI) until a UART's RX interrupt or the
// 1 ms SysTick wakes it (Idle).
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "firmware/mcu_kernels.h"
#include "transport/wire/mcu_program.h"

// The kernels and the program validator above are built for speed (-O2:
// bench/mcu's cycle counts are theirs). Everything below — the frame codec,
// the link protocol, the main loop — runs at most once per UART byte or
// frame (~2 000 cycles per byte at 115200 baud and 25 MHz) and is built for
// size: the firmware's code must fit its 22 528-byte budget.
#pragma GCC optimize("Os")
#include "transport/wire/frame_codec.h"

#ifndef TESSERA_MCU_ARENA_BYTES
#define TESSERA_MCU_ARENA_BYTES (256 * 1024)
#endif
#ifndef TESSERA_MCU_FLASH_BYTES
#define TESSERA_MCU_FLASH_BYTES (1024 * 1024)
#endif

extern "C" uint32_t StackPeakBytes();          // startup.cc
extern "C" uint32_t FirmwareStaticRamBytes();  // .data + .bss, the arena included

namespace {

using namespace tessera;

// --- hardware ----------------------------------------------------------------
struct CmsdkUart {
  volatile uint32_t data, state, ctrl, intstatus, bauddiv;
};
// UART0, UART1, UART2 of the board: ports 0, 1, 2.
CmsdkUart* const kUarts[mcu::kMaxPorts] = {reinterpret_cast<CmsdkUart*>(0x40004000),
                                           reinterpret_cast<CmsdkUart*>(0x40005000),
                                           reinterpret_cast<CmsdkUart*>(0x40006000)};
constexpr uint32_t kUartTxFull = 1u, kUartRxFull = 2u;
constexpr uint32_t kUartTxEnable = 1u, kUartRxEnable = 2u, kUartRxIrqEnable = 8u;
constexpr uint32_t kUartRxIrq = 2u;  // intstatus bit; writing it clears the request
// NVIC lines of the UARTs' RX interrupts on mps2-an385/an386 (TX is the next one).
constexpr uint32_t kUartRxIrqLines[mcu::kMaxPorts] = {0, 2, 4};
volatile uint32_t* const kNvicIser0 = reinterpret_cast<volatile uint32_t*>(0xE000E100);
constexpr uint32_t kSysClockHz = 25000000;  // mps2 peripheral/system clock

struct SysTickRegs {
  volatile uint32_t csr, rvr, cvr, calib;
};
SysTickRegs* const kSysTick = reinterpret_cast<SysTickRegs*>(0xE000E010);

volatile uint32_t g_ms = 0;

void HardwareInit() {
  for (CmsdkUart* u : kUarts) {
    u->bauddiv = kSysClockHz / 115200;
    u->ctrl = kUartTxEnable | kUartRxEnable | kUartRxIrqEnable;
  }
  for (uint32_t line : kUartRxIrqLines) *kNvicIser0 = 1u << line;
  kSysTick->rvr = kSysClockHz / 1000 - 1;
  kSysTick->cvr = 0;
  kSysTick->csr = 7;  // enable, interrupt, processor clock
}

void PutByte(CmsdkUart* u, uint8_t b) {
  while (u->state & kUartTxFull) {
  }
  u->data = b;
}
void PutBytes(CmsdkUart* u, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i) PutByte(u, p[i]);
}

// --- state -------------------------------------------------------------------
alignas(8) uint8_t g_arena[TESSERA_MCU_ARENA_BYTES];  // activations (RAM)
// The program's flash region (mps2_an386.ld: .flash_store in FLASH, not
// loaded). On a board this is erased and programmed once per deploy; here
// it is written only by OnProgramChunk.
__attribute__((section(".flash_store"))) alignas(8) uint8_t g_flash[TESSERA_MCU_FLASH_BYTES];
uint8_t g_tx_scratch[wire::kMaxRawFrame];
uint8_t g_tx_frame[wire::kMaxEncodedFrame];

// Frames past a gap, slot = sequence % kRxSlots: the kRxSlots sequences after
// the expected one fall into distinct slots.
struct HeldFrame {
  bool valid;
  wire::FrameHeader header;
  uint8_t payload[wire::kMaxPayload];
};

// One UART's link state: a session and sequence numbers each way, the
// frames held past a gap, and what its DATA frames carried.
struct Port {
  wire::FrameDecoder decoder;
  HeldFrame held[mcu::kRxSlots];
  // receive side
  bool rx_known = false;
  uint32_t rx_session = 0, rx_expected = 0;
  // send side
  uint32_t tx_session = 0, tx_next = 0;
  bool tx_waiting = false;
  uint32_t tx_waiting_seq = 0;
  uint32_t payload_sent = 0, payload_received = 0;  // DATA payload bytes, each frame once
  wire::FrameHeader delivered{};                    // the last frame delivered: what a kFrameMore continues
};
Port g_ports[mcu::kMaxPorts];

struct Worker {
  // program
  mcu::ProgramView program;
  bool loaded = false;
  uint32_t plan_id = 0;
  uint32_t program_bytes = 0;  // received so far
  float* act = nullptr;
  mcu::ReadySet inputs_ready{};
  // the run in progress (phases): next layer to run, next output to send
  uint32_t next_layer = 0, next_output = 0;
  bool running = false;
  uint32_t run_ticks = 0, run_ms = 0;  // compute time of the run so far
  bool status_pending = false;
  uint32_t status_message = 0;
  // counters
  uint32_t state = mcu::kStateIdle, last_error = mcu::kErrNone;
  uint32_t runs = 0, last_run_ms = 0, bad_frames = 0, refused = 0, held = 0;
  uint32_t last_run_ticks = 0;
} g;
uint32_t g_layer_ticks[mcu::kMaxTimedLayers];      // per layer of the last complete run
uint32_t g_run_layer_ticks[mcu::kMaxTimedLayers];  // per layer of the run in progress

bool SeqBefore(uint32_t a, uint32_t b) { return static_cast<int32_t>(a - b) < 0; }

void SendFrame(uint32_t port, wire::FrameHeader h, const uint8_t* payload) {
  size_t n = wire::EncodeFrame(h, payload, g_tx_scratch, g_tx_frame);
  PutBytes(kUarts[port], g_tx_frame, n);
}

void SendAck(uint32_t port) {
  const Port& p = g_ports[port];
  uint8_t sack[wire::kMaxSackBytes];
  size_t sack_bytes = 0;
  for (const HeldFrame& s : p.held)
    if (s.valid) wire::SackSet(sack, &sack_bytes, s.header.sequence - p.rx_expected - 1);
  wire::FrameHeader h;
  h.type = wire::kFrameAck;
  h.length = static_cast<uint16_t>(sack_bytes);
  h.plan_id = g.plan_id;
  h.session = p.rx_session;
  h.sequence = p.rx_expected;
  SendFrame(port, h, sack);
}

void Fail(uint32_t error) {
  g.last_error = error;
  g.state = mcu::kStateError;
  g.loaded = false;
}

void OnProgramChunk(const wire::FrameHeader& h, const uint8_t* payload) {
  if (h.offset == 0) {  // a new program replaces the old one
    g.loaded = false;
    g.state = mcu::kStateIdle;
    g.last_error = mcu::kErrNone;
    g.program_bytes = 0;
    g.inputs_ready.Clear();
    g.running = false;
    g.next_layer = g.next_output = 0;
  }
  if (h.total > sizeof(g_flash)) {
    if (h.offset == 0) Fail(mcu::kErrProgramTooLarge);
    return;
  }
  if (h.offset != g.program_bytes) return;  // in-order link: cannot happen
  memcpy(g_flash + h.offset, payload, h.length);  // programming the flash region
  g.program_bytes += h.length;
  if (g.program_bytes != h.total) return;
  mcu::ProgramView view;
  uint32_t err = mcu::ValidateProgram(g_flash, h.total, sizeof(g_arena), &view);
  if (err != mcu::kErrNone) {
    Fail(err);
    return;
  }
  g.program = view;
  g.act = reinterpret_cast<float*>(g_arena);
  g.plan_id = view.header->plan_id;
  g.loaded = true;
  g.state = mcu::kStateLoaded;
}

void OnTensorChunk(uint32_t port, const wire::FrameHeader& h, const uint8_t* payload) {
  if (!g.loaded || h.plan_id != g.plan_id) {
    ++g.refused;
    g.last_error = mcu::kErrTensorRefused;
    return;
  }
  const mcu::ProgramHeader& ph = *g.program.header;
  for (uint32_t i = 0; i < ph.num_inputs; ++i) {
    const mcu::IoEntry& in = g.program.inputs[i];
    if (in.message != h.message) continue;
    if (h.total != mcu::IoBytes(in) || in.port != port) break;
    // Validated: in.offset + IoBytes(in) <= 4 * activation_words; decoder: offset + length <= total.
    memcpy(reinterpret_cast<uint8_t*>(g.act) + in.offset + h.offset, payload, h.length);
    g_ports[port].payload_received += h.length;
    if (h.offset + h.length == h.total) g.inputs_ready.Set(i);
    return;
  }
  ++g.refused;
  g.last_error = mcu::kErrTensorRefused;
}

// A reliable frame in sequence order (a kFrameMore header is completed in
// place). Programs and STATUS come only from
// the owning Linux board (port 0); another MCU only sends tensors.
void Deliver(uint32_t port, wire::FrameHeader& h, const uint8_t* payload) {
  wire::FrameHeader& last = g_ports[port].delivered;
  if (h.type == wire::kFrameMore && !wire::ContinueFrame(last, &h)) {
    ++g.refused;     // continues nothing: a confused peer (frame_codec.h kFrameMore)
    last.total = 0;  // nor may a later compact frame continue that message
    return;
  }
  last = h;
  switch (h.type) {
    case wire::kFrameProgram:
      if (port == 0)
        OnProgramChunk(h, payload);
      else
        ++g.refused;
      break;
    case wire::kFrameData:
      OnTensorChunk(port, h, payload);
      break;
    case wire::kFrameStatus:
      if (port != 0) {
        ++g.refused;
        break;
      }
      g.status_pending = true;
      g.status_message = h.message;
      break;
    default:
      break;
  }
}

void OnFrame(uint32_t port, wire::FrameHeader h, const uint8_t* payload) {
  Port& p = g_ports[port];
  if (h.type == wire::kFrameMore) h.sequence = wire::ExpandSequence(h.sequence, p.rx_expected);
  if (h.type == wire::kFrameAck) {
    if (p.tx_waiting && h.session == p.tx_session && SeqBefore(p.tx_waiting_seq, h.sequence)) p.tx_waiting = false;
    return;
  }
  if (!p.rx_known || h.session != p.rx_session) {
    if (h.sequence != 0) return;       // an old session of the peer
    const bool replaced = p.rx_known;  // the peer started over (rebooted): not its first frame on this link
    p.rx_known = true;
    p.rx_session = h.session;
    p.rx_expected = 0;
    for (HeldFrame& s : p.held) s.valid = false;
    // A new peer session: our sends start a new session too, or the peer's
    // fresh link would take them for a stale session. Not while our own
    // session has had nothing acknowledged (tx_next 0): its frame 0 opens
    // it on the peer's side as it is. Both ends of a fresh MCU<->MCU link
    // sending at once (FDTO slices crossing) each took the other's frame 0
    // for a new peer, dropped the session its own frame 0 was waiting in,
    // and then refused the peer's acknowledgement of it: 50 retries (12.5 s)
    // and a send counted as failed although it had arrived.
    // Nor on the peer's first frame on this link (its session replaces
    // none): the peer did not start over, our session is still the one it
    // knows. Resetting there (one MCU's slice acknowledged before the
    // other's first arrived) made the peer, at our next message, see a new
    // session and reset its own, under a frame still waiting for its
    // acknowledgement: the same 12.5 s and a direct link counted at half
    // its bytes (CI, FDTO on 2 MCUs, 2026-12-07).
    if (replaced && p.tx_next != 0) {
      p.tx_session = 0;
      p.tx_next = 0;
    }
  }
  const uint32_t ahead = h.sequence - p.rx_expected;
  if (SeqBefore(h.sequence, p.rx_expected) || ahead > mcu::kRxSlots) {
    SendAck(port);  // a duplicate, or too far ahead to keep: the peer sends it again
    return;
  }
  if (ahead > 0) {  // past a gap: keep it until the gap is filled
    HeldFrame& s = p.held[h.sequence % mcu::kRxSlots];
    if (!s.valid) {
      s.valid = true;
      s.header = h;
      memcpy(s.payload, payload, h.length);
      ++g.held;
    }
    SendAck(port);
    return;
  }
  Deliver(port, h, payload);
  ++p.rx_expected;
  for (;;) {  // the held frames the gap's filling made contiguous, in order
    HeldFrame& s = p.held[p.rx_expected % mcu::kRxSlots];
    if (!s.valid || s.header.sequence != p.rx_expected) break;
    s.valid = false;
    Deliver(port, s.header, s.payload);
    ++p.rx_expected;
  }
  SendAck(port);
}

// Idle stays awake this long after the last byte received (SysTick ticks:
// 250 us at 25 MHz).
constexpr uint32_t kLingerTicks = kSysClockHz / 4000;
uint32_t g_last_rx_tick = 0;
uint32_t Ticks();  // below SysTick_Handler

// Every byte waiting on every UART: a send on one port keeps the others
// served (an MCU in a chain acknowledges its predecessor while it waits for
// its successor's acknowledgement).
void Poll() {
  for (uint32_t port = 0; port < mcu::kMaxPorts; ++port) {
    CmsdkUart* u = kUarts[port];
    Port& p = g_ports[port];
    while (u->state & kUartRxFull) {
      uint8_t b = static_cast<uint8_t>(u->data);
      g_last_rx_tick = Ticks();
      switch (p.decoder.Feed(b)) {
        case wire::FrameDecoder::Event::kFrame:
          OnFrame(port, p.decoder.header(), p.decoder.payload());
          break;
        case wire::FrameDecoder::Event::kError:
          ++g.bad_frames;
          break;
        default:
          break;
      }
    }
  }
}

// Sleeps until the next interrupt (a byte on any UART, or the 1 ms SysTick)
// unless a byte is already waiting or one arrived in the last kLingerTicks.
// With interrupts masked between the check and the WFI, a byte arriving in
// between leaves its interrupt pending and the WFI returns at once. A board
// idles at a fraction of its busy power; under QEMU the vCPU thread stops
// spinning while it waits, which leaves the host's cores to the UART
// character backends that feed it (a spinning firmware on a loaded machine
// slowed the bytes reaching the MCUs below the line rate, and an upload
// timed out in CI). QEMU hands over one byte per read: while a frame streams
// in, the next byte follows within microseconds on an idle host and the
// core stays awake (sleeping per byte cost 60 % of a 115200-baud upload); on
// a loaded host it does not, and the core sleeps between bytes.
void Idle() {
  if (Ticks() - g_last_rx_tick < kLingerTicks) return;
  __asm volatile("cpsid i" ::: "memory");
  bool waiting = false;
  for (CmsdkUart* u : kUarts) waiting = waiting || (u->state & kUartRxFull) != 0;
  if (!waiting) __asm volatile("wfi" ::: "memory");
  __asm volatile("cpsie i" ::: "memory");
}

// A send session on `port` unless one is open (OnFrame closes it when the
// peer starts over).
void OpenTxSession(uint32_t port) {
  Port& p = g_ports[port];
  if (p.tx_session == 0) p.tx_session = (p.rx_session * 2654435761u) ^ kSysTick->cvr ^ (g_ms << 16) ^ (port << 8) ^ 1u;
}

// Sends one message reliably on `port` (stop-and-wait per frame); false
// when the peer stopped acknowledging. Keeps serving received frames
// (every port) meanwhile.
bool SendMessage(uint32_t port, uint8_t type, uint32_t message, const uint8_t* bytes, uint32_t total) {
  Port& p = g_ports[port];
  OpenTxSession(port);
  uint32_t offset = 0;
  do {
    uint32_t n = total - offset < wire::kMaxPayload ? total - offset : uint32_t(wire::kMaxPayload);
    wire::FrameHeader h;
    h.type = type;
    h.length = static_cast<uint16_t>(n);
    h.plan_id = g.plan_id;
    h.session = p.tx_session;
    h.sequence = p.tx_next;
    h.message = message;
    h.offset = offset;
    h.total = total;
    p.tx_waiting = true;
    p.tx_waiting_seq = h.sequence;
    int attempts = 0;
    while (p.tx_waiting) {
      if (++attempts > 50) return false;
      if (h.session != p.tx_session) {
        // The peer started over while this frame waited (OnFrame reset our
        // session): its fresh link drops the frame under the old session,
        // so it goes again as the first of a new one.
        OpenTxSession(port);
        h.session = p.tx_session;
        h.sequence = p.tx_waiting_seq = p.tx_next;
      }
      SendFrame(port, h, bytes + offset);
      uint32_t start = g_ms;
      while (p.tx_waiting && g_ms - start < 250) {
        Poll();
        if (p.tx_waiting) Idle();
      }
    }
    ++p.tx_next;
    if (type == wire::kFrameData) p.payload_sent += n;
    offset += n;
  } while (offset < total);
  return true;
}

void SendStatus() {
  mcu::McuStatus s{};
  s.magic = mcu::kStatusMagic;
  s.state = g.state;
  s.plan_id = g.loaded ? g.plan_id : 0;
  s.arena_bytes = sizeof(g_arena);
  s.free_bytes = sizeof(g_arena) - (g.loaded ? g.program.header->activation_words * 4u : 0);
  s.flash_bytes = sizeof(g_flash);
  s.flash_free_bytes = sizeof(g_flash) - (g.loaded ? g.program.bytes : 0);
  s.last_error = g.last_error;
  s.runs = g.runs;
  s.last_run_ms = g.last_run_ms;
  s.bad_frames = g.bad_frames;
  s.refused_frames = g.refused;
  s.held_frames = g.held;
  s.tick_hz = kSysClockHz;
  for (uint32_t k = 0; k < mcu::kMaxPorts; ++k) {
    s.port_payload_sent[k] = g_ports[k].payload_sent;
    s.port_payload_received[k] = g_ports[k].payload_received;
  }
  s.last_run_ticks = g.last_run_ticks;
  s.firmware_ram_bytes = FirmwareStaticRamBytes() - static_cast<uint32_t>(sizeof(g_arena));
  s.stack_peak_bytes = StackPeakBytes();
  const uint32_t layers = g.loaded && g.runs > 0 ? g.program.header->num_layers : 0;
  s.timed_layers = layers < mcu::kMaxTimedLayers ? layers : mcu::kMaxTimedLayers;
  // The reply: the struct, then the per-layer ticks of the last run.
  static uint8_t reply[sizeof(mcu::McuStatus) + 4 * mcu::kMaxTimedLayers];
  memcpy(reply, &s, sizeof s);
  memcpy(reply + sizeof s, g_layer_ticks, 4 * s.timed_layers);
  SendMessage(0, wire::kFrameStatus, g.status_message, reply, sizeof s + 4 * s.timed_layers);
}

// Advances the run in progress as far as the inputs that have arrived
// allow (mcu_program.h phases): sends the outputs due before the next layer,
// runs every layer whose phase's inputs are complete, and ends the run after
// the last output. A run starts when the first phase's inputs are complete.
void Advance() {
  const mcu::ProgramHeader& ph = *g.program.header;
  if (ph.num_inputs == 0) return;  // an idle device's program: nothing to run
  if (!g.running) {
    if (!mcu::InputsReadyFor(g.program, g.inputs_ready, 0)) return;
    g.running = true;
    g.next_layer = g.next_output = 0;
    g.run_ticks = g.run_ms = 0;
    for (uint32_t& t : g_run_layer_ticks) t = 0;
  }
  for (;;) {
    while (g.next_output < ph.num_outputs && g.program.outputs[g.next_output].layer <= g.next_layer) {
      const mcu::IoEntry& out = g.program.outputs[g.next_output++];
      SendMessage(out.port, wire::kFrameData, out.message, reinterpret_cast<const uint8_t*>(g.act) + out.offset,
                  uint32_t(mcu::IoBytes(out)));
    }
    if (g.next_layer >= ph.num_layers && g.next_output >= ph.num_outputs) break;
    // The layers whose inputs are all here, as one timed stretch.
    uint32_t end = g.next_layer;
    while (end < ph.num_layers && mcu::InputsReadyFor(g.program, g.inputs_ready, end) &&
           (g.next_output >= ph.num_outputs || g.program.outputs[g.next_output].layer > end))
      ++end;
    if (end == g.next_layer) return;  // waiting for the next phase's inputs
    const uint32_t start_ms = g_ms, start = Ticks();
    mcu::RunLayers(g.program, g.act, g.next_layer, end, Ticks, g_run_layer_ticks, mcu::kMaxTimedLayers);
    g.run_ticks += Ticks() - start;
    g.run_ms += g_ms - start_ms;
    g.next_layer = end;
    // Every input has been read once the last layer ran: the next request's
    // may arrive while the last outputs are being sent.
    if (g.next_layer >= ph.num_layers) g.inputs_ready.Clear();
  }
  g.running = false;
  if (ph.num_layers == 0) g.inputs_ready.Clear();
  g.last_run_ticks = g.run_ticks;
  g.last_run_ms = g.run_ms;
  memcpy(g_layer_ticks, g_run_layer_ticks, sizeof g_layer_ticks);
  ++g.runs;
}

}  // namespace

extern "C" void SysTick_Handler() { g_ms = g_ms + 1; }

// A byte arrived on some UART: only wakes the core from Idle's WFI; the
// main loop reads the bytes (Poll).
extern "C" void UartRx_Handler() {
  for (CmsdkUart* u : kUarts) u->intstatus = kUartRxIrq;
}

namespace {
// SysTick ticks since boot (kSysClockHz; wraps after ~171 s): whole
// milliseconds from the interrupt count plus the down-counter's progress.
// The counter may have reloaded while its interrupt is still pending (not
// yet counted in g_ms): then ICSR.PENDSTSET is set and the millisecond is
// added here. Read again when the counter reloaded or the interrupt ran in
// between (a reading 1 ms early once made a layer's ticks exceed its run's).
volatile uint32_t* const kIcsr = reinterpret_cast<volatile uint32_t*>(0xE000ED04);
constexpr uint32_t kPendStSet = 1u << 26;
uint32_t Ticks() {
  for (;;) {
    const uint32_t ms = g_ms, cvr = kSysTick->cvr;
    const bool pending = (*kIcsr & kPendStSet) != 0;
    const uint32_t cvr_again = kSysTick->cvr;
    if (ms != g_ms || cvr_again > cvr) continue;
    return (ms + (pending ? 1u : 0u)) * (kSysTick->rvr + 1) + (kSysTick->rvr - cvr);
  }
}
}  // namespace

int main() {
  HardwareInit();
  for (CmsdkUart* u : kUarts) PutByte(u, 0);  // a lone delimiter: ends any partial frame a peer holds
  for (;;) {
    Poll();
    if (g.status_pending) {
      g.status_pending = false;
      SendStatus();
    }
    if (g.loaded) Advance();
    if (!g.status_pending) Idle();
  }
}
