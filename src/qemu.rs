//! The QEMU-style command line: `exitlab run --qemu-args -- ARGS...`, or the same
//! binary started as `exitlab-qemu ARGS...`, so that a test runner whose QEMU variable
//! points at it (or at a two-line wrapper) runs its kernels on exitlab unchanged.
//!
//! Probes a QEMU-based runner makes, answered as QEMU answers them (exit 0):
//! `-h`/`-help`/`--help` (a usage text whose first line has QEMU's form, `QEMU-compatible
//! exitlab version X.Y.Z`), `-version`, `-device help`/`-device ?` (QEMU's format,
//! `name "pc-testdev", bus ISA`), `-cpu help`, `-machine help`. A kernel that cannot be
//! read gives QEMU's `could not load kernel 'FILE'` (with exitlab's reason) and QEMU's
//! exit status, 1.
//!
//! Exactly this subset of QEMU's options is accepted (with one or two leading dashes),
//! each mapped to `exitlab run`'s options; anything else is refused with a message that
//! names it (exit code 2):
//!
//! | QEMU option | exitlab |
//! |---|---|
//! | `-kernel FILE` | the kernel |
//! | `-append STR` | `--cmdline STR` |
//! | `-initrd FILE` | `--initrd FILE` |
//! | `-smp N` (also `cpus=N`) | `--cpus N` |
//! | `-m MIB` (also `NM`, `NG`) | `--mem MIB` |
//! | `-cpu MODEL[,OPTS]` | see below |
//! | `-machine`/`-M [pc\|pc-i440fx-*][,accel=kvm][,pit=on\|off][,kernel-irqchip=on\|split][,vmport=off]` | KVM (always); no in-kernel PIT; exitlab's I/O APIC and PIC in userspace |
//! | `-enable-kvm`, `-accel kvm` | what exitlab does anyway |
//! | `-global kvm-pit.lost_tick_policy=discard` | the in-kernel PIT does not re-inject missed ticks |
//! | `-nodefaults`, `-no-reboot`, `-display none`, `-overcommit mem-lock=off\|cpu-pm=off` | what exitlab does anyway |
//! | `-serial stdio` | `--serial stdio` |
//! | `-device isa-debug-exit,iobase=0xf4,iosize=0x4`, `-device pci-testdev`, `-device pc-testdev` | devices exitlab always has, at these places |
//!
//! Refused by name: other machines (`q35`: its emulated IOMMU is not modelled), other
//! devices (`intel-iommu`, `edu`, `hyperv-testdev`, ...), `-overcommit cpu-pm=on`,
//! `vmport=on`, `-chardev`, `-mon`, and every option not listed.
//!
//! `-cpu`: `host` and `max` are the host CPU as KVM supports it; a named QEMU model
//! (`qemu64`, `Opteron_G1`, `Skylake-Server`, `EPYC`, ... from QEMU's own tables, see
//! `exitlab_vmm::cpuid`) gives its features that the host has, its family, model,
//! stepping, levels and brand string, and the host's vendor (as QEMU does under KVM).
//! Then `+NAME`/`-NAME`/`NAME=on|off` for every CPUID feature name QEMU knows,
//! `vendor=`, `family=`, `model=`, `stepping=`, `level=`, `xlevel=`, `model-id=`,
//! `phys-bits=N`, `host-phys-bits[=on|off]`, `migratable=`, `check`, `enforce`. A
//! feature the host cannot provide is left out with QEMU's warning (`host doesn't support
//! requested feature: CPUID.01H:ECX.vmx [bit 5]`), or refused (exit 1) under `enforce`,
//! as QEMU does. `hv-*`/`hv_*` (Hyper-V enlightenments) and `vmx-*` (VMX capability
//! MSRs) are accepted with a warning that exitlab does not provide them.
//!
//! Exit codes are `exitlab run`'s, which follow isa-debug-exit: `(V << 1) | 1` when the
//! guest writes V to port 0xF4. Only warnings and errors go to stderr (a QEMU-based
//! runner takes any other stderr line for a failure).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use exitlab_vmm::cpuid::{self, CpuTemplate, PhysBits};
use exitlab_vmm::irqchip::IrqChip;
use exitlab_vmm::machine::PlatformOptions;

