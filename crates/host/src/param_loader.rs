//! Unloading and loading kernel modules, behind a small trait: the real one runs
//! `modprobe` from the running kernel's module tree; the unit tests use a fake one that
//! edits a made-up sysfs tree.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a module cannot be loaded again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoaderProblem {
    /// There is no `modprobe`.
    NoModprobe,
    /// `modprobe` does not find the module's file; what it said.
    NoModuleFile(String),
}

/// Unloads and loads kernel modules.
pub trait ModuleLoader {
    /// Whether `module` can be loaded again later: the tool is there and finds the
    /// module's file for the running kernel. Changes nothing.
    fn check(&self, module: &str) -> Result<(), LoaderProblem>;
    /// Unloads `module`; the error says what the tool said.
    fn unload(&mut self, module: &str) -> Result<(), String>;
    /// Loads `module` with `params` (`name=value` each); the error says what the tool
    /// said.
    fn load(&mut self, module: &str, params: &[(String, String)]) -> Result<(), String>;
}

/// The real loader: `modprobe`, which takes the module from the running kernel's tree
/// (`/lib/modules/$(uname -r)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Modprobe {
    /// The program, `None` when there is none.
    pub program: Option<PathBuf>,
}

impl Modprobe {
    /// Finds `modprobe` on `PATH`, or in `/usr/sbin` or `/sbin` (often not on a user's
    /// `PATH`).
    pub fn find() -> Modprobe {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let program = std::env::split_paths(&path)
            .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/sbin")])
            .map(|d| d.join("modprobe"))
            .find(|p| p.is_file());
        Modprobe { program }
    }

    fn run(&self, args: &[String]) -> Result<String, String> {
        let program = self
            .program
            .as_deref()
            .ok_or_else(|| "modprobe is missing".to_string())?;
        run_tool(program, args)
    }
}

/// Runs `program args`; its standard output, or what went wrong.
fn run_tool(program: &Path, args: &[String]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{} could not be started: {e}", program.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        let err = err.trim();
        Err(format!(
            "{} {} exited with {}{}{}",
            program.display(),
            args.join(" "),
            out.status,
            if err.is_empty() { "" } else { ": " },
            err
        ))
    }
}

impl ModuleLoader for Modprobe {
    fn check(&self, module: &str) -> Result<(), LoaderProblem> {
        if self.program.is_none() {
            return Err(LoaderProblem::NoModprobe);
        }
        // `--show-depends` lists the files it would insert without inserting them, and
        // fails when the module is not in the running kernel's tree.
        let out = self
            .run(&["--show-depends".to_string(), module.to_string()])
            .map_err(LoaderProblem::NoModuleFile)?;
        let file = out.lines().last().and_then(|l| l.strip_prefix("insmod "));
        match file {
            Some(f) if Path::new(f.trim()).is_file() => Ok(()),
            Some(f) => Err(LoaderProblem::NoModuleFile(format!(
                "modprobe lists {}, which does not exist",
                f.trim()
            ))),
            None => Err(LoaderProblem::NoModuleFile(format!(
                "modprobe --show-depends {module} names no module file: {}",
                out.trim()
            ))),
        }
    }

    fn unload(&mut self, module: &str) -> Result<(), String> {
        self.run(&["-r".to_string(), module.to_string()]).map(drop)
    }

    fn load(&mut self, module: &str, params: &[(String, String)]) -> Result<(), String> {
        let mut args = vec![module.to_string()];
        args.extend(params.iter().map(|(k, v)| format!("{k}={v}")));
        self.run(&args).map(drop)
    }
}

#[cfg(test)]
pub(crate) mod fake {
    //! A loader that edits a made-up sysfs tree as the kernel would.

    use std::collections::BTreeMap;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::PathBuf;
    use std::time::Duration;

    use super::{LoaderProblem, ModuleLoader};
    use crate::param_host::{Host, NodeState};
    use crate::testutil::TempDir;

    /// One parameter of a fake module: its default and whether it is writable.
    #[derive(Debug, Clone)]
    pub(crate) struct FakeParam {
        pub(crate) default: String,
        pub(crate) writable: bool,
    }

    /// A fake module.
    #[derive(Debug, Clone, Default)]
    pub(crate) struct FakeModule {
        pub(crate) params: BTreeMap<String, FakeParam>,
        /// Modules it needs (loaded first by a load, as modprobe does).
        pub(crate) needs: Vec<String>,
    }

    /// What a module does with a value it is given: keeps it, keeps its own (a feature
    /// this CPU lacks), or refuses it (`Err`: modprobe fails). Bool parameters then show
    /// it as Y/N.
    pub(crate) type Keeps = fn(&str, &str, &str) -> Result<String, String>;

    /// Takes every value as given.
    pub(crate) fn plain(_module: &str, _param: &str, value: &str) -> Result<String, String> {
        Ok(value.to_string())
    }

