/*
 * exitlab conformance kernel. fw_cfg: signature, interface id, RAM size, CPU counts and the file directory.
 */
#include "conformance.h"

int test_fwcfg(void)
{
    char sig[5] = {0};
    fw_cfg_select(FW_CFG_SIGNATURE);
    for (int i = 0; i < 4; i++)
        sig[i] = (char)inb(FW_CFG_DATA);
    CHECK(streq(sig, "QEMU"), "signature is \"%s\" (%02x %02x %02x %02x), expected \"QEMU\"", sig,
          (uint8_t)sig[0], (uint8_t)sig[1], (uint8_t)sig[2], (uint8_t)sig[3]);
    uint32_t id = (uint32_t)fw_cfg_item(FW_CFG_ID, 4);
    CHECK(id & 1, "interface id %#x lacks bit 0 (traditional interface)", id);
    uint32_t cpus = (uint32_t)fw_cfg_item(FW_CFG_NB_CPUS, 2);
    uint32_t max = (uint32_t)fw_cfg_item(FW_CFG_MAX_CPUS, 2);
    uint64_t ram = fw_cfg_item(FW_CFG_RAM_SIZE, 8);
    uint64_t unused = fw_cfg_item(FW_CFG_UNUSED_KEY, 8);
    fw_cfg_select(FW_CFG_FILE_DIR);
    uint32_t files = 0;
    for (int i = 0; i < 4; i++)
        files = (files << 8) | inb(FW_CFG_DATA);
    print("# fw_cfg: id %#x, %u CPUs (max %u), RAM %llu bytes, %u files\n", id, cpus, max, ram,
          files);
    CHECK(files < 4096, "the file directory claims %u files", files);
    for (uint32_t f = 0; f < files && f < 8; f++) {
        uint32_t size = 0, key = 0;
        char fname[57];
        for (int i = 0; i < 4; i++)
            size = (size << 8) | inb(FW_CFG_DATA);
        for (int i = 0; i < 2; i++)
            key = (key << 8) | inb(FW_CFG_DATA);
        inb(FW_CFG_DATA);
        inb(FW_CFG_DATA);
        for (int i = 0; i < 56; i++)
            fname[i] = (char)inb(FW_CFG_DATA);
        fname[56] = 0;
        print("# fw_cfg file %#x \"%s\", %u bytes\n", key, fname, size);
    }
    CHECK(unused == 0, "unknown key %#x reads %#llx, expected zeros", FW_CFG_UNUSED_KEY, unused);
    CHECK(max >= cpus, "max CPUs %u is below the CPU count %u", max, cpus);
    if (args.has_cpus)
        CHECK(cpus == args.cpus, "CPU count is %u; cpus=%u on the command line", cpus, args.cpus);
    if (args.has_ram)
        CHECK(ram == args.ram_mib << 20, "RAM size is %llu bytes; ram=%llu MiB is %llu bytes",
              ram, args.ram_mib, args.ram_mib << 20);
    struct acpi a;
    if (!acpi_load(&a))
        return 0;
    CHECK(cpus == a.ncpus, "fw_cfg says %u CPUs, the MADT lists %u", cpus, a.ncpus);
    return 1;
}

