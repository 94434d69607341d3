//! The state file that makes a parameter change survive its process: before the first
//! change, a session writes (atomically) who it is (pid and start time, so that a reused
//! pid is told apart), the original value of every parameter of the modules involved,
//! which KVM modules were loaded and `/dev/kvm`'s owner, group and mode. The session
//! removes it once it has put everything back. When a process is killed before that
//! (`kill -9`), the next exitlab to start finds it with [`restore_pending`] and puts the
//! originals back.

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::param_apply::{apply, ModuleValues, Outcome};
use crate::param_error::KnobError;
use crate::param_host::{Host, NodeState};
use crate::param_loader::ModuleLoader;

/// Version of the state file's layout.
pub const STATE_VERSION: u32 = 1;

/// What a session keeps in its state file.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SavedState {
    /// [`STATE_VERSION`].
    pub version: u32,
    /// The process that changes the parameters.
    pub owner_pid: u32,
    /// Its start time (`/proc/PID/stat` field 22): another process with the same pid
    /// started at another time.
    pub owner_start_time: Option<u64>,
    /// The parameter switched, `MODULE.PARAM`.
    pub knob: String,
    /// The modules involved with every original value, in load order.
    pub modules: Vec<ModuleValues>,
    /// The KVM modules loaded at the start.
    pub loaded_modules: Vec<String>,
    /// `/dev/kvm` at the start; `None` when it did not exist.
    pub dev_kvm: Option<NodeState>,
}

impl SavedState {
    /// Writes the state to `path` atomically (a temporary file in the same directory,
    /// synced, then renamed over it), creating the directory.
    pub fn write(&self, path: &Path) -> Result<(), KnobError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        fs::create_dir_all(dir).map_err(|e| KnobError::io("create the directory", dir, e))?;
        let name = path
            .file_name()
            .map_or_else(|| "state".into(), |n| n.to_string_lossy().into_owned());
        let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let text = serde_json::to_string_pretty(self).map_err(|e| KnobError::BadState {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        let written = fs::File::create(&tmp).and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()
        });
        if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
            let _ = fs::remove_file(&tmp);
            return Err(KnobError::io("write the state file", path, e));
        }
        // The rename itself reaches the disk with the directory.
        if let Ok(d) = fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }

    /// Reads the state at `path`; `None` when there is no file.
    pub fn read(path: &Path) -> Result<Option<SavedState>, KnobError> {
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(KnobError::io("read the state file", path, e)),
        };
        let state: SavedState = serde_json::from_str(&text).map_err(|e| KnobError::BadState {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        if state.version != STATE_VERSION {
            return Err(KnobError::BadState {
                path: path.to_path_buf(),
                detail: format!(
                    "layout version {}, this exitlab reads {STATE_VERSION}",
                    state.version
                ),
            });
        }
        Ok(Some(state))
    }

    /// Whether its owner still runs: the pid exists and started when the file says.
    pub fn owner(&self, host: &Host) -> Owner {
        match (host.start_time(self.owner_pid), self.owner_start_time) {
            (None, _) => Owner::Gone,
            (Some(now), Some(then)) if now != then => Owner::PidReused,
            _ => Owner::Alive,
        }
    }

    /// The original values.
    pub fn originals(&self) -> &[ModuleValues] {
        &self.modules
    }
}

/// The owner of a state file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// It still runs.
    Alive,
    /// No process has its pid.
    Gone,
    /// Another process has its pid now.
    PidReused,
}

/// Puts the originals of `saved` back, reading each back; the error lists what could not
/// be restored.
pub fn restore_saved(
    host: &Host,
    loader: &mut dyn ModuleLoader,
    saved: &SavedState,
    path: &Path,
) -> Result<Outcome, KnobError> {
    let outcome =
        apply(host, loader, &saved.modules, saved.dev_kvm.as_ref(), None).map_err(|e| {
            KnobError::RestoreFailed {
                failures: vec![e.to_string()],
                path: path.to_path_buf(),
            }
        })?;
    let mut failures: Vec<String> = outcome
        .after
        .iter()
        .map(|d| {
            format!(
                "{} is {} in force, it was {}",
                d.knob,
                d.found.as_deref().unwrap_or("absent"),
                d.want
            )
        })
        .collect();
    let node = host.node_state();
    if saved.dev_kvm.is_some() && node != saved.dev_kvm {
        failures.push(format!(
            "/dev/kvm is {}, it was {}",
            crate::param_host::describe_node(node.as_ref()),
            crate::param_host::describe_node(saved.dev_kvm.as_ref())
        ));
    }
    if failures.is_empty() {
        Ok(outcome)
    } else {
        Err(KnobError::RestoreFailed {
            failures,
            path: path.to_path_buf(),
        })
    }
}

