//! The subcommands, one module each. Each returns the exit code on success or a [`Failure`].
//!
//! [`Failure`]: crate::exit::Failure

pub mod docs;
pub mod elect;
pub mod hold;
pub mod init;
pub mod inspect;
pub mod leader;
pub mod list;
pub mod prune;
pub mod run;
pub mod try_once;