use crate::run::{run_cmd, RunOptions};
use crate::status::usage_error;

/// The name under which the binary takes QEMU's options directly.
pub const QEMU_NAME: &str = "exitlab-qemu";

/// The devices exitlab always has, as QEMU's `-device help` lists them.
const DEVICES: &str = "Misc devices:\n\
name \"isa-debug-exit\", bus ISA\n\
name \"pc-testdev\", bus ISA\n\
name \"pci-testdev\", bus PCI, desc \"PCI Test Device\"\n";

/// The QEMU-style arguments, if the command line asks for them: argv[0] named
/// [`QEMU_NAME`], or `run --qemu-args [--] ARGS...`.
pub fn qemu_style(args: &[OsString]) -> Option<Vec<OsString>> {
    let name = args.first().map(Path::new).and_then(Path::file_name);
    if name.is_some_and(|n| n == QEMU_NAME) {
        return Some(args[1..].to_vec());
    }
    if args.get(1).is_some_and(|a| a == "run") && args.get(2).is_some_and(|a| a == "--qemu-args") {
        let rest = &args[3..];
        let rest = if rest.first().is_some_and(|a| a == "--") {
            &rest[1..]
        } else {
            rest
        };
        return Some(rest.to_vec());
    }
    None
}

/// The usage text (`-help`): its first line has the form of QEMU's (`... version X.Y.Z`),
/// which runners parse for a version.
pub fn usage() -> String {
    format!(
        "QEMU-compatible exitlab version {v} (exitlab's QEMU-compatible front end, not QEMU)\n\
usage: {QEMU_NAME} [options] -kernel FILE\n\
\n\
Runs FILE on exitlab (a KVM virtual machine monitor) with QEMU's options, so that a\n\
QEMU-based test runner can use it as its QEMU. Accepted options:\n\
-kernel FILE          the kernel (multiboot, PVH ELF, Linux bzImage or vmlinux)\n\
-append STR           its command line\n\
-initrd FILE          its initial ramdisk (multiboot module 0)\n\
-smp N                vCPUs\n\
-m SIZE               RAM in MiB (or NM, NG)\n\
-cpu MODEL[,OPTS]     host, max, a QEMU model (-cpu help); +F/-F, vendor=, family=, model=,\n\
                      stepping=, level=, xlevel=, phys-bits=, host-phys-bits, enforce\n\
-machine/-M [pc][,accel=kvm][,pit=on|off][,kernel-irqchip=on|split]\n\
-enable-kvm, -accel kvm, -nodefaults, -no-reboot, -display none, -serial stdio\n\
-global kvm-pit.lost_tick_policy=discard\n\
-device isa-debug-exit,iobase=0xf4,iosize=0x4 | pc-testdev | pci-testdev (-device help)\n\
-h, -help, -version\n\
Anything else (q35, other devices, -chardev, -mon, ...) is refused by name.\n",
        v = env!("CARGO_PKG_VERSION")
    )
}

/// `-cpu help`: the models and the CPUID flags, from QEMU's tables.
fn cpu_help() -> String {
    let mut s = String::from("Available CPUs:\nx86 host                  KVM processor with all supported host features\nx86 max                   Enables all features supported by the accelerator in the current host\n");
    for m in cpuid::MODELS {
        let what = m
            .alias_of
            .map_or(m.model_id.to_string(), |a| format!("(alias of {a})"));
        s += &format!("x86 {:<22} {what}\n", m.name);
    }
    s += &format!(
        "\nRecognized CPUID flags (QEMU {}'s names):\n",
        cpuid::QEMU_VERSION
    );
    let names: Vec<&str> = cpuid::FEATURES.iter().map(|(n, _)| *n).collect();
    for chunk in names.chunks(8) {
        s += &format!("  {}\n", chunk.join(" "));
    }
    s
}