/// What [`restore_pending`] found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    /// The owner was gone: the originals are back and the file is removed.
    Restored(String),
    /// The owner still runs: left alone.
    OwnerAlive(String),
    /// The owner is gone but this process is not root: the restore waits.
    NeedsRoot(String),
    /// The restore failed (the file is kept for the next try), or the file is unreadable.
    Failed(String),
}

impl Pending {
    /// The one line to print.
    pub fn line(&self) -> &str {
        match self {
            Pending::Restored(l)
            | Pending::OwnerAlive(l)
            | Pending::NeedsRoot(l)
            | Pending::Failed(l) => l,
        }
    }
}

/// How the owner of a state file ended, in words.
fn ended(owner: Owner) -> &'static str {
    match owner {
        Owner::PidReused => "ended (its pid is another process's now)",
        Owner::Gone | Owner::Alive => "ended",
    }
}

/// For the next exitlab start: when a state file at `path` was left by a process that is
/// gone (killed before it could restore), puts its original values back, removes it and
/// says what was restored; when its owner still runs, leaves it alone and says so; when
/// this process is not root, says that a restore is pending. `None` when there is no
/// state file.
pub fn restore_pending(host: &Host, loader: &mut dyn ModuleLoader, path: &Path) -> Option<Pending> {
    let saved = match SavedState::read(path) {
        Ok(s) => s?,
        Err(e) => return Some(Pending::Failed(e.to_string())),
    };
    let owner = saved.owner(host);
    let pid = saved.owner_pid;
    if owner == Owner::Alive {
        return Some(Pending::OwnerAlive(format!(
            "exitlab pid {pid} is switching {} now ({}): left alone; it restores the KVM \
             module parameters when it ends",
            saved.knob,
            path.display()
        )));
    }
    if host.euid != 0 {
        return Some(Pending::NeedsRoot(format!(
            "a restore of KVM module parameters is pending: exitlab pid {pid} {} without \
             restoring {} ({}); run exitlab as root to restore them",
            ended(owner),
            saved.knob,
            path.display()
        )));
    }
    // This process takes the restore over: another exitlab starting now sees a live
    // owner, and if this one dies too, the next start tries again.
    let mut mine = saved.clone();
    mine.owner_pid = host.pid;
    mine.owner_start_time = host.start_time(host.pid);
    if let Err(e) = mine.write(path) {
        return Some(Pending::Failed(e.to_string()));
    }
    match restore_saved(host, loader, &saved, path) {
        Ok(outcome) => {
            if let Err(e) = fs::remove_file(path) {
                return Some(Pending::Failed(
                    KnobError::io("remove the state file", path, e).to_string(),
                ));
            }
            Some(Pending::Restored(restored_line(
                owner, &saved, &outcome, path,
            )))
        }
        Err(e) => Some(Pending::Failed(format!(
            "exitlab pid {pid} {} with {} switched: {e}",
            ended(owner),
            saved.knob
        ))),
    }
}

/// The one line saying what a restore put back.
fn restored_line(owner: Owner, saved: &SavedState, outcome: &Outcome, path: &Path) -> String {
    let pid = saved.owner_pid;
    if outcome.before.is_empty() && outcome.reloaded.is_empty() {
        return format!(
            "exitlab pid {pid} {} without restoring {}, but nothing it recorded was changed: \
             state file {} removed",
            ended(owner),
            saved.knob,
            path.display()
        );
    }
    let values: Vec<String> = outcome.before.iter().map(ToString::to_string).collect();
    let mut line = format!(
        "restored what exitlab pid {pid} left switched when it {} ({}): {}",
        ended(owner),
        saved.knob,
        values.join(", ")
    );
    if !outcome.reloaded.is_empty() {
        line += &format!(
            "; reloaded {} in {:.2} s",
            outcome.reloaded.join(", "),
            outcome.took.as_secs_f64()
        );
    }
    if let Some(node) = &saved.dev_kvm {
        line += &format!("; /dev/kvm {node}");
    }
    line
}

/// Whether a restore is pending at `path`, in one line, without doing anything (for
/// `exitlab host`); `None` when there is no state file.
pub fn pending_status(host: &Host, path: &Path) -> Option<String> {
    let saved = match SavedState::read(path) {
        Ok(s) => s?,
        Err(e) => return Some(e.to_string()),
    };
    let owner = saved.owner(host);
    let pid = saved.owner_pid;
    Some(if owner == Owner::Alive {
        format!(
            "exitlab pid {pid} is switching {} now; it restores the KVM module parameters \
             when it ends ({})",
            saved.knob,
            path.display()
        )
    } else {
        format!(
            "a restore of KVM module parameters is pending: exitlab pid {pid} {} without \
             restoring {} ({}); any exitlab command run as root restores them",
            ended(owner),
            saved.knob,
            path.display()
        )
    })
}

