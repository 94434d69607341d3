//! exitlab's guest test kernel and its ABI.
#![no_std]
#[allow(missing_docs)]
pub mod abi {
    include!("abi.rs");
}