/// A probe a runner makes, answered without booting: `Some(exit code)`.
fn probe(args: &[String]) -> Option<i32> {
    let opt = |a: &str| {
        a.strip_prefix('-')
            .map(|o| o.trim_start_matches('-').to_string())
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let Some(o) = opt(a) else { continue };
        match o.as_str() {
            "h" | "help" => {
                print!("{}", usage());
                return Some(0);
            }
            "version" => {
                println!("{}", usage().lines().next().unwrap_or_default());
                return Some(0);
            }
            "device" | "cpu" | "machine" | "M" => {
                let v = it.next().map(String::as_str);
                if matches!(v, Some("help" | "?")) {
                    match o.as_str() {
                        "device" => print!("{DEVICES}"),
                        "cpu" => print!("{}", cpu_help()),
                        _ => print!("Supported machines are:\npc                   exitlab's PC platform (i440FX-style, no firmware)\n"),
                    }
                    return Some(0);
                }
            }
            _ => {}
        }
    }
    None
}

/// A QEMU-style command line, mapped: `exitlab run`'s options, the warnings QEMU would
/// print, and whether `-cpu ...,enforce` makes a missing feature an error.
#[derive(Debug)]
pub struct Parsed {
    /// What `exitlab run` is given.
    pub run: RunOptions,
    /// Warnings to print (without the `warning: ` prefix).
    pub warnings: Vec<String>,
    /// `-cpu ...,enforce`.
    pub enforce: bool,
}

/// Runs a QEMU-style command line; returns the process exit code.
pub fn qemu_cmd(args: Vec<OsString>) -> i32 {
    let strs: Vec<String> = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(code) = probe(&strs) {
        return code;
    }
    let p = match parse(&args) {
        Ok(p) => p,
        Err(msg) => return usage_error(msg),
    };
    let max = exitlab_vmm::machine::MAX_CPUS;
    if p.run.cpus == 0 || p.run.cpus > max {
        // QEMU's wording: a runner's --probe-maxsmp reads the last word.
        eprintln!(
            "{QEMU_NAME}: Invalid SMP CPUs {}. The max CPUs supported by machine 'pc' is {max}",
            p.run.cpus
        );
        return 1;
    }
    for w in &p.warnings {
        eprintln!("{QEMU_NAME}: warning: {w}");
    }
    if let Ok(kvm) = exitlab_vmm::vm::open_kvm() {
        if let Ok(missing) = cpuid::check(&kvm, &p.run.platform.cpu) {
            for m in &missing {
                eprintln!("{QEMU_NAME}: warning: host doesn't support requested feature: {m}");
            }
            if p.enforce && !missing.is_empty() {
                eprintln!("{QEMU_NAME}: -cpu ...,enforce: the host lacks features the CPU model asks for (listed above)");
                return 1;
            }
        }
    }
    let k = &p.run.kernel;
    if let Err(e) = crate::input::open_regular(k, "the kernel", u64::MAX) {
        eprintln!("{QEMU_NAME}: could not load kernel '{}': {e}", k.display());
        return 1;
    }
    run_cmd(p.run)
}

