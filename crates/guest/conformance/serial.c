/*
 * exitlab conformance kernel. The 16550A on COM1: status and scratch registers, and a byte-exact pattern.
 */
#include "conformance.h"

int test_serial(void)
{
    uint8_t lsr = inb(COM1 + UART_LSR);
    CHECK((lsr & (UART_LSR_THRE | UART_LSR_TEMT)) == (UART_LSR_THRE | UART_LSR_TEMT),
          "LSR is %#x: THRE and TEMT should be set", lsr);
    outb(COM1 + UART_SCR, 0xA5);
    uint8_t scr = inb(COM1 + UART_SCR);
    outb(COM1 + UART_SCR, 0x5A);
    uint8_t scr2 = inb(COM1 + UART_SCR);
    CHECK(scr == 0xA5 && scr2 == 0x5A, "the scratch register read %#x, %#x after 0xa5, 0x5a", scr,
          scr2);
    print("SERIAL-PATTERN-BEGIN\n");
    for (int c = 0x20; c < 0x7F; c++)
        serial_putc((char)c);
    print("\r\n");
    for (int c = 0x7E; c >= 0x20; c--)
        serial_putc((char)c);
    print("\r\n\r\n\n\r\nSERIAL-PATTERN-END\n");
    return 1;
}

