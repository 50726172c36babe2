//! The primitive a run's workers contend for, and each worker's part in it.
//!
//! - `mutex`: every worker takes the lock (one holder).
//! - `semaphore`: every worker takes one of [`PERMITS`] permits (up to that many holders).
//! - `rwlock`: even workers read, odd ones write (readers together, a writer alone).
//! - `election`: every worker campaigns; the leader's term is its token.
//!
//! What the fenced register accepts for each part ([`Role::class`], see `register.rs`), and what
//! the checker counts as two in at once ([`Role::conflicts`], see `check.rs`), follow from it.

use std::fmt;

use anyhow::{bail, Result};

/// The permits of a semaphore run.
pub const PERMITS: u32 = 2;

/// What the workers of a run contend for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Primitive {
    /// A lock.
    #[default]
    Mutex,
    /// A semaphore of [`PERMITS`] permits.
    Semaphore,
    /// A read-write lock.
    Rwlock,
    /// An election.
    Election,
}

impl Primitive {
    /// The primitives besides the mutex, which the fault runs cover already.
    pub const OTHERS: [Primitive; 3] = [Primitive::Semaphore, Primitive::Rwlock, Primitive::Election];

    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Primitive::Mutex => "mutex",
            Primitive::Semaphore => "semaphore",
            Primitive::Rwlock => "rwlock",
            Primitive::Election => "election",
        }
    }

    /// The part of worker number `index`.
    pub fn role(self, index: usize) -> Role {
        match self {
            Primitive::Mutex => Role::Mutex,
            Primitive::Semaphore => Role::Permit(PERMITS),
            Primitive::Rwlock if index.is_multiple_of(2) => Role::Read,
            Primitive::Rwlock => Role::Write,
            Primitive::Election => Role::Leader,
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One worker's part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Takes the mutex.
    Mutex,
    /// Takes one permit of a semaphore of this many.
    Permit(u32),
    /// Takes the read side of the read-write lock.
    Read,
    /// Takes the write side.
    Write,
    /// Campaigns in the election.
    Leader,
}

impl Role {
    /// As the worker's `--role` takes it: `mutex`, `permit:N`, `read`, `write`, `leader`.
    pub fn arg(self) -> String {
        match self {
            Role::Mutex => "mutex".into(),
            Role::Permit(n) => format!("permit:{n}"),
            Role::Read => "read".into(),
            Role::Write => "write".into(),
            Role::Leader => "leader".into(),
        }
    }

    /// Parses [`Role::arg`]'s form.
    pub fn parse(s: &str) -> Result<Role> {
        Ok(match s {
            "mutex" => Role::Mutex,
            "read" => Role::Read,
            "write" => Role::Write,
            "leader" => Role::Leader,
            _ => match s.strip_prefix("permit:").map(str::parse::<u32>) {
                Some(Ok(n)) if n > 0 => Role::Permit(n),
                _ => bail!("{s:?}: expected mutex, permit:N, read, write or leader"),
            },
        })
    }

    /// The register's rule for this part's writes: `x` (exclusive: at least every token accepted
    /// so far), `r` (shared: at least every exclusive token accepted so far), `pN` (one of N: among
    /// the N highest tokens of the holders that have not left).
    pub fn class(self) -> String {
        match self {
            Role::Mutex | Role::Write | Role::Leader => "x".into(),
            Role::Read => "r".into(),
            Role::Permit(n) => format!("p{n}"),
        }
    }

    /// How many holders it conflicts with ([`Role::conflicts`]) may be inside when this part is
    /// granted: N − 1 other permits for a permit of N, none for the rest (a reader: no writer).
    pub fn room(self) -> usize {
        match self {
            Role::Permit(n) => usize::try_from(n).unwrap_or(usize::MAX).saturating_sub(1),
            _ => 0,
        }
    }

    /// Whether it is alone when held: the mutex, a writer, a leader.
    pub fn exclusive(self) -> bool {
        matches!(self, Role::Mutex | Role::Write | Role::Leader)
    }

    /// Whether a holder in part `self` and one in part `other` may not be inside at once beyond
    /// the capacity: readers do not conflict with readers, everything else does.
    pub fn conflicts(self, other: Role) -> bool {
        !(self == Role::Read && other == Role::Read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_and_bad_ones_are_refused() {
        for role in [Role::Mutex, Role::Permit(3), Role::Read, Role::Write, Role::Leader] {
            assert_eq!(Role::parse(&role.arg()).unwrap(), role);
        }
        for bad in ["", "permit:0", "permit:x", "reader"] {
            assert!(Role::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Primitive::Rwlock.role(0), Role::Read);
        assert_eq!(Primitive::Rwlock.role(1), Role::Write);
    }
}
