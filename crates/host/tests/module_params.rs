//! The module-parameter knob on the real host: `cargo test -p exitlab-host --test
//! module_params`.
//!
//! What a host allows decides what runs: on the project's kvm_pvm host (kvm and kvm_pvm
//! built in, every parameter read-only) the refusals are asserted, and the tests that need
//! a reloadable KVM assert the refusal this host gives and say that they did not exercise
//! the change. Inside the L1 (`run-in-l1`: kvm and kvm_amd are modules, kvm.halt_poll_ns
//! writable) they exercise it: a run-time write of kvm.halt_poll_ns, a reload of kvm_amd
//! with npt switched and back (nested and avic kept), /dev/kvm kept, and a child killed
//! with SIGKILL while it has npt switched, restored by `restore_pending`. With
//! `EXITLAB_REQUIRE_MODULE_RELOAD=1` a host that cannot make the change fails them.
//!
//! The tests that change the host take one lock: they must not overlap.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use exitlab_host::param_host::NodeState;
use exitlab_host::param_inspect::{inspect, module_facts, ParamFacts};
use exitlab_host::param_state::SavedState;
use exitlab_host::{
    restore_pending, Host, KnobError, Modprobe, ModuleLoader, ParamSession, ParamSpec, Pending,
};

/// Serialises the tests that change the host.
static HOST: Mutex<()> = Mutex::new(());

/// Set by the kill -9 test in the child it starts: the state file to use.
const CHILD_ENV: &str = "EXITLAB_KNOB_TEST_CHILD";

fn require_reload() -> bool {
    std::env::var("EXITLAB_REQUIRE_MODULE_RELOAD").is_ok_and(|v| v == "1")
}

fn spec(s: &str) -> ParamSpec {
    ParamSpec::parse(s).unwrap()
}

/// A state file of the test's own, in a fresh directory.
fn state_path(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("exitlab-knob-{tag}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    dir.join("host-params.json")
}

/// Every parameter of the KVM modules, as sysfs shows them now.
fn all_params(host: &Host) -> BTreeMap<String, BTreeMap<String, String>> {
    exitlab_host::modules::kvm_modules(&host.sys_module())
        .into_iter()
        .map(|m| (m.clone(), module_facts(host, &m).params))
        .collect()
}

/// The refusal this host must give for `spec`, told from sysfs and /proc independently
/// of the knob's code; `None` when nothing should be refused.
fn expected_refusal(host: &Host, spec: &ParamSpec) -> Option<&'static str> {
    let module = Path::new("/sys/module").join(&spec.module);
    let param = module.join("parameters").join(&spec.param);
    let read_only = fs::metadata(&param)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o200 == 0)
        .unwrap_or(true);
    if Path::new("/sys/module/kvm_pvm").exists() {
        Some("paravirtual")
    } else if !module.exists() {
        Some("no such module")
    } else if !param.exists() {
        Some("no such parameter")
    } else if read_only && !module.join("initstate").exists() {
        Some("built in and read-only")
    } else if host.euid != 0 {
        Some("not root")
    } else {
        None
    }
}

fn kind(e: &KnobError) -> &'static str {
    match e {
        KnobError::Paravirtual { .. } => "paravirtual",
        KnobError::NoSuchModule { .. } => "no such module",
        KnobError::NoSuchParameter { .. } => "no such parameter",
        KnobError::BuiltInReadOnly { .. } => "built in and read-only",
        KnobError::NotRoot { .. } => "not root",
        KnobError::InUse { .. } => "in use",
        KnobError::ModprobeMissing { .. } => "no modprobe",
        KnobError::ModuleFileMissing { .. } => "no module file",
        _ => "not a refusal",
    }
}

/// The knob a reload test switches on this host: kvm_amd.npt, or kvm_intel.ept, or
/// kvm_amd.npt when neither vendor module is loaded (and the host refuses it).
fn reload_knob() -> ParamSpec {
    if Path::new("/sys/module/kvm_intel").exists() {
        spec("kvm_intel.ept")
    } else {
        spec("kvm_amd.npt")
    }
}

