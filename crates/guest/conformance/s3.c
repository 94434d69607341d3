/*
 * exitlab conformance kernel. ACPI S3: arms the RTC alarm two seconds ahead, puts a
 * real-mode stub (s3_wake.S) at the FACS firmware waking vector and writes
 * SLP_TYP=S3 | SLP_EN to PM1a_CNT. The machine sleeps; when the alarm fires it resumes
 * at the waking vector in real mode, where the stub prints and ends the run. Reaching
 * the code after the write is a failure.
 */
#include "conformance.h"

#define S3_WAKE_ADDR     0x7000u
#define FADT_PM1A_CNT    64
#define FACS_WAKING_VEC  12
#define SLP_TYP_S3       (1u << 10)
#define SLP_EN           (1u << 13)
#define RTC_SECONDS      0x00
#define RTC_ALARM_SEC    0x01
#define RTC_ALARM_MIN    0x03
#define RTC_ALARM_HOUR   0x05
#define RTC_REG_B        0x0B
#define RTC_REG_C        0x0C
#define RTC_AIE          0x20
#define RTC_BINARY       0x04

extern char s3_wake_start[], s3_wake_end[];

static uint8_t cmos_read(uint8_t reg)
{
    outb(0x70, reg);
    return inb(0x71);
}

static void cmos_write(uint8_t reg, uint8_t v)
{
    outb(0x70, reg);
    outb(0x71, v);
}

int test_s3(void)
{
    struct acpi a;
    if (!acpi_load(&a))
        return 0;
    uint32_t pm1a_cnt = rd32(a.fadt + FADT_PM1A_CNT);
    CHECK(pm1a_cnt && pm1a_cnt < 0x10000, "the FADT's PM1a_CNT_BLK is %#x", pm1a_cnt);
    CHECK(a.facs, "no FACS");
    uint32_t len = (uint32_t)(s3_wake_end - s3_wake_start);
    memcpy((void *)S3_WAKE_ADDR, s3_wake_start, len);
    wr32(a.facs + FACS_WAKING_VEC, S3_WAKE_ADDR);

    uint8_t b = cmos_read(RTC_REG_B);
    uint8_t s = cmos_read(RTC_SECONDS);
    uint32_t sec = b & RTC_BINARY ? s : (uint32_t)(s >> 4) * 10 + (s & 0xF);
    uint32_t when = (sec + 2) % 60;
    cmos_write(RTC_ALARM_SEC, b & RTC_BINARY ? (uint8_t)when : (uint8_t)(((when / 10) << 4) | (when % 10)));
    cmos_write(RTC_ALARM_MIN, 0xC0);
    cmos_write(RTC_ALARM_HOUR, 0xC0);
    (void)cmos_read(RTC_REG_C);
    cmos_write(RTC_REG_B, b | RTC_AIE);
    print("# s3: suspending at second %u with the RTC alarm at second %u, waking vector %#x, "
          "PM1a_CNT %#x\n", sec, when, S3_WAKE_ADDR, pm1a_cnt);
    outw((uint16_t)pm1a_cnt, SLP_TYP_S3 | SLP_EN);
    delay_us(100000);
    fail_line("still running after entering S3 through PM1a_CNT");
    return 0;
}

/* ACPI S5: SLP_TYP=0 | SLP_EN powers the machine off, which ends the run. */
int test_s5(void)
{
    struct acpi a;
    if (!acpi_load(&a))
        return 0;
    uint32_t pm1a_cnt = rd32(a.fadt + FADT_PM1A_CNT);
    print("# s5: powering off through PM1a_CNT %#x\n", pm1a_cnt);
    outw((uint16_t)pm1a_cnt, SLP_EN);
    delay_us(100000);
    fail_line("still running after entering S5 through PM1a_CNT");
    return 0;
}
