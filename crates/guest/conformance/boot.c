/*
 * exitlab conformance kernel. Boot information: the multiboot information structure, PVH's hvm_start_info,
 * the memory maps they carry against the documented layout, modules, and the command line.
 */
#include "conformance.h"

/* The memory map exitlab documents, and where boot structures may be. */

struct range {
    uint64_t addr, len;
    uint32_t type;
};

#define MAX_RANGES 8

static uint32_t expected_map(uint64_t ram, struct range *out)
{
    uint32_t n = 0;
    uint64_t eff = ram & ~0xFFFULL;
    uint64_t low = eff < PCI_HOLE_START ? eff : PCI_HOLE_START;
    uint64_t conv = low < EBDA_START ? low : EBDA_START;
    out[n++] = (struct range){0, conv, 1};
    out[n++] = (struct range){EBDA_START, VGA_START - EBDA_START, 2};
    out[n++] = (struct range){BIOS_START, HIGH_MEMORY - BIOS_START, 2};
    if (low > HIGH_MEMORY)
        out[n++] = (struct range){HIGH_MEMORY, low - HIGH_MEMORY, 1};
    if (eff > PCI_HOLE_START)
        out[n++] = (struct range){FOUR_GIB, eff - PCI_HOLE_START, 1};
    return n;
}

const char *type_name(uint32_t type)
{
    switch (type) {
    case 1: return "ram";
    case 2: return "reserved";
    case 3: return "acpi";
    case 4: return "nvs";
    default: return "other";
    }
}

/* Compares entry i of a boot memory map with the documented layout. */
static int check_map_entry(uint32_t i, uint32_t n_expected, const struct range *exp,
                           uint64_t addr, uint64_t len, uint32_t type)
{
    print("# map %u: %010llx..%010llx %s\n", i, addr, addr + len, type_name(type));
    CHECK(i < n_expected, "memory map entry %u (%#llx..%#llx type %u) is extra: expected %u entries",
          i, addr, addr + len, type, n_expected);
    CHECK(addr == exp[i].addr && len == exp[i].len && type == exp[i].type,
          "memory map entry %u is %#llx..%#llx type %u; expected %#llx..%#llx type %u", i, addr,
          addr + len, type, exp[i].addr, exp[i].addr + exp[i].len, exp[i].type);
    return 1;
}

struct region {
    const char *what;
    uint64_t start, end;
};

static int overlaps(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1)
{
    return a0 < b1 && b0 < a1;
}

/* Each region: outside page 0 and the kernel image, in RAM, apart from the others. */
static int check_regions(const struct region *r, uint32_t n, const struct range *map,
                         uint32_t map_n)
{
    uint64_t img0 = (uint32_t)__image_start, img1 = (uint32_t)__bss_end;
    for (uint32_t i = 0; i < n; i++) {
        print("# %s at %08llx..%08llx\n", r[i].what, r[i].start, r[i].end);
        CHECK(r[i].start >= 0x1000, "%s at %#llx..%#llx is in page 0", r[i].what, r[i].start,
              r[i].end);
        CHECK(!overlaps(r[i].start, r[i].end, img0, img1),
              "%s at %#llx..%#llx overlaps the kernel image %#llx..%#llx", r[i].what,
              r[i].start, r[i].end, img0, img1);
        int in_ram = 0;
        for (uint32_t m = 0; m < map_n; m++)
            if (map[m].type == 1 && r[i].start >= map[m].addr &&
                r[i].end <= map[m].addr + map[m].len)
                in_ram = 1;
        CHECK(in_ram, "%s at %#llx..%#llx is not inside one RAM range of the memory map",
              r[i].what, r[i].start, r[i].end);
        for (uint32_t j = 0; j < i; j++)
            CHECK(!overlaps(r[i].start, r[i].end, r[j].start, r[j].end),
                  "%s at %#llx..%#llx overlaps %s at %#llx..%#llx", r[i].what, r[i].start,
                  r[i].end, r[j].what, r[j].start, r[j].end);
    }
    return 1;
}