    /// A loader over `host`'s tree.
    pub(crate) struct FakeLoader {
        pub(crate) host: Host,
        pub(crate) modules: BTreeMap<String, FakeModule>,
        pub(crate) keeps: Keeps,
        /// `modprobe -r M` also removes what M needed and nothing else uses (as kmod
        /// does).
        pub(crate) remove_unused_deps: bool,
        /// Whether a load recreates `/dev/kvm` (0600 root, as devtmpfs does).
        pub(crate) creates_node: bool,
        /// Every call, e.g. `unload kvm_amd`, `load kvm_amd nested=0 npt=0`.
        pub(crate) calls: Vec<String>,
        /// What [`ModuleLoader::check`] answers.
        pub(crate) problem: Option<LoaderProblem>,
        /// Values a module takes whatever it is given: (module, parameter) -> value.
        pub(crate) forced: BTreeMap<(String, String), String>,
        /// A file whose existence each unload and load records in `saw`.
        pub(crate) watch: Option<PathBuf>,
        /// Whether `watch` existed at each unload and load.
        pub(crate) saw: Vec<bool>,
    }

    impl FakeLoader {
        pub(crate) fn new(host: &Host, modules: BTreeMap<String, FakeModule>) -> Self {
            FakeLoader {
                host: host.clone(),
                modules,
                keeps: plain,
                remove_unused_deps: true,
                creates_node: true,
                calls: Vec::new(),
                problem: None,
                forced: BTreeMap::new(),
                watch: None,
                saw: Vec::new(),
            }
        }

        fn record(&mut self, call: String) {
            self.calls.push(call);
            if let Some(w) = &self.watch {
                self.saw.push(w.exists());
            }
        }

        fn loaded(&self, m: &str) -> bool {
            self.host.module_dir(m).is_dir()
        }

        /// Writes `m` into the tree with `given` over its defaults.
        fn insert(&mut self, m: &str, given: &BTreeMap<String, String>) -> Result<(), String> {
            let module = self
                .modules
                .get(m)
                .cloned()
                .ok_or(format!("no module {m}"))?;
            let mut values = BTreeMap::new();
            for (p, fp) in &module.params {
                let v = match given.get(p) {
                    Some(v) => (self.keeps)(m, p, v)?,
                    None => fp.default.clone(),
                };
                // A bool parameter (its default shows Y or N) shows what it holds as Y/N.
                let v = match crate::param_spec::parse_bool(&v) {
                    Some(b) if fp.default == "Y" || fp.default == "N" => {
                        if b { "Y" } else { "N" }.to_string()
                    }
                    None if fp.default == "Y" || fp.default == "N" => {
                        return Err(format!("{m}: invalid value {v} for bool parameter {p}"))
                    }
                    _ => v,
                };
                let forced = self.forced.get(&(m.to_string(), p.clone()));
                values.insert(p.clone(), forced.cloned().unwrap_or(v));
            }
            for need in &module.needs {
                if !self.loaded(need) {
                    self.insert(need, &BTreeMap::new())?;
                }
            }
            let dir = self.host.module_dir(m);
            fs::create_dir_all(dir.join("parameters")).map_err(|e| e.to_string())?;
            fs::create_dir_all(dir.join("holders")).map_err(|e| e.to_string())?;
            fs::write(dir.join("initstate"), "live\n").map_err(|e| e.to_string())?;
            fs::write(dir.join("refcnt"), "0\n").map_err(|e| e.to_string())?;
            for (p, v) in values {
                let path = dir.join("parameters").join(&p);
                fs::write(&path, format!("{v}\n")).map_err(|e| e.to_string())?;
                let mode = if module.params[&p].writable {
                    0o644
                } else {
                    0o444
                };
                fs::set_permissions(&path, fs::Permissions::from_mode(mode))
                    .map_err(|e| e.to_string())?;
            }
            for need in &module.needs {
                let holders = self.host.module_dir(need).join("holders");
                fs::write(holders.join(m), "").map_err(|e| e.to_string())?;
                let refcnt = self.host.module_dir(need).join("refcnt");
                let n: u32 = crate::read_trimmed(&refcnt)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                fs::write(refcnt, format!("{}\n", n + 1)).map_err(|e| e.to_string())?;
            }
            if self.creates_node && m != "kvm" {
                let node = self.host.kvm_node();
                fs::create_dir_all(&self.host.dev).map_err(|e| e.to_string())?;
                fs::write(&node, "").map_err(|e| e.to_string())?;
                fs::set_permissions(&node, fs::Permissions::from_mode(0o600))
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }

        fn remove(&mut self, m: &str) -> Result<(), String> {
            let dir = self.host.module_dir(m);
            if fs::read_dir(dir.join("holders")).map_or(0, |d| d.count()) > 0 {
                return Err(format!("modprobe: FATAL: Module {m} is in use."));
            }
            fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
            let _ = fs::remove_file(self.host.kvm_node());
            let needs = self
                .modules
                .get(m)
                .map(|f| f.needs.clone())
                .unwrap_or_default();
            for need in needs {
                let ndir = self.host.module_dir(&need);
                let _ = fs::remove_file(ndir.join("holders").join(m));
                let refcnt = ndir.join("refcnt");
                let n: u32 = crate::read_trimmed(&refcnt)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1);
                let _ = fs::write(&refcnt, format!("{}\n", n.saturating_sub(1)));
                if self.remove_unused_deps && n <= 1 {
                    self.remove(&need)?;
                }
            }
            Ok(())
        }
    }

