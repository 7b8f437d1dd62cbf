// Cortex-M4 start-up for the tessera MCU worker: vector table, .data copy,
// .bss zeroing, FPU enable, static constructors, then main(). No heap.
#include <stdint.h>

extern "C" {
extern uint32_t __data_start, __data_end, __data_load, __bss_start, __bss_end, __stack_top;
extern void (*__init_array_start[])();
extern void (*__init_array_end[])();
int main();
void SysTick_Handler();
void UartRx_Handler();
[[noreturn]] void Reset_Handler();
[[noreturn]] void Default_Handler();
}

extern "C" [[noreturn]] void Default_Handler() {
  for (;;) {
  }
}

// The stack is painted with kStackPaint at reset (at most kStackPaintBytes
// below its top, never into .bss); StackPeakBytes counts from below how much
// of it is still untouched.
namespace {
constexpr uint32_t kStackPaint = 0x5AC3A55Au;
constexpr uint32_t kStackPaintBytes = 64 * 1024;
uintptr_t Address(const void* p) { return reinterpret_cast<uintptr_t>(p); }
uint32_t* StackPaintStart() {
  const uintptr_t lowest = Address(&__stack_top) - kStackPaintBytes;
  return reinterpret_cast<uint32_t*>(lowest > Address(&__bss_end) ? lowest : Address(&__bss_end));
}
}  // namespace

extern "C" uint32_t StackPeakBytes() {
  const uint32_t* p = StackPaintStart();
  while (Address(p) < Address(&__stack_top) && *p == kStackPaint) ++p;
  return static_cast<uint32_t>(Address(&__stack_top) - Address(p));
}

extern "C" uint32_t FirmwareStaticRamBytes() {
  return static_cast<uint32_t>(Address(&__bss_end) - Address(&__data_start));
}

extern "C" [[noreturn]] void Reset_Handler() {
  for (uint32_t *src = &__data_load, *dst = &__data_start; dst < &__data_end;) *dst++ = *src++;
  for (uint32_t* dst = &__bss_start; dst < &__bss_end;) *dst++ = 0;
  {
    // Up to a little below the live stack (this function's frame).
    uint32_t here;
    for (uint32_t* p = StackPaintStart(); Address(p + 16) < Address(&here); ++p) *p = kStackPaint;
  }
  // CPACR: full access to CP10/CP11 (the FPU) before any float instruction.
  *reinterpret_cast<volatile uint32_t*>(0xE000ED88) |= 0xFu << 20;
  __asm volatile("dsb\n isb" ::: "memory");
  for (auto* f = __init_array_start; f < __init_array_end; ++f) (*f)();
  main();
  Default_Handler();
}

using Handler = void (*)();
// 16 system exceptions, then the external interrupts up to UART2's TX (line
// 5): lines 0, 2 and 4 are the RX interrupts of UART0..2 (main.cc Idle).
__attribute__((section(".vectors"), used)) const Handler kVectors[16 + 6] = {
    reinterpret_cast<Handler>(&__stack_top),
    Reset_Handler,
    Default_Handler,  // NMI
    Default_Handler,  // HardFault
    Default_Handler,  // MemManage
    Default_Handler,  // BusFault
    Default_Handler,  // UsageFault
    nullptr,
    nullptr,
    nullptr,
    nullptr,
    Default_Handler,  // SVCall
    Default_Handler,  // DebugMon
    nullptr,
    Default_Handler,  // PendSV
    SysTick_Handler,
    UartRx_Handler,   // IRQ 0: UART0 RX
    Default_Handler,  // IRQ 1: UART0 TX (not enabled)
    UartRx_Handler,   // IRQ 2: UART1 RX
    Default_Handler,  // IRQ 3: UART1 TX
    UartRx_Handler,   // IRQ 4: UART2 RX
    Default_Handler,  // IRQ 5: UART2 TX
};
