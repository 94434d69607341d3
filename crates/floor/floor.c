/*
 * exitlab-floor: the floor a VMM's userspace exit handling is measured against.
 *
 * A bare KVM_RUN loop, written against the kernel's own <linux/kvm.h> and nothing of
 * exitlab's VMM: it creates a VM with one vCPU, loads a multiboot v1 ELF32 kernel (the
 * harness in crates/guest/harness, or any kernel that keeps to 32-bit protected mode
 * with flat segments and talks only through ports), enters it as a multiboot loader
 * does, and then does nothing per exit but switch on the exit reason and on the port:
 * no seccomp, no signal handling, no device bus, no allocation, no timing.
 *
 * Usage: exitlab-floor [--serial] [--irqchip] [--cpuid] [--seccomp] KERNEL [CMDLINE]
 *   --serial   copy what the guest writes to COM1 (0x3F8) to standard output
 *   --irqchip  create the in-kernel interrupt controllers (KVM_CREATE_IRQCHIP), as a PC
 *              platform does; off by default: the floor has no device at all
 *   --cpuid    give the vCPU every CPUID leaf KVM supports (KVM_SET_CPUID2), as a VMM
 *              does; off by default: KVM's own defaults
 *   --seccomp  before the first KVM_RUN, attach a seccomp filter of one rule, "allow",
 *              to the process: no filter can cost less, so this is what the kernel
 *              charges every system call of a filtered thread on this host
 * The first two options change the kernel's work around each exit, and the third its
 * system-call entry, not the loop; they let a comparison tell the platform's share and
 * any filter's share from the VMM's own (docs/exit-path.md).
 *
 * Ports: writes to 0x3F8..0x3FF are the serial port (dropped, or copied with --serial;
 * reads of its line status say "transmitter empty"); a write to 0xF4 (isa-debug-exit)
 * ends the run; every other port is unclaimed: reads return all ones, writes are
 * dropped, and each access is counted.
 *
 * At the end it prints one line on standard error:
 *   exitlab-floor: in=<N> out=<N> serial=<N> debug-exit=<value> seccomp=<mode>
 * where in/out count the exits to unclaimed ports and mode is what the kernel says of
 * the process (PR_GET_SECCOMP: 0 none, 2 a filter). Exit status: 0 when the guest ended
 * through the debug-exit port, 2 for a bad command line or kernel, 3 when KVM failed or
 * the guest stopped any other way.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/kvm.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <unistd.h>

#define RAM_BYTES (32u << 20)
#define GDT_GPA 0x6000u
#define MBI_GPA 0x7000u
#define CMDLINE_GPA 0x7100u
#define CMDLINE_MAX 0xE00u
#define COM1 0x3F8
#define DEBUG_EXIT 0xF4

static int fail(const char *what)
{
    fprintf(stderr, "exitlab-floor: %s: %s\n", what, strerror(errno));
    return 3;
}

static int bad(const char *what)
{
    fprintf(stderr, "exitlab-floor: %s\n", what);
    return 2;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint16_t le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

/* Loads the PT_LOAD segments of an ELF32 image into ram; returns the entry or 0. */
static uint32_t load_elf32(const uint8_t *img, size_t len, uint8_t *ram)
{
    if (len < 52 || memcmp(img, "\177ELF", 4) != 0 || img[4] != 1 || img[5] != 1)
        return 0;
    uint32_t entry = le32(img + 24), phoff = le32(img + 28);
    uint16_t phentsize = le16(img + 42), phnum = le16(img + 44);
    if (phentsize < 32 || phoff > len || (size_t)phnum * phentsize > len - phoff)
        return 0;
    int loaded = 0;
    for (uint16_t i = 0; i < phnum; i++) {
        const uint8_t *ph = img + phoff + (size_t)i * phentsize;
        if (le32(ph) != 1 /* PT_LOAD */)
            continue;
        uint32_t off = le32(ph + 4), paddr = le32(ph + 12);
        uint32_t filesz = le32(ph + 16), memsz = le32(ph + 20);
        if (filesz > memsz || off > len || filesz > len - off || paddr < 0x100000 ||
            paddr > RAM_BYTES || memsz > RAM_BYTES - paddr)
            return 0;
        memcpy(ram + paddr, img + off, filesz);
        memset(ram + paddr + filesz, 0, memsz - filesz);
        loaded = 1;
    }
    return loaded ? entry : 0;
}

