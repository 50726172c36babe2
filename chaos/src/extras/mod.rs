//! The sections beyond the fault runs: leaks, load, soak, bad input, and the Markdown page.

mod bad_input;
mod leaks;
mod load;
pub mod markdown;
mod operator;
mod probe;
mod soak;

pub use bad_input::{bad_input, BadInput};
pub use leaks::{leaks, Leak};
pub use load::{load, Load};
pub use operator::{operator_faults, OperatorFault};
pub use soak::{soak, Soak, SOAK_TTL};