    impl ModuleLoader for FakeLoader {
        fn check(&self, _module: &str) -> Result<(), LoaderProblem> {
            self.problem.clone().map_or(Ok(()), Err)
        }

        fn unload(&mut self, module: &str) -> Result<(), String> {
            self.record(format!("unload {module}"));
            if !self.loaded(module) {
                return Err(format!("modprobe: FATAL: Module {module} is not loaded"));
            }
            self.remove(module)
        }

        fn load(&mut self, module: &str, params: &[(String, String)]) -> Result<(), String> {
            let mut call = format!("load {module}");
            for (k, v) in params {
                call += &format!(" {k}={v}");
            }
            self.record(call);
            if self.loaded(module) {
                return Ok(());
            }
            self.insert(module, &params.iter().cloned().collect())
        }
    }

    /// The start time the fixtures give this process.
    pub(crate) const OWN_START: u64 = 1000;

    /// A made-up host with `kvm` and a vendor module (`kvm_amd` or `kvm_intel`) loaded as
    /// modules, `/dev/kvm` (a plain file) mode 0660, this process in `/proc`, and a fake
    /// loader over it.
    pub(crate) struct Fixture {
        pub(crate) root: TempDir,
        pub(crate) host: Host,
        pub(crate) loader: FakeLoader,
        pub(crate) state: PathBuf,
        /// `/dev/kvm` at the start.
        pub(crate) node: NodeState,
    }

    fn param(default: &str, writable: bool) -> FakeParam {
        FakeParam {
            default: default.to_string(),
            writable,
        }
    }

    /// `kvm` and a vendor module (`kvm_amd` or `kvm_intel`) as the fake loader knows them.
    pub(crate) fn modules(vendor: &str) -> BTreeMap<String, FakeModule> {
        let mut modules = BTreeMap::new();
        let kvm = FakeModule {
            params: [
                ("halt_poll_ns", param("200000", true)),
                ("tdp_mmu", param("Y", false)),
                // Its default differs from what the host runs with: a reload must pass it.
                ("nx_huge_pages", param("auto", false)),
                // A value that cannot be passed: left out of a load.
                ("unset_string", param("(null)", false)),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
            needs: Vec::new(),
        };
        modules.insert("kvm".to_string(), kvm);
        let vendor_params: &[(&str, FakeParam)] = if vendor == "kvm_intel" {
            &[
                ("enable_ipiv", param("N", false)),
                ("ept", param("Y", false)),
                ("nested", param("Y", false)),
            ]
        } else {
            &[
                ("npt", param("Y", false)),
                ("nested", param("1", false)),
                ("avic", param("N", false)),
                ("pause_filter_count", param("3000", false)),
            ]
        };
        modules.insert(
            vendor.to_string(),
            FakeModule {
                params: vendor_params
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.clone()))
                    .collect(),
                needs: vec!["kvm".to_string()],
            },
        );
        modules
    }

    pub(crate) fn fixture(vendor: &str) -> Fixture {
        let root = TempDir::new("knob");
        let mut host = Host::under(&root.0);
        host.dev_wait = Duration::from_millis(50);
        let modules = modules(vendor);
        let mut loader = FakeLoader::new(&host, modules);
        loader
            .load("kvm", &[("nx_huge_pages".to_string(), "N".to_string())])
            .unwrap();
        // The host loaded the vendor module with nested off (its default is on).
        loader
            .load(vendor, &[("nested".to_string(), "0".to_string())])
            .unwrap();
        loader.calls.clear();
        // Root gives the node a group of its own, to see it come back; anyone else keeps
        // the owner and group the file was created with.
        let created = host
            .node_state()
            .expect("the vendor module's load created /dev/kvm");
        let node = if Host::real().euid == 0 {
            NodeState {
                uid: 0,
                gid: 4321,
                mode: 0o660,
            }
        } else {
            NodeState {
                mode: 0o660,
                ..created
            }
        };
        std::os::unix::fs::chown(host.kvm_node(), Some(node.uid), Some(node.gid)).unwrap();
        fs::set_permissions(host.kvm_node(), fs::Permissions::from_mode(node.mode)).unwrap();
        process(&root, host.pid, "exitlab", OWN_START);
        let state = root.0.join("run/exitlab/host-params.json");
        Fixture {
            root,
            host,
            loader,
            state,
            node,
        }
    }

    /// Process `pid` named `comm`, started at `start`, in the fake `/proc` under `root`.
    pub(crate) fn process(root: &TempDir, pid: u32, comm: &str, start: u64) {
        root.write(
            &format!("proc/{pid}/stat"),
            &format!("{pid} ({comm}) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {start} 1 1\n"),
        );
        root.write(&format!("proc/{pid}/comm"), &format!("{comm}\n"));
    }
}