static void flat(struct kvm_segment *s, uint16_t sel, uint8_t type)
{
    memset(s, 0, sizeof *s);
    s->base = 0;
    s->limit = 0xFFFFFFFF;
    s->selector = sel;
    s->type = type;
    s->present = 1;
    s->dpl = 0;
    s->db = 1;
    s->s = 1;
    s->g = 1;
}

/*
 * The loop itself, in a function of its own, aligned to a cache line: its cost must not
 * depend on where the code around it puts it. On this project's hosts every cache line
 * and page touched after an exit costs tens of cycles (the build compiles the switches
 * without jump tables for that reason; docs/exit-path.md).
 */
__attribute__((noinline, aligned(64))) static int run_loop(int vcpu, struct kvm_run *run, int echo)
{
    unsigned long ins = 0, outs = 0, serial = 0;
    for (;;) {
        if (ioctl(vcpu, KVM_RUN, 0) < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return fail("KVM_RUN");
        }
        switch (run->exit_reason) {
        case KVM_EXIT_IO: {
            uint8_t *data = (uint8_t *)run + run->io.data_offset;
            size_t bytes = (size_t)run->io.size * run->io.count;
            if (run->io.direction == KVM_EXIT_IO_OUT) {
                switch (run->io.port) {
                case COM1:
                    serial++;
                    if (echo)
                        fwrite(data, 1, bytes, stdout);
                    break;
                case COM1 + 1 ... COM1 + 7:
                    break;
                case DEBUG_EXIT: {
                    uint32_t v = 0;
                    memcpy(&v, data, bytes < 4 ? bytes : 4);
                    fflush(stdout);
                    int mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
                    fprintf(stderr,
                            "exitlab-floor: in=%lu out=%lu serial=%lu debug-exit=%u seccomp=%d\n",
                            ins, outs, serial, v, mode);
                    return 0;
                }
                default:
                    outs++;
                    break;
                }
            } else {
                switch (run->io.port) {
                case COM1 + 5: /* line status: transmitter empty */
                    memset(data, 0x60, bytes);
                    break;
                case COM1 ... COM1 + 4:
                case COM1 + 6 ... COM1 + 7:
                    memset(data, 0, bytes);
                    break;
                default:
                    ins++;
                    memset(data, 0xFF, bytes);
                    break;
                }
            }
            break;
        }
        case KVM_EXIT_MMIO:
            if (!run->mmio.is_write)
                memset(run->mmio.data, 0xFF, run->mmio.len);
            break;
        case KVM_EXIT_INTR:
            break;
        case KVM_EXIT_HLT:
            fprintf(stderr, "exitlab-floor: the guest halted (in=%lu out=%lu)\n", ins, outs);
            return 3;
        case KVM_EXIT_SHUTDOWN:
            fprintf(stderr, "exitlab-floor: the guest shut down (triple fault?) (in=%lu out=%lu)\n",
                    ins, outs);
            return 3;
        default:
            fprintf(stderr, "exitlab-floor: unexpected exit reason %u\n", run->exit_reason);
            return 3;
        }
    }
}

/* Attaches the cheapest seccomp filter there is: one rule, allow every system call. */
static int allow_all_filter(void)
{
    struct sock_filter allow = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
    struct sock_fprog prog = {.len = 1, .filter = &allow};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return fail("prctl(PR_SET_NO_NEW_PRIVS)");
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0)
        return fail("seccomp(SECCOMP_SET_MODE_FILTER)");
    return 0;
}

