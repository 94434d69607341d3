#!/usr/bin/env python3
"""Generates crates/vmm/src/cpuid/qemu_data.rs: QEMU's CPUID feature names and CPU models,
taken from a QEMU binary through QMP (nothing is typed in by hand).

    python3 crates/vmm/gen/qemu_cpu_data.py [QEMU] > crates/vmm/src/cpuid/qemu_data.rs

QEMU defaults to qemu-system-x86_64 (Debian: apt-get install qemu-system-x86). /dev/kvm
is needed: the models are expanded under KVM, so that they carry QEMU's KVM defaults
(x2apic on, svm off, the kvm-* paravirtual bits on), as `qemu-system-x86_64 -accel kvm
-cpu MODEL` gives them.

- Feature names -> CPUID bits: for every boolean property of QEMU's `max` CPU type, one
  QEMU is started with `-cpu base,+NAME` (KVM, stopped) and the CPU's `feature-words` and
  `filtered-features` QOM properties are read; the bit that `+NAME` sets on top of `base`
  is that name's bit. A property that sets no CPUID bit (vmx-* MSR features, hv-*,
  check, enforce, ...) is listed in OTHER_FLAGS.
- Models: `query-cpu-definitions`, then `query-cpu-model-expansion type=full` of each
  model under KVM: its family, model, stepping, level, xlevel, model-id and the set of
  feature names it enables, turned into per-register masks with the table above.
"""
import json
import subprocess
import sys

QEMU = sys.argv[1] if len(sys.argv) > 1 else "qemu-system-x86_64"
REGS = {"EAX": 0, "EBX": 1, "ECX": 2, "EDX": 3}
# Leaf 0xD's state-component masks (XCR0 and XSS): QEMU derives them from the features
# (+avx sets XCR0's AVX bit too), so they are not feature words of their own.
XSAVE_COMPONENTS = {(0xD, 0, 0), (0xD, 0, 3), (0xD, 1, 2), (0xD, 1, 3)}


def qmp(commands, args, fail=True):
    """Runs one stopped QEMU with `args`, sends `commands`, returns their answers (None
    if QEMU refused `args` and `fail` is false)."""
    lines = [{"execute": "qmp_capabilities"}] + commands + [{"execute": "quit"}]
    text = "".join(json.dumps(c) + "\n" for c in lines)
    p = subprocess.run(
        [QEMU, "-nodefaults", "-display", "none", "-S", "-qmp", "stdio"] + args,
        input=text, capture_output=True, text=True, check=False)
    out = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    answers = [o for o in out if "return" in o or "error" in o][1:]
    if len(answers) < len(commands):
        if not fail:
            return None
        raise SystemExit(f"{QEMU} {' '.join(args)}: {p.stderr.strip()}")
    return answers[: len(commands)]


def words(args):
    """{(leaf, subleaf, reg): mask} set or filtered on the CPU that `args` starts, or
    None if QEMU refuses `args` (a property only `max` has)."""
    path = "/machine/unattached/device[0]"
    got = qmp([{"execute": "qom-get", "arguments": {"path": path, "property": p}}
               for p in ("feature-words", "filtered-features")],
              ["-machine", "pc", "-accel", "kvm"] + args, fail=False)
    if got is None:
        return None
    acc = {}
    for a in got:
        for w in a.get("return", []):
            key = (w["cpuid-input-eax"], w.get("cpuid-input-ecx", 0), REGS[w["cpuid-register"]])
            if key in XSAVE_COMPONENTS:
                continue
            acc[key] = acc.get(key, 0) | w["features"]
    return acc