/// Looks at `knob` on this host: `Some(facts)` when the change can be made here; else
/// asserts that the refusal is the one this host must give, says so, and returns `None`
/// (or fails, under EXITLAB_REQUIRE_MODULE_RELOAD=1).
fn can_switch(host: &Host, knob: &ParamSpec, what: &str) -> Option<ParamFacts> {
    let facts = inspect(host, knob);
    let expected = expected_refusal(host, knob);
    match facts.check(&Modprobe::find()) {
        Ok(()) => {
            assert_eq!(expected, None, "{knob}: this host should refuse it");
            Some(facts)
        }
        Err(e) => {
            assert!(
                !require_reload(),
                "EXITLAB_REQUIRE_MODULE_RELOAD=1 but {what} is impossible here: {e}"
            );
            if let Some(expected) = expected {
                assert_eq!(kind(&e), expected, "{e}");
            }
            assert!(e.is_refusal(), "{e}");
            println!("{what} NOT exercised on this host, which refuses it: {e}");
            None
        }
    }
}

#[test]
fn this_host_s_refusals() {
    let host = Host::real();
    let modprobe = Modprobe::find();
    if Path::new("/sys/module/kvm_pvm").exists() {
        // The project's kvm_pvm host: kvm and kvm_pvm built in, every parameter 0444.
        // Paravirtual comes first (it is why nothing here could be measured), then what
        // would stop the change anyway.
        let facts = inspect(&host, &spec("kvm.halt_poll_ns"));
        assert!(
            facts.module.loaded && facts.module.built_in,
            "{:?}",
            facts.module
        );
        assert!(facts.exists && !facts.writable);
        assert!(facts.paravirtual);
        let r = facts.refusals(&modprobe);
        for e in &r {
            println!("kvm.halt_poll_ns refused: {e}");
        }
        let kinds: Vec<&str> = r.iter().map(kind).collect();
        assert_eq!(
            &kinds[..2],
            ["paravirtual", "built in and read-only"],
            "{kinds:?}"
        );
        let e = ParamSession::open(
            host.clone(),
            modprobe.clone(),
            &spec("kvm.halt_poll_ns"),
            state_path("refusals"),
        )
        .unwrap_err();
        assert_eq!(kind(&e), "paravirtual", "{e}");

        // kvm_amd does not exist here, and the host is paravirtual first.
        let r = inspect(&host, &spec("kvm_amd.npt")).refusals(&modprobe);
        for e in &r {
            println!("kvm_amd.npt refused: {e}");
        }
        let kinds: Vec<&str> = r.iter().map(kind).collect();
        assert_eq!(kinds, ["paravirtual", "no such module"]);

        // kvm_pvm's own parameters are not the hardware KVM's: refused as built in and
        // read-only.
        let pvm = module_facts(&host, "kvm_pvm");
        let param = pvm.params.keys().next().expect("kvm_pvm has parameters");
        let knob = spec(&format!("kvm_pvm.{param}"));
        let e = inspect(&host, &knob).check(&modprobe).unwrap_err();
        println!("{knob} refused: {e}");
        assert_eq!(kind(&e), "built in and read-only", "{e}");
    } else {
        // A host with a hardware-assisted KVM (the L1): a parameter that does not exist
        // is refused by name, with the module's parameters listed.
        let e = inspect(&host, &spec("kvm.no_such_parameter"))
            .check(&modprobe)
            .unwrap_err();
        println!("kvm.no_such_parameter refused: {e}");
        assert_eq!(kind(&e), "no such parameter", "{e}");
        assert!(e.to_string().contains("halt_poll_ns"), "{e}");
        let e = inspect(&host, &spec("kvm_nosuch.x"))
            .check(&modprobe)
            .unwrap_err();
        assert_eq!(kind(&e), "no such module", "{e}");
    }
    // Nothing was written.
    assert!(!state_path("refusals").exists());
}

