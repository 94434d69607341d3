//! The QEMU-style command line: `exitlab run --qemu-args -- ARGS...`, or the same
//! binary started as `exitlab-qemu ARGS...`, so that a test runner whose QEMU variable
//! points at a two-line wrapper runs its kernels on exitlab unchanged.
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
//! | `-smp N` | `--cpus N` |
//! | `-m MIB` (also `NM`, `NG`) | `--mem MIB` |
//! | `-cpu host[,-FEATURE...]` | the host CPU as KVM supports it (always), FEATURE's CPUID bit cleared (the names of `exitlab_vmm::cpuid::FEATURES`) |
//! | `-machine accel=kvm[,pit=off]` | KVM (always); no in-kernel PIT |
//! | `-global kvm-pit.lost_tick_policy=discard` | the in-kernel PIT does not re-inject missed ticks |
//! | `-nodefaults`, `-no-reboot`, `-display none` | what exitlab does anyway: only its own devices, a reset ends the run, no display |
//! | `-serial stdio` | `--serial stdio` |
//! | `-device isa-debug-exit,iobase=0xf4,iosize=0x4`, `-device pci-testdev`, `-device pc-testdev` | devices exitlab always has, at these places |
//!
//! Exit codes are `exitlab run`'s, which follow isa-debug-exit: `(V << 1) | 1` when the
//! guest writes V to port 0xF4.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use exitlab_vmm::cpuid;
use exitlab_vmm::machine::PlatformOptions;

use crate::run::{run_cmd, RunOptions};
use crate::status::usage_error;

/// The name under which the binary takes QEMU's options directly.
pub const QEMU_NAME: &str = "exitlab-qemu";

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

/// Runs a QEMU-style command line; returns the process exit code.
pub fn qemu_cmd(args: Vec<OsString>) -> i32 {
    match parse(&args) {
        Ok(o) => run_cmd(o),
        Err(msg) => usage_error(msg),
    }
}

/// Maps QEMU's options to `exitlab run`'s; the error names the option refused.
pub fn parse(args: &[OsString]) -> Result<RunOptions, String> {
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
        quiet: false,
        platform: PlatformOptions::default(),
    };
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
                o.cpus = v
                    .parse()
                    .map_err(|_| format!("-smp {v}: exitlab takes a plain vCPU count, as in -smp 2"))?;
            }
            "-m" => o.mem_mib = parse_mem(&value()?)?,
            "-cpu" => parse_cpu(&value()?, &mut o.platform)?,
            "-machine" => parse_machine(&value()?, &mut o.platform)?,
            "-global" => match value()?.as_str() {
                "kvm-pit.lost_tick_policy=discard" => o.platform.pit_reinject = false,
                v => return Err(format!("-global {v} is not supported: exitlab accepts only -global kvm-pit.lost_tick_policy=discard")),
            },
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
                    "QEMU option {other} is not supported by exitlab (see `exitlab run --help` and the README's QEMU section)"
                ))
            }
        }
    }
    o.kernel = kernel.ok_or("no -kernel FILE: exitlab needs the kernel to boot")?;
    Ok(o)
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

fn parse_cpu(v: &str, p: &mut PlatformOptions) -> Result<(), String> {
    let mut parts = v.split(',');
    if parts.next() != Some("host") {
        return Err(format!("-cpu {v} is not supported: exitlab gives the guest the host CPU (-cpu host[,-feature...])"));
    }
    for f in parts {
        let bit = f
            .strip_prefix('-')
            .and_then(cpuid::feature)
            .ok_or_else(|| {
                let known: Vec<&str> = cpuid::FEATURES.iter().map(|(n, _)| *n).collect();
                format!(
                    "-cpu {v}: feature {f} is not supported; exitlab can remove {}",
                    known.join(", ")
                )
            })?;
        p.cpuid_clear.push(bit);
    }
    Ok(())
}

fn parse_machine(v: &str, p: &mut PlatformOptions) -> Result<(), String> {
    for kv in v.split(',') {
        match kv {
            "accel=kvm" => {}
            "pit=off" => p.pit = false,
            "pit=on" => p.pit = true,
            _ => {
                return Err(format!(
                    "-machine {v}: {kv} is not supported; exitlab accepts accel=kvm and pit=off"
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

    const RUNNER: &str = "-kernel x86/vmexit.flat -append cpuid_inl -initrd /tmp/i -smp 2 \
        -m 256 -cpu host,-arch-capabilities,-x2apic -machine accel=kvm,pit=off -nodefaults \
        -no-reboot -display none -serial stdio -device isa-debug-exit,iobase=0xf4,iosize=0x4 \
        -device pci-testdev -device pc-testdev -global kvm-pit.lost_tick_policy=discard";

    #[test]
    fn every_accepted_option_maps() {
        let a: Vec<&str> = RUNNER.split_whitespace().collect();
        let o = parse(&args(&a)).unwrap();
        assert_eq!(o.kernel, PathBuf::from("x86/vmexit.flat"));
        assert_eq!(o.cmdline, "cpuid_inl");
        assert_eq!(o.initrd, Some(PathBuf::from("/tmp/i")));
        assert_eq!(o.cpus, 2);
        assert_eq!(o.mem_mib, 256);
        assert_eq!(o.serial, "stdio");
        assert!(!o.platform.pit);
        assert!(!o.platform.pit_reinject);
        assert_eq!(
            o.platform.cpuid_clear,
            vec![
                cpuid::feature("arch-capabilities").unwrap(),
                cpuid::feature("x2apic").unwrap()
            ]
        );
        assert_eq!(o.timeout, 0.0);
    }

    #[test]
    fn defaults_and_variants() {
        let o = parse(&args(&[
            "--kernel",
            "k",
            "-m",
            "1G",
            "-cpu",
            "host",
            "-machine",
            "accel=kvm",
        ]))
        .unwrap();
        assert_eq!(o.mem_mib, 1024);
        assert_eq!(o.cpus, 1);
        assert!(o.platform.pit && o.platform.pit_reinject && o.platform.cpuid_clear.is_empty());
        assert_eq!(
            parse(&args(&["-kernel", "k", "-m", "64M"]))
                .unwrap()
                .mem_mib,
            64
        );
    }

    #[test]
    fn anything_else_is_refused_naming_it() {
        for (extra, named) in [
            (&["-vga", "std"][..], "-vga"),
            (&["-device", "virtio-net-pci"][..], "virtio-net-pci"),
            (&["-cpu", "qemu64"][..], "qemu64"),
            (&["-cpu", "host,-frobnicate"][..], "frobnicate"),
            (&["-machine", "accel=tcg"][..], "accel=tcg"),
            (&["-serial", "file:/tmp/x"][..], "file:/tmp/x"),
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
    fn how_the_qemu_style_is_selected() {
        let a = args(&["/usr/local/bin/exitlab-qemu", "-kernel", "k"]);
        assert_eq!(qemu_style(&a), Some(args(&["-kernel", "k"])));
        let a = args(&["exitlab", "run", "--qemu-args", "--", "-kernel", "k"]);
        assert_eq!(qemu_style(&a), Some(args(&["-kernel", "k"])));
        let a = args(&["exitlab", "run", "k"]);
        assert_eq!(qemu_style(&a), None);
    }
}
