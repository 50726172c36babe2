//! The subcommands, one module each. Each returns the exit code on success or a [`Failure`].
//!
//! [`Failure`]: crate::exit::Failure

pub mod hold;
pub mod inspect;
pub mod run;
pub mod try_once;