#[test]
fn run_time_write_of_halt_poll_ns() {
    let _g = HOST.lock().unwrap_or_else(|e| e.into_inner());
    let host = Host::real();
    let knob = spec("kvm.halt_poll_ns");
    let Some(facts) = can_switch(&host, &knob, "a run-time write of kvm.halt_poll_ns") else {
        return;
    };
    assert!(facts.writable, "{knob} is writable where it is not refused");
    let path = Path::new("/sys/module/kvm/parameters/halt_poll_ns");
    let original = fs::read_to_string(path).unwrap().trim().to_string();
    let other = if original == "0" { "100000" } else { "0" };
    let before = all_params(&host);
    let state = state_path("write");
    let mut s = ParamSession::open(host.clone(), Modprobe::find(), &knob, &state).unwrap();
    // A value the kernel refuses (not a number).
    let e = s.set("abc").unwrap_err();
    println!("kvm.halt_poll_ns=abc: {e}");
    assert!(matches!(e, KnobError::ValueRefused { .. }), "{e:?}");
    assert_eq!(fs::read_to_string(path).unwrap().trim(), original);
    let a = s.set(other).unwrap();
    println!(
        "kvm.halt_poll_ns {original} -> {}: reloaded {}, took {:?}",
        a.in_force, a.reloaded, a.took
    );
    assert!(!a.reloaded);
    assert_eq!(a.in_force, other);
    assert_eq!(
        fs::read_to_string(path).unwrap().trim(),
        other,
        "read back from sysfs"
    );
    assert!(
        state.exists(),
        "the state file is there while the value is switched"
    );
    let out = s.restore().unwrap();
    assert_eq!(out.before.len(), 1, "{:?}", out.before);
    assert_eq!(fs::read_to_string(path).unwrap().trim(), original);
    assert_eq!(all_params(&host), before, "every KVM parameter as it was");
    assert!(!state.exists());
    println!("kvm.halt_poll_ns back at {original}");
}

#[test]
fn reload_switches_a_read_only_parameter_and_keeps_the_others() {
    let _g = HOST.lock().unwrap_or_else(|e| e.into_inner());
    let host = Host::real();
    let knob = reload_knob();
    let Some(facts) = can_switch(&host, &knob, &format!("a reload for {knob}")) else {
        return;
    };
    assert!(facts.needs_reload(), "{knob} is read-only at run time");
    let original = facts.value.clone().unwrap();
    let other = if original == "Y" { "0" } else { "1" };
    let before = all_params(&host);
    let node = host.node_state();
    let tainted = fs::read_to_string("/proc/sys/kernel/tainted").unwrap();
    println!(
        "before: {knob}={original}, /dev/kvm {node:?}, taint flags {}",
        tainted.trim()
    );
    for (m, params) in &before {
        println!("  {m}: {params:?}");
    }
    let state = state_path("reload");
    let mut s = ParamSession::open(host.clone(), Modprobe::find(), &knob, &state).unwrap();
    let mut reloads = 0;
    for value in [other, original.as_str()] {
        let a = s.set(value).unwrap();
        reloads += usize::from(a.reloaded);
        println!(
            "{knob}: asked {value}, in force {}, reloaded {}, took {:?}, warnings {:?}",
            a.in_force, a.reloaded, a.took, a.warnings
        );
        assert!(a.reloaded);
        assert!(a.warnings.is_empty(), "{:?}", a.warnings);
        let now = all_params(&host);
        for (m, params) in &before {
            for (p, v) in params {
                if format!("{m}.{p}") != knob.to_string() {
                    assert_eq!(&now[m][p], v, "{m}.{p} after {knob}={value}");
                }
            }
        }
        if knob.module == "kvm_amd" {
            println!(
                "  kvm_amd nested={} avic={} (before: nested={} avic={})",
                now["kvm_amd"]["nested"],
                now["kvm_amd"]["avic"],
                before["kvm_amd"]["nested"],
                before["kvm_amd"]["avic"]
            );
        }
        assert_eq!(host.node_state(), node, "/dev/kvm as it was");
    }
    let out = s.restore().unwrap();
    reloads += out.reloaded.len().min(1);
    assert_eq!(all_params(&host), before, "every KVM parameter as it was");
    assert_eq!(host.node_state(), node);
    assert!(!state.exists());
    assert_eq!(
        fs::read_to_string("/proc/sys/kernel/tainted").unwrap(),
        tainted,
        "the reloads passed no parameter the kernel calls unsafe"
    );
    println!("{reloads} reload(s); all parameters and /dev/kvm as before");
}