int main(int argc, char **argv)
{
    int echo = 0, irqchip = 0, cpuid = 0, filter = 0, a = 1;
    for (; a < argc && strncmp(argv[a], "--", 2) == 0; a++) {
        if (strcmp(argv[a], "--serial") == 0)
            echo = 1;
        else if (strcmp(argv[a], "--irqchip") == 0)
            irqchip = 1;
        else if (strcmp(argv[a], "--cpuid") == 0)
            cpuid = 1;
        else if (strcmp(argv[a], "--seccomp") == 0)
            filter = 1;
        else
            break;
    }
    if (a >= argc || argc - a > 2)
        return bad("usage: exitlab-floor [--serial] [--irqchip] [--cpuid] [--seccomp] KERNEL [CMDLINE]");
    const char *path = argv[a], *cmdline = a + 1 < argc ? argv[a + 1] : "";
    if (strlen(cmdline) >= CMDLINE_MAX)
        return bad("the command line is too long");

    int kfd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (kfd < 0 || fstat(kfd, &st) < 0) {
        fprintf(stderr, "exitlab-floor: cannot read %s: %s\n", path, strerror(errno));
        return 2;
    }
    uint8_t *img = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, kfd, 0);
    if (img == MAP_FAILED)
        return bad("cannot map the kernel file");

    int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (kvm < 0)
        return fail("open /dev/kvm");
    int vm = ioctl(kvm, KVM_CREATE_VM, 0);
    if (vm < 0)
        return fail("KVM_CREATE_VM");
    uint8_t *ram = mmap(NULL, RAM_BYTES, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (ram == MAP_FAILED)
        return fail("mmap guest RAM");
    struct kvm_userspace_memory_region region = {
        .slot = 0,
        .guest_phys_addr = 0,
        .memory_size = RAM_BYTES,
        .userspace_addr = (uint64_t)(uintptr_t)ram,
    };
    if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &region) < 0)
        return fail("KVM_SET_USER_MEMORY_REGION");
    /* Intel hosts want a TSS area below 4 GiB; others accept and ignore it. */
    (void)ioctl(vm, KVM_SET_TSS_ADDR, 0xFFFBD000UL);

    uint32_t entry = load_elf32(img, (size_t)st.st_size, ram);
    if (entry == 0)
        return bad("the kernel is not an ELF32 image loadable at or above 1 MiB");
    /* Flat 32-bit code and data descriptors, as a multiboot loader leaves them. */
    const uint64_t gdt[3] = {0, 0x00CF9A000000FFFFULL, 0x00CF92000000FFFFULL};
    memcpy(ram + GDT_GPA, gdt, sizeof gdt);
    /* Multiboot information: memory sizes and the command line. */
    uint32_t mbi[4] = {(1u << 0) | (1u << 2), 640, (RAM_BYTES >> 10) - 1024, 0};
    memcpy(ram + MBI_GPA, mbi, sizeof mbi);
    uint32_t cmd_gpa = CMDLINE_GPA;
    memcpy(ram + MBI_GPA + 16, &cmd_gpa, 4);
    memcpy(ram + CMDLINE_GPA, cmdline, strlen(cmdline) + 1);

    if (irqchip && ioctl(vm, KVM_CREATE_IRQCHIP, 0) < 0)
        return fail("KVM_CREATE_IRQCHIP");
    int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
    if (vcpu < 0)
        return fail("KVM_CREATE_VCPU");
    if (cpuid) {
        enum { MAX_LEAVES = 256 };
        struct kvm_cpuid2 *c = calloc(1, sizeof *c + MAX_LEAVES * sizeof(struct kvm_cpuid_entry2));
        if (c == NULL)
            return fail("calloc");
        c->nent = MAX_LEAVES;
        if (ioctl(kvm, KVM_GET_SUPPORTED_CPUID, c) < 0)
            return fail("KVM_GET_SUPPORTED_CPUID");
        if (ioctl(vcpu, KVM_SET_CPUID2, c) < 0)
            return fail("KVM_SET_CPUID2");
        free(c);
    }
    int run_size = ioctl(kvm, KVM_GET_VCPU_MMAP_SIZE, 0);
    if (run_size < (int)sizeof(struct kvm_run))
        return fail("KVM_GET_VCPU_MMAP_SIZE");
    struct kvm_run *run = mmap(NULL, (size_t)run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
    if (run == MAP_FAILED)
        return fail("mmap kvm_run");

    struct kvm_sregs sregs;
    if (ioctl(vcpu, KVM_GET_SREGS, &sregs) < 0)
        return fail("KVM_GET_SREGS");
    flat(&sregs.cs, 0x08, 0xB);
    flat(&sregs.ds, 0x10, 0x3);
    sregs.es = sregs.fs = sregs.gs = sregs.ss = sregs.ds;
    sregs.gdt.base = GDT_GPA;
    sregs.gdt.limit = sizeof gdt - 1;
    sregs.cr0 = (sregs.cr0 | 1u) & ~(1u << 31); /* PE on, paging off */
    sregs.cr4 = 0;
    sregs.efer = 0;
    if (ioctl(vcpu, KVM_SET_SREGS, &sregs) < 0)
        return fail("KVM_SET_SREGS");
    struct kvm_regs regs;
    memset(&regs, 0, sizeof regs);
    regs.rip = entry;
    regs.rflags = 2;
    regs.rax = 0x2BADB002;
    regs.rbx = MBI_GPA;
    if (ioctl(vcpu, KVM_SET_REGS, &regs) < 0)
        return fail("KVM_SET_REGS");

    if (filter) {
        int r = allow_all_filter();
        if (r != 0)
            return r;
    }
    return run_loop(vcpu, run, echo);
}
