//! The VMM's error type.

/// Errors of the VMM core. Each message says what went wrong and what to do.
#[derive(Debug, thiserror::Error)]
pub enum VmmError {
    /// /dev/kvm does not exist.
    #[error("/dev/kvm does not exist: KVM is not available on this host; load the kvm_intel or kvm_amd module (and enable virtualization in the firmware), or run on a host that offers KVM")]
    KvmMissing,
    /// /dev/kvm exists but cannot be opened.
    #[error("/dev/kvm cannot be opened ({0}): run as root or add your user to the group that owns /dev/kvm (usually `kvm`)")]
    KvmPermission(std::io::Error),
    /// /dev/kvm opened but failed otherwise.
    #[error("/dev/kvm cannot be used: {0}")]
    KvmOpen(std::io::Error),
    /// The host's KVM API version is not 12.
    #[error("KVM API version {0} is not supported (exitlab needs 12)")]
    ApiVersion(i32),
    /// A KVM ioctl failed.
    #[error("{0} failed: {1}")]
    Kvm(&'static str, kvm_ioctls::Error),
    /// A capability the requested configuration needs is missing.
    #[error("this host's KVM lacks {0}: {1}")]
    MissingCap(&'static str, &'static str),
    /// Guest memory could not be set up.
    #[error("guest memory: {0}")]
    Memory(String),
    /// A device could not be registered.
    #[error("device bus: {0}")]
    Bus(#[from] crate::bus::BusError),
    /// The configuration is invalid.
    #[error("invalid VM configuration: {0}")]
    Config(String),
    /// An OS call failed.
    #[error("{0}: {1}")]
    Os(&'static str, std::io::Error),
}
