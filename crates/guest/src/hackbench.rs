//! The Linux workload: a hackbench-style messaging load packed as `/init` of an
//! initramfs (source: `initrd/hackbench.c`, built static by this crate's build script).
//!
//! Its interface is the kernel command line in and the serial console out: [`Params`]
//! renders the `HB_*=` words Linux hands to init as environment variables, and
//! [`parse`] reads the `exitlab-hackbench:` lines the program prints. The program ends
//! the VM through the debug-exit port (0xF4) with 0 when every process finished its
//! share and 1 otherwise.

use core::fmt;

/// The initramfs: a newc cpio archive with `/dev/console` and the static `/init`.
pub static INITRD: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/hackbench-initrd.cpio"));

/// How the senders reach the receivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// A Unix stream socket pair per receiver (hackbench's default).
    Socket,
    /// A pipe per receiver (hackbench `-pipe`).
    Pipe,
}

/// The load: `groups` groups of `fds` senders and `fds` receivers; every sender writes
/// `loops` 100-byte messages to every receiver of its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Groups (1..=64).
    pub groups: u32,
    /// Senders and receivers per group (1..=64).
    pub fds: u32,
    /// Messages from each sender to each receiver (1..=1,000,000).
    pub loops: u32,
    /// Sockets or pipes.
    pub channel: Channel,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            groups: 2,
            fds: 5,
            loops: 100,
            channel: Channel::Socket,
        }
    }
}

impl Params {
    /// Messages the run moves in all.
    pub fn messages(&self) -> u64 {
        u64::from(self.groups) * u64::from(self.fds) * u64::from(self.fds) * u64::from(self.loops)
    }
}

/// The command-line words that set the parameters (`HB_GROUPS=2 HB_FDS=5 ...`).
impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HB_GROUPS={} HB_FDS={} HB_LOOPS={} HB_MODE={}",
            self.groups,
            self.fds,
            self.loops,
            match self.channel {
                Channel::Socket => "socket",
                Channel::Pipe => "pipe",
            }
        )
    }
}

/// What a completed run printed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    /// CPUs the program could run on (its affinity mask inside the guest).
    pub cpus: u32,
    /// Messages moved.
    pub messages: u64,
    /// Seconds from releasing the senders to the last process finishing (guest clock).
    pub seconds: f64,
    /// Processes that did not finish their share.
    pub failed: u64,
}

/// Why the console output holds no result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// The program never started: Linux did not reach init.
    NotStarted,
    /// The program started but printed no result (it reported an error, or the run
    /// ended first).
    NoResult,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ParseError::NotStarted => "the workload never started: Linux did not reach init",
            ParseError::NoResult => "the workload started but printed no result",
        })
    }
}

const PREFIX: &str = "exitlab-hackbench: ";

/// The value of `key=` among the whitespace-separated words of `line`.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
}

/// Reads the result from the console output of a run.
pub fn parse(console: &str) -> Result<Outcome, ParseError> {
    let mut lines = console
        .lines()
        .filter_map(|l| l.split_once(PREFIX).map(|(_, rest)| rest));
    let start = lines
        .clone()
        .find(|l| l.starts_with("start "))
        .ok_or(ParseError::NotStarted)?;
    let cpus = field(start, "cpus")
        .and_then(|v| v.parse().ok())
        .ok_or(ParseError::NotStarted)?;
    let result = lines
        .find(|l| l.starts_with("messages="))
        .ok_or(ParseError::NoResult)?;
    let num = |k| field(result, k).ok_or(ParseError::NoResult);
    Ok(Outcome {
        cpus,
        messages: num("messages")?.parse().map_err(|_| ParseError::NoResult)?,
        seconds: num("time")?.parse().map_err(|_| ParseError::NoResult)?,
        failed: num("failed")?.parse().map_err(|_| ParseError::NoResult)?,
    })
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::string::ToString;
    use std::vec::Vec;

    use super::*;

    #[test]
    fn params_render_as_the_words_init_reads() {
        let p = Params {
            groups: 4,
            fds: 10,
            loops: 50,
            channel: Channel::Pipe,
        };
        assert_eq!(
            p.to_string(),
            "HB_GROUPS=4 HB_FDS=10 HB_LOOPS=50 HB_MODE=pipe"
        );
        assert_eq!(p.messages(), 4 * 10 * 10 * 50);
    }

    #[test]
    fn parses_a_completed_run_among_kernel_messages() {
        let out = "[    1.0] Run /init as init process\r\n\
                   exitlab-hackbench: start mode=socket groups=2 fds=5 loops=100 cpus=2\r\n\
                   [    1.2] random: crng init done\r\n\
                   exitlab-hackbench: messages=5000 time=0.045851 s failed=0\r\n";
        assert_eq!(
            parse(out),
            Ok(Outcome {
                cpus: 2,
                messages: 5000,
                seconds: 0.045851,
                failed: 0
            })
        );
    }

    #[test]
    fn says_how_far_a_run_got() {
        assert_eq!(parse("Linux version 6.1\n"), Err(ParseError::NotStarted));
        assert_eq!(
            parse(
                "exitlab-hackbench: start mode=pipe groups=1 fds=1 loops=1 cpus=1\n\
                   exitlab-hackbench: error: fork: Resource temporarily unavailable\n"
            ),
            Err(ParseError::NoResult)
        );
        assert_eq!(
            parse("exitlab-hackbench: start cpus=x\n"),
            Err(ParseError::NotStarted)
        );
    }

    #[test]
    fn the_initrd_holds_init_and_the_console_node() {
        let mut rest = INITRD;
        let mut names = Vec::new();
        loop {
            let r = cpio::newc::Reader::new(rest).expect("a newc entry");
            let e = r.entry();
            if e.is_trailer() {
                break;
            }
            names.push((
                e.name().to_string(),
                e.mode(),
                e.rdev_major(),
                e.rdev_minor(),
            ));
            if e.name() == "init" {
                assert!(e.file_size() > 10_000, "init is a real static program");
            }
            rest = r.finish().unwrap();
        }
        assert_eq!(
            names,
            [
                ("dev".to_string(), 0o040_755, 0, 0),
                ("dev/console".to_string(), 0o020_600, 5, 1),
                ("init".to_string(), 0o100_755, 0, 0),
            ]
        );
    }
}