def main():
    version = qmp([{"execute": "query-version"}], ["-machine", "none"])[0]["return"]
    qv = version["qemu"]
    qemu_version = f'{qv["major"]}.{qv["minor"]}.{qv["micro"]} {version["package"]}'.strip()
    props = qmp([{"execute": "qom-list-properties", "arguments": {"typename": "max-x86_64-cpu"}}],
                ["-machine", "none"])[0]["return"]
    names = sorted(p["name"] for p in props if p["type"] == "bool")
    base = words(["-cpu", "base"])
    features, other = {}, []
    for n in names:
        w = words(["-cpu", f"base,{n}=on"])
        if w is None:
            other.append(n)
            continue
        new = [(k, v & ~base.get(k, 0)) for k, v in w.items() if v & ~base.get(k, 0)]
        bits = [(k, b) for k, v in new for b in range(32) if v >> b & 1]
        if len(bits) == 1:
            features[n] = bits[0]
        else:
            other.append(n)
    defs = qmp([{"execute": "query-cpu-definitions"}], ["-machine", "none", "-accel", "kvm"])[0]["return"]
    models = []
    for d in sorted(defs, key=lambda d: d["name"].lower()):
        name = d["name"]
        if name in ("host", "max", "base"):
            continue
        e = qmp([{"execute": "query-cpu-model-expansion",
                  "arguments": {"type": "full", "model": {"name": name}}}],
                ["-machine", "none", "-accel", "kvm"])[0]
        if "error" in e:
            raise SystemExit(f"{name}: {e['error']}")
        p = e["return"]["model"]["props"]
        masks = {}
        for f, on in p.items():
            if on is True and f in features:
                (leaf, sub, reg), bit = features[f]
                masks[(leaf, sub, reg)] = masks.get((leaf, sub, reg), 0) | 1 << bit
        models.append((name, d.get("alias-of"), p["family"], p["model"], p["stepping"],
                       p["level"], p["xlevel"], p["model-id"], sorted(masks.items())))
    words_seen = sorted({k for (k, _) in features.values()})

    o = []
    o.append(f"// @generated by crates/vmm/gen/qemu_cpu_data.py from QEMU {qemu_version}.")
    o.append("// Do not edit: regenerate (see the script's header).")
    o.append("")
    o.append("use super::CpuidBit;")
    o.append("")
    o.append("/// The QEMU these tables were taken from.")
    o.append(f"pub const QEMU_VERSION: &str = {json.dumps(qemu_version)};")
    o.append("")
    o.append("/// QEMU's CPUID feature names (aliases included), sorted, with their bits.")
    o.append("pub const FEATURES: &[(&str, CpuidBit)] = &[")
    for n in sorted(features):
        (leaf, sub, reg), bit = features[n]
        o.append(f"    ({json.dumps(n)}, CpuidBit {{ function: {leaf:#x}, index: {sub}, reg: {reg}, bit: {bit} }}),")
    o.append("];")
    o.append("")
    o.append("/// The CPUID registers QEMU's feature names cover: (leaf, subleaf, register).")
    o.append("pub const FEATURE_WORDS: &[(u32, u32, u8)] = &[")
    for leaf, sub, reg in words_seen:
        o.append(f"    ({leaf:#x}, {sub}, {reg}),")
    o.append("];")
    o.append("")
    o.append("/// QEMU's other boolean CPU properties (no CPUID bit of their own), sorted.")
    o.append("pub const OTHER_FLAGS: &[&str] = &[")
    for n in other:
        o.append(f"    {json.dumps(n)},")
    o.append("];")
    o.append("")
    o.append("/// One named QEMU CPU model, as `-accel kvm -cpu NAME` expands it.")
    o.append("#[derive(Debug, PartialEq, Eq)]")
    o.append("pub struct Model {")
    o.append("    /// The model's name.")
    o.append("    pub name: &'static str,")
    o.append("    /// The versioned model this name stands for, if it is an alias.")
    o.append("    pub alias_of: Option<&'static str>,")
    o.append("    /// CPUID family.")
    o.append("    pub family: u32,")
    o.append("    /// CPUID model.")
    o.append("    pub model: u32,")
    o.append("    /// CPUID stepping.")
    o.append("    pub stepping: u32,")
    o.append("    /// Highest basic leaf.")
    o.append("    pub level: u32,")
    o.append("    /// Highest extended leaf.")
    o.append("    pub xlevel: u32,")
    o.append("    /// Brand string (leaves 0x80000002-4).")
    o.append("    pub model_id: &'static str,")
    o.append("    /// The features it enables: (leaf, subleaf, register, mask).")
    o.append("    pub features: &'static [(u32, u32, u8, u32)],")
    o.append("}")
    o.append("")
    o.append("/// QEMU's named CPU models (not `host`, `max` or `base`), sorted by name.")
    o.append("pub const MODELS: &[Model] = &[")
    for (name, alias, fam, mod, step, lvl, xlvl, mid, masks) in models:
        o.append("    Model {")
        o.append(f"        name: {json.dumps(name)},")
        o.append(f"        alias_of: {'Some(' + json.dumps(alias) + ')' if alias else 'None'},")
        o.append(f"        family: {fam},")
        o.append(f"        model: {mod},")
        o.append(f"        stepping: {step},")
        o.append(f"        level: {lvl:#x},")
        o.append(f"        xlevel: {xlvl:#x},")
        o.append(f"        model_id: {json.dumps(mid)},")
        o.append("        features: &[")
        for (leaf, sub, reg), m in masks:
            o.append(f"            ({leaf:#x}, {sub}, {reg}, {m:#010x}),")
        o.append("        ],")
        o.append("    },")
    o.append("];")
    print("\n".join(o))


main()