/// Maps QEMU's options to `exitlab run`'s; the error names the option refused.
pub fn parse(args: &[OsString]) -> Result<Parsed, String> {
    let mut o = RunOptions {
        kernel: PathBuf::new(),
        initrd: None,
        cmdline: String::new(),
        cpus: 1,
        mem_mib: 128,
        timeout: 0.0,
        serial: "stdio".into(),
        exit_stats: false,
        prefer_pvh: true,
        verbose: false,
        quiet: true,
        platform: PlatformOptions {
            firmware_state: true,
            ..PlatformOptions::default()
        },
    };
    let mut warnings = Vec::new();
    let mut enforce = false;
    let mut kernel = None;
    let mut it = args.iter();
    while let Some(raw) = it.next() {
        let arg = raw
            .to_str()
            .ok_or_else(|| format!("QEMU option {raw:?} is not UTF-8"))?;
        let opt = arg
            .strip_prefix("--")
            .map_or(arg, |o| &arg[arg.len() - o.len() - 1..]);
        let mut value = || -> Result<String, String> {
            it.next()
                .map(|v| v.to_string_lossy().into_owned())
                .ok_or_else(|| format!("QEMU option {opt} needs a value"))
        };
        match opt {
            "-kernel" => kernel = Some(PathBuf::from(value()?)),
            "-append" => o.cmdline = value()?,
            "-initrd" => o.initrd = Some(PathBuf::from(value()?)),
            "-smp" => {
                let v = value()?;
                let n = v.strip_prefix("cpus=").unwrap_or(&v);
                o.cpus = n.parse().map_err(|_| {
                    format!("-smp {v}: exitlab takes a plain vCPU count, as in -smp 2")
                })?;
            }
            "-m" => o.mem_mib = parse_mem(&value()?)?,
            "-cpu" => enforce |= parse_cpu(&value()?, &mut o.platform.cpu, &mut warnings)?,
            "-machine" | "-M" => parse_machine(&value()?, &mut o.platform)?,
            "-enable-kvm" => {}
            "-accel" => match value()?.as_str() {
                "kvm" => {}
                v => return Err(format!("-accel {v} is not supported: exitlab is KVM only (-accel kvm)")),
            },
            "-global" => match value()?.as_str() {
                "kvm-pit.lost_tick_policy=discard" => o.platform.pit_reinject = false,
                v => return Err(format!("-global {v} is not supported: exitlab accepts only -global kvm-pit.lost_tick_policy=discard")),
            },
            "-overcommit" => {
                let v = value()?;
                for kv in v.split(',') {
                    if !matches!(kv, "mem-lock=off" | "cpu-pm=off") {
                        return Err(format!("-overcommit {v}: {kv} is not supported by exitlab (it accepts mem-lock=off and cpu-pm=off)"));
                    }
                }
            }
            "-nodefaults" | "-no-reboot" => {}
            "-display" => match value()?.as_str() {
                "none" => {}
                v => return Err(format!("-display {v} is not supported: exitlab has no display (-display none)")),
            },
            "-serial" => match value()?.as_str() {
                "stdio" => o.serial = "stdio".into(),
                v => return Err(format!("-serial {v} is not supported: exitlab accepts -serial stdio")),
            },
            "-device" => match value()?.as_str() {
                "isa-debug-exit,iobase=0xf4,iosize=0x4" | "pci-testdev" | "pc-testdev" => {}
                v => return Err(format!(
                    "-device {v} is not supported: exitlab has isa-debug-exit,iobase=0xf4,iosize=0x4, pci-testdev and pc-testdev"
                )),
            },
            other => {
                return Err(format!(
                    "QEMU option {other} is not supported by exitlab (see `{QEMU_NAME} -help` and the README's QEMU section)"
                ))
            }
        }
    }
    o.kernel = kernel.ok_or("no -kernel FILE: exitlab needs the kernel to boot")?;
    Ok(Parsed {
        run: o,
        warnings,
        enforce,
    })
}