/// The child of the kill -9 test: switches `knob`, says so, and waits to be killed.
fn child(state: &Path) -> ! {
    let knob = spec(&std::env::var("EXITLAB_KNOB_TEST_KNOB").unwrap());
    let value = std::env::var("EXITLAB_KNOB_TEST_VALUE").unwrap();
    let mut s = ParamSession::open(Host::real(), Modprobe::find(), &knob, state).unwrap();
    let a = s.set(&value).unwrap();
    // Straight to stdout, flushed: the test harness may capture println!.
    let mut out = std::io::stdout();
    writeln!(out, "\nSWITCHED {} {:?}", a.in_force, a.took).unwrap();
    out.flush().unwrap();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

#[test]
fn a_killed_process_s_change_is_restored_at_the_next_start() {
    if let Some(state) = std::env::var_os(CHILD_ENV) {
        child(Path::new(&state));
    }
    let _g = HOST.lock().unwrap_or_else(|e| e.into_inner());
    let host = Host::real();
    // The reload knob where the host can reload; a run-time write where it can only
    // write; else the refusal.
    let knob = reload_knob();
    let (knob, facts) = match inspect(&host, &knob).check(&Modprobe::find()) {
        Ok(()) => (knob.clone(), inspect(&host, &knob)),
        Err(_) => {
            let write = spec("kvm.halt_poll_ns");
            match can_switch(&host, &write, "the kill -9 restore") {
                Some(f) => (write, f),
                None => return,
            }
        }
    };
    let original = facts.value.clone().unwrap();
    let other = match original.as_str() {
        "Y" => "0",
        "N" => "1",
        "0" => "100000",
        _ => "0",
    };
    let before = all_params(&host);
    let node: Option<NodeState> = host.node_state();
    let state = state_path("kill9");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_process_s_change_is_restored_at_the_next_start",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &state)
        .env("EXITLAB_KNOB_TEST_KNOB", knob.to_string())
        .env("EXITLAB_KNOB_TEST_VALUE", other)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let child_pid = child.id();
    // The child's lines come through a thread, so that a child that never says it
    // switched fails the test rather than hangs it (the bound is no measurement: the
    // child needs a few seconds, in the L1 too).
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The harness's `test NAME ... ` has no line end: the word may come after it.
            if let Some(at) = line.find("SWITCHED ") {
                let _ = tx.send(line[at + "SWITCHED ".len()..].to_string());
                return;
            }
        }
    });
    let switched = match rx.recv_timeout(std::time::Duration::from_secs(600)) {
        Ok(s) => s,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            // Whatever the child changed goes back before the test fails.
            let p = restore_pending(&host, &mut Modprobe::find(), &state);
            panic!(
                "the child did not say it switched {knob} ({e}); its stderr is above; \
                 restore: {p:?}"
            );
        }
    };
    println!("child {child_pid} switched {knob} {original} -> {switched}; killing it with SIGKILL");
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
    let saved = SavedState::read(&state)
        .unwrap()
        .expect("the killed child's state file");
    assert_eq!(saved.owner_pid, child_pid);
    let now = module_facts(&host, &knob.module).params[&knob.param].clone();
    assert!(
        exitlab_host::param_spec::same_value(other, &now),
        "{knob} still switched after the kill: {now}"
    );
    let mut loader = Modprobe::find();
    let loader: &mut dyn ModuleLoader = &mut loader;
    let p = restore_pending(&host, loader, &state).expect("a restore was pending");
    println!("restore_pending: {}", p.line());
    assert!(matches!(p, Pending::Restored(_)), "{p:?}");
    assert!(
        p.line().contains(&format!("exitlab pid {child_pid}")),
        "{}",
        p.line()
    );
    assert_eq!(all_params(&host), before, "every KVM parameter as it was");
    assert_eq!(host.node_state(), node, "/dev/kvm as it was");
    assert!(!state.exists());
}