/* Checks the initrd module's length and checksum against initrd_len=/initrd_sum=. */
static int check_module(uint64_t start, uint64_t len)
{
    CHECK(start + len <= PCI_HOLE_START, "module 0 at %#llx..%#llx is above the 32-bit range",
          start, start + len);
    uint32_t sum = fnv1a((uint32_t)start, (uint32_t)len);
    print("# module 0 at %08llx, %llu bytes, fnv1a %08x\n", start, len, sum);
    CHECK(len == args.initrd_len, "module 0 has %llu bytes; expected %u", len, args.initrd_len);
    CHECK(sum == args.initrd_sum, "module 0 has checksum %#x; expected %#x", sum,
          args.initrd_sum);
    return 1;
}

int test_mbinfo(void)
{
    uint32_t mbi = boot_info;
    CHECK(boot_magic == MULTIBOOT_BOOT_MAGIC, "EAX at entry was %#x, expected %#x", boot_magic,
          MULTIBOOT_BOOT_MAGIC);
    CHECK(mbi >= 0x1000 && mbi < PCI_HOLE_START, "EBX (the info address) is %#x", mbi);
    uint32_t flags = rd32(mbi + MBI_FLAGS);
    uint32_t need = MBI_F_MEM | MBI_F_CMDLINE | MBI_F_MMAP | MBI_F_LOADER;
    if (args.has_initrd)
        need |= MBI_F_MODS;
    print("# multiboot info at %x, flags %#x\n", mbi, flags);
    CHECK((flags & need) == need, "info flags %#x lack %#x", flags, need & ~flags);

    struct range exp[MAX_RANGES];
    uint64_t ram = expected_ram();
    uint32_t n = expected_map(ram, exp);
    uint32_t mmap = rd32(mbi + MBI_MMAP_ADDR), mmap_len = rd32(mbi + MBI_MMAP_LENGTH);
    uint32_t i = 0;
    for (uint32_t off = 0; off < mmap_len; i++) {
        uint32_t e = mmap + off;
        uint32_t size = rd32(e);
        CHECK(size >= 20 && off + size + 4 <= mmap_len,
              "memory map entry %u has size %u (map length %u)", i, size, mmap_len);
        if (!check_map_entry(i, n, exp, rd64(e + 4), rd64(e + 12), rd32(e + 20)))
            return 0;
        off += size + 4;
    }
    CHECK(i == n, "the memory map has %u entries; expected %u for %llu MiB", i, n, ram >> 20);

    uint32_t lower = rd32(mbi + MBI_MEM_LOWER), upper = rd32(mbi + MBI_MEM_UPPER);
    print("# mem_lower %u KiB, mem_upper %u KiB\n", lower, upper);
    CHECK((uint64_t)lower * 1024 == exp[0].len,
          "mem_lower is %u KiB but the memory map's RAM at 0 ends at %#llx", lower, exp[0].len);
    uint64_t above = n > 3 ? exp[3].len : 0;
    CHECK((uint64_t)upper * 1024 == above,
          "mem_upper is %u KiB but the memory map has %llu KiB of RAM from 1 MiB", upper,
          above / 1024);

    uint32_t cmd = rd32(mbi + MBI_CMDLINE);
    uint32_t name = rd32(mbi + MBI_LOADER_NAME);
    CHECK(streq((const char *)name, BOOT_LOADER_NAME), "boot_loader_name is \"%s\", expected \"%s\"",
          (const char *)name, BOOT_LOADER_NAME);

    struct region r[8];
    uint32_t nr = 0;
    r[nr++] = (struct region){"the multiboot info", mbi, mbi + MBI_SIZE};
    r[nr++] = (struct region){"the memory map", mmap, (uint64_t)mmap + mmap_len};
    r[nr++] = (struct region){"the command line", cmd, cmd + strlen((const char *)cmd) + 1};
    r[nr++] = (struct region){"the boot loader name", name, name + sizeof(BOOT_LOADER_NAME)};

    uint32_t mods = (flags & MBI_F_MODS) ? rd32(mbi + MBI_MODS_COUNT) : 0;
    if (args.has_initrd) {
        CHECK(mods == 1, "mods_count is %u, expected 1 (the initrd)", mods);
        uint32_t list = rd32(mbi + MBI_MODS_ADDR);
        uint32_t start = rd32(list), end = rd32(list + 4), str = rd32(list + 8);
        CHECK(end >= start, "module 0 ends at %#x before its start %#x", end, start);
        CHECK(!(start & 0xFFF), "module 0 at %#x is not page-aligned (header flag 0)", start);
        r[nr++] = (struct region){"the module list", list, list + 16};
        if (str) {
            print("# module 0 string \"%s\"\n", (const char *)str);
            r[nr++] = (struct region){"module 0's string", str,
                                      str + strlen((const char *)str) + 1};
        }
        r[nr++] = (struct region){"module 0", start, end};
        if (!check_module(start, end - start))
            return 0;
    } else {
        CHECK(mods == 0, "mods_count is %u without an initrd", mods);
    }
    return check_regions(r, nr, exp, n);
}