fn parse_mem(v: &str) -> Result<u64, String> {
    let bad = || format!("-m {v}: give the RAM in MiB (256, 256M or 1G)");
    let (num, scale) = match v.as_bytes().last() {
        Some(b'M' | b'm') => (&v[..v.len() - 1], 1),
        Some(b'G' | b'g') => (&v[..v.len() - 1], 1024),
        _ => (v, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(bad)
}

fn on_off(v: &str) -> Option<bool> {
    match v {
        "on" | "true" | "yes" => Some(true),
        "off" | "false" | "no" => Some(false),
        _ => None,
    }
}

/// Parses `-cpu MODEL[,OPTS]` into `t`; returns whether `enforce` was given.
fn parse_cpu(v: &str, t: &mut CpuTemplate, warnings: &mut Vec<String>) -> Result<bool, String> {
    let mut parts = v.split(',');
    let name = parts.next().unwrap_or_default();
    *t = CpuTemplate::default();
    match name {
        "host" | "max" => {}
        _ => {
            t.model = Some(cpuid::model(name).ok_or_else(|| {
                format!("-cpu {v}: unknown CPU model {name} (`{QEMU_NAME} -cpu help` lists host, max and QEMU's models)")
            })?)
        }
    }
    let mut enforce = false;
    let num = |k: &str, x: &str| -> Result<u32, String> {
        let r = match x.strip_prefix("0x") {
            Some(h) => u32::from_str_radix(h, 16),
            None => x.parse(),
        };
        r.map_err(|_| format!("-cpu {v}: {k}={x} is not a number"))
    };
    for f in parts.filter(|f| !f.is_empty()) {
        let (key, val) = match f.split_once('=') {
            Some((k, x)) => (k.replace('_', "-"), Some(x)),
            None => match f.as_bytes()[0] {
                b'+' => (f[1..].replace('_', "-"), Some("on")),
                b'-' => (f[1..].replace('_', "-"), Some("off")),
                _ => (f.replace('_', "-"), None),
            },
        };
        let flag = |dflt: bool| -> Result<bool, String> {
            val.map_or(Some(dflt), on_off)
                .ok_or_else(|| format!("-cpu {v}: {f}: give on or off"))
        };
        match key.as_str() {
            "vendor" => {
                let s = val.unwrap_or_default().as_bytes();
                let arr: [u8; 12] = s.try_into().map_err(|_| {
                    format!("-cpu {v}: {f}: the vendor is 12 characters (GenuineIntel, AuthenticAMD)")
                })?;
                t.vendor = Some(arr);
            }
            "family" => t.family = Some(num(&key, val.unwrap_or_default())?),
            "model" => t.model_number = Some(num(&key, val.unwrap_or_default())?),
            "stepping" => t.stepping = Some(num(&key, val.unwrap_or_default())?),
            "level" => t.level = Some(num(&key, val.unwrap_or_default())?),
            "xlevel" => t.xlevel = Some(num(&key, val.unwrap_or_default())?),
            "phys-bits" => {
                let n = num(&key, val.unwrap_or_default())?;
                if !(32..=52).contains(&n) {
                    return Err(format!("-cpu {v}: {f}: phys-bits must be 32 to 52"));
                }
                t.phys_bits = PhysBits::Exact(n as u8);
            }
            "host-phys-bits" => {
                if flag(true)? {
                    t.phys_bits = PhysBits::Host;
                } else if t.phys_bits == PhysBits::Host {
                    t.phys_bits = PhysBits::Default;
                }
            }
            "enforce" => enforce = flag(true)?,
            "check" | "migratable" => {
                flag(true)?;
            }
            k if k.starts_with("hv-") => warnings.push(format!(
                "-cpu {f}: exitlab offers no Hyper-V enlightenments (leaf 0x40000000 stays KVM's); ignored"
            )),
            k if k.starts_with("vmx-") => warnings.push(format!(
                "-cpu {f}: exitlab does not set VMX capability MSRs (KVM's defaults stay); ignored"
            )),
            k => {
                let bit = cpuid::feature(k).ok_or_else(|| {
                    if cpuid::OTHER_FLAGS.contains(&k) {
                        format!("-cpu {v}: {f} is a QEMU CPU property exitlab does not support")
                    } else {
                        format!("-cpu {v}: unknown CPU feature {k} (`{QEMU_NAME} -cpu help` lists QEMU's names)")
                    }
                })?;
                if flag(true)? {
                    t.remove.retain(|b| *b != bit);
                    t.add.push(bit);
                } else {
                    t.add.retain(|b| *b != bit);
                    t.remove.push(bit);
                }
            }
        }
    }
    Ok(enforce)
}

fn parse_machine(v: &str, p: &mut PlatformOptions) -> Result<(), String> {
    for (i, kv) in v.split(',').enumerate() {
        let kv = kv.strip_prefix("type=").unwrap_or(kv);
        match kv {
            "pc" | "accel=kvm" | "kernel-irqchip=on" | "vmport=off" => {}
            m if i == 0 && m.starts_with("pc-i440fx") => {}
            "pit=off" => p.pit = false,
            "pit=on" => p.pit = true,
            "kernel-irqchip=split" => p.irqchip = IrqChip::Split,
            m if i == 0 && (m == "q35" || m.starts_with("pc-q35")) => {
                return Err(format!(
                    "-machine {v}: the {m} machine is not supported: exitlab has one machine, pc (i440FX-style); q35 and its emulated IOMMU are not modelled"
                ))
            }
            _ => {
                return Err(format!(
                    "-machine {v}: {kv} is not supported; exitlab accepts pc, accel=kvm, pit=on|off, kernel-irqchip=on|split and vmport=off"
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    fn cpu(v: &str) -> Result<(CpuTemplate, Vec<String>, bool), String> {
        let p = parse(&args(&["-kernel", "k", "-cpu", v]))?;
        Ok((p.run.platform.cpu, p.warnings, p.enforce))
    }

    fn bit(n: &str) -> cpuid::CpuidBit {
        cpuid::feature(n).unwrap()
    }

    /// The command line the public suite's x86/run builds, with a test's options.
    const RUNNER: &str = "--no-reboot -nodefaults -global kvm-pit.lost_tick_policy=discard \
        -device pc-testdev -device isa-debug-exit,iobase=0xf4,iosize=0x4 -display none \
        -serial stdio -device pci-testdev -machine accel=kvm -kernel x86/vmexit.flat -smp 2 \
        -append cpuid_inl -m 256 -cpu host,-arch-capabilities,-x2apic -machine pit=off \
        -initrd /tmp/i";

    #[test]
    fn every_accepted_option_maps() {
        let a: Vec<&str> = RUNNER.split_whitespace().collect();
        let p = parse(&args(&a)).unwrap();
        let o = p.run;
        assert_eq!(o.kernel, PathBuf::from("x86/vmexit.flat"));
        assert_eq!(o.cmdline, "cpuid_inl");
        assert_eq!(o.initrd, Some(PathBuf::from("/tmp/i")));
        assert_eq!(o.cpus, 2);
        assert_eq!(o.mem_mib, 256);
        assert_eq!(o.serial, "stdio");
        assert!(
            o.quiet,
            "a runner reads any stderr line but a warning as a failure"
        );
        assert!(!o.platform.pit);
        assert!(!o.platform.pit_reinject);
        assert_eq!(
            o.platform.cpu.remove,
            vec![bit("arch-capabilities"), bit("x2apic")]
        );
        assert!(o.platform.cpu.model.is_none());
        assert_eq!(o.timeout, 0.0);
        assert!(p.warnings.is_empty() && !p.enforce);
    }

    #[test]
    fn defaults_and_variants() {
        let p = parse(&args(&[
            "--kernel",
            "k",
            "-m",
            "1G",
            "-cpu",
            "host",
            "-M",
            "pc,accel=kvm,kernel-irqchip=split",
            "-enable-kvm",
            "-accel",
            "kvm",
            "-overcommit",
            "mem-lock=off",
            "-smp",
            "cpus=3",
        ]))
        .unwrap();
        let o = p.run;
        assert_eq!(o.mem_mib, 1024);
        assert_eq!(o.cpus, 3);
        assert_eq!(o.platform.irqchip, IrqChip::Split);
        assert!(o.platform.pit && o.platform.pit_reinject);
        assert_eq!(o.platform.cpu, CpuTemplate::default());
        assert_eq!(
            parse(&args(&["-kernel", "k", "-m", "4g"]))
                .unwrap()
                .run
                .mem_mib,
            4096
        );
        assert!(parse(&args(&["-kernel", "k", "-machine", "pc-i440fx-7.2"])).is_ok());
    }

    #[test]
    fn cpu_models_features_and_properties() {
        let (t, w, e) = cpu("qemu64,+x2apic,+tsc-deadline").unwrap();
        assert_eq!(t.model.unwrap().name, "qemu64");
        assert_eq!(t.add, vec![bit("x2apic"), bit("tsc-deadline")]);
        assert!(w.is_empty() && !e);
        let (t, _, _) = cpu("qemu64,-x2apic,+tsc-deadline").unwrap();
        assert_eq!(
            (t.remove, t.add),
            (vec![bit("x2apic")], vec![bit("tsc-deadline")])
        );
        let (t, _, _) = cpu("qemu64,vendor=GenuineIntel").unwrap();
        assert_eq!(&t.vendor.unwrap(), b"GenuineIntel");
        let (t, _, _) = cpu("Opteron_G1,vendor=AuthenticAMD").unwrap();
        assert_eq!(t.model.unwrap().name, "Opteron_G1");
        assert_eq!(&t.vendor.unwrap(), b"AuthenticAMD");
        let (t, _, _) = cpu("qemu64,-pcid,+invpcid").unwrap();
        assert_eq!((t.remove, t.add), (vec![bit("pcid")], vec![bit("invpcid")]));
        let (t, _, _) = cpu("max,host-phys-bits").unwrap();
        assert_eq!((t.model, t.phys_bits), (None, PhysBits::Host));
        let (t, _, _) = cpu("IvyBridge,phys-bits=36,host-phys-bits=off,+vmx").unwrap();
        assert_eq!(t.phys_bits, PhysBits::Exact(36));
        assert_eq!(t.add, vec![bit("vmx")]);
        let (t, _, _) = cpu("Skylake-Server,host-phys-bits,+vmx,+vmx-mbec").unwrap();
        assert_eq!(t.model.unwrap().name, "Skylake-Server");
        let (t, _, _) = cpu("max,+svm,-rdtscp,-xsave,-invpcid,-skinit").unwrap();
        assert_eq!(t.add, vec![bit("svm")]);
        assert_eq!(t.remove.len(), 4);
        let (t, _, _) =
            cpu("host,family=6,model=0x55,stepping=4,level=13,xlevel=0x80000008").unwrap();
        assert_eq!(
            (t.family, t.model_number, t.stepping, t.level, t.xlevel),
            (Some(6), Some(0x55), Some(4), Some(13), Some(0x8000_0008))
        );
        // QEMU's spellings: `_` for `-`, aliases, feat=on|off, a bare name.
        let (t, _, _) = cpu("qemu64,tsc_deadline=on,sse4_1,pclmuldq=off").unwrap();
        assert_eq!(t.add, vec![bit("tsc-deadline"), bit("sse4.1")]);
        assert_eq!(t.remove, vec![bit("pclmulqdq")]);
        let (_, w, e) = cpu("host,hv_passthrough,migratable=no,enforce").unwrap();
        assert!(e);
        assert_eq!(w.len(), 1);
        assert!(w[0].contains("Hyper-V"), "{w:?}");
        let (_, w, _) = cpu("max,+vmx,-vmx-mbec").unwrap();
        assert!(w[0].contains("VMX capability MSRs"), "{w:?}");
        assert_eq!(
            cpu("EPYC").unwrap().0.model.unwrap().alias_of,
            Some("EPYC-v1")
        );
    }

    #[test]
    fn anything_else_is_refused_naming_it() {
        for (extra, named) in [
            (&["-vga", "std"][..], "-vga"),
            (&["-device", "virtio-net-pci"][..], "virtio-net-pci"),
            (
                &["-device", "intel-iommu,intremap=on,eim=off"][..],
                "intel-iommu",
            ),
            (&["-device", "hyperv-testdev"][..], "hyperv-testdev"),
            (&["-M", "q35,kernel-irqchip=split"][..], "q35"),
            (&["-machine", "pc-q35-7.2"][..], "pc-q35-7.2"),
            (&["-machine", "vmport=on"][..], "vmport=on"),
            (&["-overcommit", "cpu-pm=on"][..], "cpu-pm=on"),
            (&["-cpu", "qemu65"][..], "qemu65"),
            (&["-cpu", "host,-frobnicate"][..], "frobnicate"),
            (&["-cpu", "host,+pmu"][..], "pmu"),
            (&["-cpu", "host,vendor=Intel"][..], "vendor=Intel"),
            (&["-cpu", "host,phys-bits=99"][..], "phys-bits"),
            (&["-machine", "accel=tcg"][..], "accel=tcg"),
            (&["-accel", "tcg"][..], "-accel tcg"),
            (&["-serial", "file:/tmp/x"][..], "file:/tmp/x"),
            (&["-chardev", "pipe,id=mon,path=x"][..], "-chardev"),
            (
                &["-global", "kvm-pit.lost_tick_policy=delay"][..],
                "lost_tick_policy=delay",
            ),
            (&["-smp", "cpus=2,sockets=1"][..], "cpus=2,sockets=1"),
            (&["-display", "gtk"][..], "-display gtk"),
        ] {
            let mut a = vec!["-kernel", "k"];
            a.extend_from_slice(extra);
            let e = parse(&args(&a))
                .err()
                .unwrap_or_else(|| panic!("{a:?} accepted"));
            assert!(e.contains(named), "{a:?}: {e}");
        }
        assert!(parse(&args(&["-append", "x"]))
            .unwrap_err()
            .contains("-kernel"));
        assert!(parse(&args(&["-kernel"]))
            .unwrap_err()
            .contains("needs a value"));
    }

    #[test]
    fn probes_are_answered_as_qemu_answers_them() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        for a in [
            &["--help"][..],
            &["-help"],
            &["-h"],
            &["-version"],
            &["-device", "?"],
            &["-device", "help"],
            &["-cpu", "help"],
            &["-M", "?"],
        ] {
            assert_eq!(probe(&s(a)), Some(0), "{a:?}");
        }
        assert_eq!(probe(&s(&["-kernel", "k", "-device", "pc-testdev"])), None);
        let u = usage();
        let first = u.lines().next().unwrap();
        assert!(first.contains("QEMU") && first.contains("exitlab's QEMU-compatible front end"));
        // the runner reads the version as the 4th to 6th words split on spaces and dots
        let words: Vec<&str> = first.split([' ', '.']).collect();
        assert_eq!(
            words[3..6]
                .iter()
                .map(|w| w.parse::<u32>().is_ok())
                .collect::<Vec<_>>(),
            [true; 3]
        );
        assert!(DEVICES.contains("name \"pc-testdev\", bus ISA"));
        assert!(DEVICES.contains("\"pci-testdev\""));
        let c = cpu_help();
        assert!(
            c.contains("x86 qemu64")
                && c.contains("x86 Opteron_G1")
                && c.contains(" tsc-deadline ")
        );
    }

    #[test]
    fn how_the_qemu_style_is_selected() {
        let a = args(&["/usr/local/bin/exitlab-qemu", "-kernel", "k"]);
        assert_eq!(qemu_style(&a), Some(args(&["-kernel", "k"])));
        let a = args(&["exitlab", "run", "--qemu-args", "--", "-kernel", "k"]);
        assert_eq!(qemu_style(&a), Some(args(&["-kernel", "k"])));
        let a = args(&["exitlab", "run", "k"]);
        assert_eq!(qemu_style(&a), None);
    }
}