#[test]
fn a_process_holding_dev_kvm_is_named_and_this_one_s_own_file_is_not_a_user() {
    let _g = HOST.lock().unwrap_or_else(|e| e.into_inner());
    let host = Host::real();
    let knob = spec("kvm.halt_poll_ns");
    let users = |facts: &ParamFacts| -> Vec<String> {
        facts
            .refusals(&Modprobe::find())
            .into_iter()
            .filter(|e| matches!(e, KnobError::InUse { .. }))
            .map(|e| e.to_string())
            .collect()
    };
    let kvm = match fs::File::open("/dev/kvm") {
        Ok(f) => f,
        Err(e) => {
            // No KVM to hold: nobody can be named.
            println!("/dev/kvm cannot be opened here ({e}): no holder to name");
            assert!(users(&inspect(&host, &knob)).is_empty());
            return;
        }
    };
    // Another process holding /dev/kvm (a sleep given it as its standard input).
    let mut other = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::from(kvm.try_clone().unwrap()))
        .spawn()
        .unwrap();
    drop(kvm);
    let facts = inspect(&host, &knob);
    let named = users(&facts);
    other.kill().unwrap();
    other.wait().unwrap();
    println!("with sleep {} holding /dev/kvm: {named:?}", other.id());
    assert_eq!(named.len(), 1, "{named:?}");
    assert!(
        named[0].contains(&format!("pid {} (sleep) holds /dev/kvm", other.id())),
        "{}",
        named[0]
    );
    // This process's own /dev/kvm is no other user (the module's reference count is
    // explained by it), but a reload cannot wait for it to be closed.
    let own = fs::File::open("/dev/kvm").unwrap();
    for knob in [knob.clone(), reload_knob()] {
        let facts = inspect(&host, &knob);
        if !facts.module.loaded || !facts.exists {
            continue;
        }
        assert!(facts.own.is_some(), "this process's /dev/kvm is seen");
        let u = users(&facts);
        println!(
            "{knob} (writable: {}) while this process holds /dev/kvm: {u:?}",
            facts.writable
        );
        if facts.writable {
            assert_eq!(u, Vec::<String>::new());
        } else {
            assert_eq!(u.len(), 1, "{u:?}");
            assert!(u[0].contains("this process"), "{u:?}");
        }
    }
    drop(own);
    if facts.module.loaded && !facts.paravirtual {
        println!("notes of {knob}: {:?}", facts.notes());
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap();
        let nested = cpuinfo.contains(" hypervisor") && cpuinfo.contains(" svm")
            || cpuinfo.contains(" hypervisor") && cpuinfo.contains(" vmx");
        assert_eq!(facts.nested, nested);
        assert_eq!(facts.notes().len(), usize::from(nested));
    }
}

#[test]
fn build_ids_of_the_kernel_and_the_loaded_modules() {
    let host = Host::real();
    let ids = exitlab_host::buildid::build_ids(
        &host.sys,
        &exitlab_host::modules::kvm_modules(&host.sys_module()),
    );
    let kernel = ids
        .kernel
        .clone()
        .expect("/sys/kernel/notes holds a build ID");
    println!("kernel build ID {kernel}");
    for m in exitlab_host::modules::kvm_modules(&host.sys_module()) {
        let notes = host.module_dir(&m).join("notes/.note.gnu.build-id");
        // A loadable module has its own notes, a built-in one is part of the kernel.
        assert_eq!(ids.modules.contains_key(&m), notes.exists(), "{m}");
        if let Some(id) = ids.modules.get(&m) {
            println!("{m} build ID {id}");
            assert!(
                id.len() >= 16 && id.chars().all(|c| c.is_ascii_hexdigit()),
                "{id}"
            );
            assert_ne!(id, &kernel);
        }
    }
    let survey = exitlab_host::survey();
    assert_eq!(survey.build_ids, ids);
    let json = serde_json::to_value(&survey).unwrap();
    assert_eq!(json["build_ids"]["kernel"], kernel.as_str());
}