int test_pvhinfo(void)
{
    uint32_t si = boot_info;
    CHECK(si >= 0x1000 && si < PCI_HOLE_START, "EBX (the start info address) is %#x", si);
    CHECK(rd32(si + SI_MAGIC) == PVH_MAGIC, "start info magic is %#x, expected %#x",
          rd32(si + SI_MAGIC), PVH_MAGIC);
    uint32_t version = rd32(si + SI_VERSION);
    print("# hvm_start_info at %x, version %u, flags %#x\n", si, version, rd32(si + SI_FLAGS));
    CHECK(version >= 1, "start info version is %u; the memory map needs version 1", version);

    uint64_t cmd = rd64(si + SI_CMDLINE);
    uint64_t memmap = rd64(si + SI_MEMMAP);
    uint64_t modlist = rd64(si + SI_MODLIST);
    uint64_t rsdp = rd64(si + SI_RSDP);
    uint32_t entries = rd32(si + SI_MEMMAP_ENTRIES);
    uint32_t mods = rd32(si + SI_NR_MODULES);
    CHECK(cmd && cmd < PCI_HOLE_START, "cmdline_paddr is %#llx", cmd);
    CHECK(memmap && memmap < PCI_HOLE_START, "memmap_paddr is %#llx", memmap);

    struct range exp[MAX_RANGES];
    uint64_t ram = expected_ram();
    uint32_t n = expected_map(ram, exp);
    CHECK(entries == n, "memmap_entries is %u; expected %u for %llu MiB", entries, n, ram >> 20);
    for (uint32_t i = 0; i < entries; i++) {
        uint32_t e = (uint32_t)memmap + 24 * i;
        CHECK(rd32(e + 20) == 0, "memory map entry %u has a non-zero reserved field", i);
        if (!check_map_entry(i, n, exp, rd64(e), rd64(e + 8), rd32(e + 16)))
            return 0;
    }

    CHECK(rsdp != 0, "rsdp_paddr is 0");
    CHECK(rsdp < HIGH_MEMORY, "rsdp_paddr %#llx is outside the BIOS area", rsdp);
    if (!check_rsdp((uint32_t)rsdp))
        return 0;
    uint32_t scanned = scan_rsdp();
    CHECK(scanned == rsdp, "rsdp_paddr is %#llx but the BIOS-area scan finds the RSDP at %#x",
          rsdp, scanned);

    struct region r[6];
    uint32_t nr = 0;
    r[nr++] = (struct region){"the start info", si, si + SI_SIZE};
    r[nr++] = (struct region){"the memory map", memmap, memmap + 24ULL * entries};
    r[nr++] = (struct region){"the command line", cmd,
                              cmd + strlen((const char *)(uint32_t)cmd) + 1};
    if (args.has_initrd) {
        CHECK(mods == 1, "nr_modules is %u, expected 1 (the initrd)", mods);
        CHECK(modlist && modlist < PCI_HOLE_START, "modlist_paddr is %#llx", modlist);
        uint64_t start = rd64((uint32_t)modlist), size = rd64((uint32_t)modlist + 8);
        r[nr++] = (struct region){"the module list", modlist, modlist + 32};
        r[nr++] = (struct region){"module 0", start, start + size};
        if (!check_module(start, size))
            return 0;
    } else {
        CHECK(mods == 0, "nr_modules is %u without an initrd", mods);
    }
    return check_regions(r, nr, exp, n);
}

int test_cmdline(void)
{
    if (boot_kind == BOOT_MULTIBOOT) {
        CHECK(rd32(boot_info + MBI_FLAGS) & MBI_F_CMDLINE, "the multiboot info has no command line");
        CHECK(argv0_len > 0, "the command line \"%s\" does not start with the kernel's path",
              cmdline_full);
        print("CMDLINE-ARGV0 %.*s\n", (int)argv0_len, argv0);
    }
    print("CMDLINE-REST %s\n", cmdline_rest);
    return 1;
}