/// The default state file ([`crate::param_host::DEFAULT_STATE_PATH`]).
pub fn default_state_path() -> PathBuf {
    PathBuf::from(crate::param_host::DEFAULT_STATE_PATH)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::param_inspect::module_facts;
    use crate::param_loader::fake::{fixture, modules, process, FakeLoader, Fixture};
    use crate::param_session::ParamSession;
    use crate::param_spec::ParamSpec;

    /// What a `kill -9` leaves: a session that switched `knob` to `value` and never
    /// restored (forgotten: its Drop does not run), its state file owned by `pid` with
    /// start time `start`. Returns the loader for the restore.
    fn killed(f: &mut Fixture, knob: &str, value: &str, pid: u32, start: u64) -> FakeLoader {
        let loader = std::mem::replace(&mut f.loader, FakeLoader::new(&f.host, Default::default()));
        let mut s = ParamSession::open(
            f.host.clone(),
            loader,
            &ParamSpec::parse(knob).unwrap(),
            &f.state,
        )
        .unwrap();
        s.set(value).unwrap();
        let mut saved = SavedState::read(&f.state).unwrap().unwrap();
        saved.owner_pid = pid;
        saved.owner_start_time = Some(start);
        saved.write(&f.state).unwrap();
        std::mem::forget(s);
        // The forgotten session's loader edited the same tree: a fresh one does the same.
        FakeLoader::new(&f.host, modules("kvm_amd"))
    }

    fn value(f: &Fixture, module: &str, param: &str) -> String {
        module_facts(&f.host, module).params[param].clone()
    }

    #[test]
    fn a_dead_owner_s_changes_are_restored_at_the_next_start() {
        let mut f = fixture("kvm_amd");
        let mut loader = killed(&mut f, "kvm_amd.npt", "0", 999_999, 5);
        assert_eq!(value(&f, "kvm_amd", "npt"), "N");
        let p = restore_pending(&f.host, &mut loader, &f.state).unwrap();
        let Pending::Restored(line) = &p else {
            panic!("{p:?}")
        };
        // The time the reload took is measured: any figure.
        assert!(
            line.starts_with(
                "restored what exitlab pid 999999 left switched when it ended (kvm_amd.npt): \
                 kvm_amd.npt N -> Y; reloaded kvm, kvm_amd in "
            ),
            "{line}"
        );
        assert!(
            line.ends_with(&format!(" s; /dev/kvm {}", f.node)),
            "{line}"
        );
        assert_eq!(
            loader.calls,
            [
                "unload kvm_amd",
                "load kvm halt_poll_ns=200000 nx_huge_pages=N tdp_mmu=Y",
                "load kvm_amd avic=N nested=0 npt=Y pause_filter_count=3000",
            ]
        );
        assert_eq!(value(&f, "kvm_amd", "npt"), "Y");
        assert_eq!(value(&f, "kvm_amd", "nested"), "0");
        assert_eq!(value(&f, "kvm", "nx_huge_pages"), "N");
        assert_eq!(f.host.node_state(), Some(f.node));
        assert!(!f.state.exists());
        assert_eq!(
            restore_pending(&f.host, &mut loader, &f.state),
            None,
            "nothing left"
        );
    }

    #[test]
    fn a_new_session_restores_what_a_dead_one_left_first() {
        let mut f = fixture("kvm_amd");
        let loader = killed(&mut f, "kvm.halt_poll_ns", "0", 999_999, 5);
        let s = ParamSession::open(
            f.host.clone(),
            loader,
            &ParamSpec::parse("kvm_amd.npt").unwrap(),
            &f.state,
        )
        .unwrap();
        assert_eq!(s.notes().len(), 1, "{:?}", s.notes());
        assert!(
            s.notes()[0].starts_with(
                "restored what exitlab pid 999999 left switched when it ended \
                 (kvm.halt_poll_ns): kvm.halt_poll_ns 0 -> 200000"
            ),
            "{:?}",
            s.notes()
        );
        assert_eq!(value(&f, "kvm", "halt_poll_ns"), "200000");
        assert_eq!(
            s.saved().modules[0].params["halt_poll_ns"],
            "200000",
            "the true original"
        );
        assert!(!f.state.exists());
    }

    #[test]
    fn a_live_owner_is_left_alone() {
        let mut f = fixture("kvm_amd");
        process(&f.root, 4242, "exitlab", 77);
        let mut loader = killed(&mut f, "kvm.halt_poll_ns", "0", 4242, 77);
        let p = restore_pending(&f.host, &mut loader, &f.state).unwrap();
        assert_eq!(
            p,
            Pending::OwnerAlive(format!(
                "exitlab pid 4242 is switching kvm.halt_poll_ns now ({}): left alone; it \
                 restores the KVM module parameters when it ends",
                f.state.display()
            ))
        );
        assert_eq!(value(&f, "kvm", "halt_poll_ns"), "0");
        assert!(f.state.exists());
        assert_eq!(
            pending_status(&f.host, &f.state).unwrap(),
            format!(
                "exitlab pid 4242 is switching kvm.halt_poll_ns now; it restores the KVM module \
                 parameters when it ends ({})",
                f.state.display()
            )
        );
    }

    #[test]
    fn a_reused_pid_is_not_the_owner() {
        let mut f = fixture("kvm_amd");
        // Pid 4242 runs, but it started at 78: the owner started at 77 and is gone.
        process(&f.root, 4242, "bash", 78);
        let mut loader = killed(&mut f, "kvm.halt_poll_ns", "0", 4242, 77);
        let p = restore_pending(&f.host, &mut loader, &f.state).unwrap();
        assert_eq!(
            p,
            Pending::Restored(format!(
                "restored what exitlab pid 4242 left switched when it ended (its pid is another \
                 process's now) (kvm.halt_poll_ns): kvm.halt_poll_ns 0 -> 200000; /dev/kvm {}",
                f.node
            ))
        );
        assert!(loader.calls.is_empty(), "a run-time write: no reload");
        assert_eq!(value(&f, "kvm", "halt_poll_ns"), "200000");
        assert!(!f.state.exists());
    }

    #[test]
    fn not_root_says_a_restore_is_pending() {
        let mut f = fixture("kvm_amd");
        let mut loader = killed(&mut f, "kvm.halt_poll_ns", "0", 999_999, 5);
        f.host.euid = 1000;
        let line = format!(
            "a restore of KVM module parameters is pending: exitlab pid 999999 ended without \
             restoring kvm.halt_poll_ns ({}); run exitlab as root to restore them",
            f.state.display()
        );
        assert_eq!(
            restore_pending(&f.host, &mut loader, &f.state),
            Some(Pending::NeedsRoot(line))
        );
        assert_eq!(value(&f, "kvm", "halt_poll_ns"), "0");
        assert!(f.state.exists());
        assert_eq!(
            pending_status(&f.host, &f.state).unwrap(),
            format!(
                "a restore of KVM module parameters is pending: exitlab pid 999999 ended without \
                 restoring kvm.halt_poll_ns ({}); any exitlab command run as root restores them",
                f.state.display()
            )
        );
    }

    #[test]
    fn an_owner_gone_before_changing_anything_leaves_nothing_to_do() {
        let mut f = fixture("kvm_amd");
        let mut loader = killed(&mut f, "kvm.halt_poll_ns", "200000", 999_999, 5);
        let p = restore_pending(&f.host, &mut loader, &f.state).unwrap();
        assert_eq!(
            p.line(),
            format!(
                "exitlab pid 999999 ended without restoring kvm.halt_poll_ns, but nothing it \
                 recorded was changed: state file {} removed",
                f.state.display()
            )
        );
        assert!(!f.state.exists());
    }

    #[test]
    fn no_file_nothing_to_say_and_a_bad_file_is_named() {
        let f = fixture("kvm_amd");
        let mut loader = FakeLoader::new(&f.host, Default::default());
        assert_eq!(restore_pending(&f.host, &mut loader, &f.state), None);
        assert_eq!(pending_status(&f.host, &f.state), None);
        f.root
            .write("run/exitlab/host-params.json", "{\"version\": 1");
        let p = restore_pending(&f.host, &mut loader, &f.state).unwrap();
        assert!(matches!(p, Pending::Failed(_)));
        assert!(
            p.line().starts_with(&format!(
                "the state file {} cannot be read (",
                f.state.display()
            )),
            "{}",
            p.line()
        );
        assert!(p.line().ends_with(
            "put the KVM module parameters it lists back by hand if needed, and remove it"
        ));
        assert!(f.state.exists(), "left for a person to look at");
    }

    #[test]
    fn the_state_file_is_written_whole() {
        let f = fixture("kvm_amd");
        let saved = SavedState {
            version: STATE_VERSION,
            owner_pid: 1,
            owner_start_time: Some(2),
            knob: "kvm.halt_poll_ns".into(),
            modules: Vec::new(),
            loaded_modules: vec!["kvm".into()],
            dev_kvm: None,
        };
        saved.write(&f.state).unwrap();
        assert_eq!(SavedState::read(&f.state).unwrap(), Some(saved.clone()));
        let names: Vec<String> = fs::read_dir(f.state.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["host-params.json"], "no temporary file left");
        let mut other = saved;
        other.version = 9;
        other.write(&f.state).unwrap();
        let e = SavedState::read(&f.state).unwrap_err();
        assert!(
            e.to_string()
                .contains("layout version 9, this exitlab reads 1"),
            "{e}"
        );
    }
}
