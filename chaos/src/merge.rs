//! `lockchaos merge`: one report out of runs of parts of the suite.
//!
//! The full suite takes about five hours on a 2-core machine. It can be run in parts (`--sections`), each writing
//! its JSON, and the parts merged into the one page `docs/reliability.md` shows. A merged report
//! keeps every row of every part, adds their times, and lists the parts (their sections, the
//! commit each was built from, their times) so that the page says how it was made. Parts must
//! have run with the same settings and must not share a section.

use std::path::Path;

use anyhow::{bail, ensure, Context, Result};

use crate::report::{Part, Report, CHECKS, SECTIONS};

/// Reads the report a `lockchaos run --json` wrote.
pub fn read(path: &Path) -> Result<Report> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("{} is not a lockchaos report", path.display()))
}

/// Merges `parts` (in the order given) into one report.
///
/// # Errors
///
/// No parts; parts of different schemas or settings (quick or not, TTL, workers, repeats); a
/// part that is itself a merge; two parts that ran the same section; a part judged by older
/// checks than this lockchaos makes ([`CHECKS`]: its rows lack the newer ones, which would read
/// as passed).
pub fn merge(parts: Vec<Report>) -> Result<Report> {
    if let Some(old) = parts.iter().find(|p| p.machine.checks < CHECKS) {
        bail!(
            "a part (sections {}, commit {}) was judged by checks version {}, older than this lockchaos's {CHECKS}: \
             run it again",
            old.machine.sections.join(","),
            old.machine.commit.as_deref().unwrap_or("unknown"),
            old.machine.checks
        );
    }
    let mut parts = parts.into_iter();
    let Some(mut merged) = parts.next() else {
        bail!("nothing to merge: name the parts' JSON files");
    };
    ensure!(merged.machine.parts.is_empty(), "a part is itself a merged report");
    merged.machine.parts.push(part_of(&merged));
    for p in parts {
        let (a, b) = (&merged.machine, &p.machine);
        ensure!(
            merged.schema == p.schema,
            "schemas differ: {} and {}",
            merged.schema,
            p.schema
        );
        ensure!(b.parts.is_empty(), "a part is itself a merged report");
        let same = (a.quick, a.ttl_ms, a.workers, a.repeats, a.failovers)
            == (b.quick, b.ttl_ms, b.workers, b.repeats, b.failovers);
        ensure!(
            same,
            "the parts ran with different settings (quick, TTL, workers or repeats)"
        );
        if let Some(twice) = b.sections.iter().find(|s| a.sections.contains(s)) {
            bail!("two parts ran the section `{twice}`");
        }
        merged.machine.parts.push(part_of(&p));
        merged.machine.seconds += b.seconds;
        let sections: Vec<String> = merged.machine.sections.iter().chain(&b.sections).cloned().collect();
        merged.machine.sections = SECTIONS
            .iter()
            .filter(|s| sections.iter().any(|x| x == *s))
            .map(|s| (*s).to_owned())
            .collect();
        if merged.machine.commit != b.commit {
            merged.machine.commit = None;
        }
        merged.results.extend(p.results);
        merged.primitives.extend(p.primitives);
        merged.guarded.extend(p.guarded);
        merged.fenced.extend(p.fenced);
        merged.self_check = merged.self_check.or(p.self_check);
        merged.leaks.extend(p.leaks);
        merged.load.extend(p.load);
        merged.soak.extend(p.soak);
        merged.bad_input.extend(p.bad_input);
        merged.operator_faults.extend(p.operator_faults);
        merged.notes.extend(p.notes);
    }
    Ok(merged)
}

fn part_of(r: &Report) -> Part {
    Part {
        sections: r.machine.sections.clone(),
        commit: r.machine.commit.clone(),
        seconds: r.machine.seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Machine;

    fn report(sections: &[&str], seconds: f64, notes: &[&str]) -> Report {
        Report {
            notes: notes.iter().map(|s| (*s).to_owned()).collect(),
            ..Report::empty(Machine {
                cpus: 2,
                os: "Linux".into(),
                servers: Vec::new(),
                quick: false,
                ttl_ms: 2000,
                workers: 4,
                repeats: 4,
                failovers: 10,
                seconds,
                sections: sections.iter().map(|s| (*s).to_owned()).collect(),
                commit: Some("abc".into()),
                parts: Vec::new(),
                checks: CHECKS,
            })
        }
    }

    /// A part judged before a check existed reads that check's count as 0: it is refused.
    #[test]
    fn a_part_judged_by_older_checks_is_refused() {
        let mut old = report(&["faults"], 10.0, &[]);
        old.machine.checks = CHECKS - 1;
        let e = merge(vec![report(&["guarded"], 10.0, &[]), old]).unwrap_err();
        assert!(e.to_string().contains("checks version"), "{e}");
    }

    #[test]
    fn parts_add_up_in_the_suites_order() {
        let a = report(&["guarded", "soak"], 100.0, &["a"]);
        let b = report(&["faults", "primitives"], 50.0, &["b"]);
        let m = merge(vec![a, b]).unwrap();
        assert_eq!(m.machine.sections, ["faults", "primitives", "guarded", "soak"]);
        assert_eq!(m.machine.seconds, 150.0);
        assert_eq!(m.machine.parts.len(), 2);
        assert_eq!(m.machine.parts[0].sections, ["guarded", "soak"]);
        assert_eq!(m.machine.commit.as_deref(), Some("abc"));
        assert_eq!(m.notes, ["a", "b"]);
        // The JSON goes round: what `run --json` writes, `merge` reads.
        let json = serde_json::to_string(&m).unwrap();
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back.machine.parts.len(), 2);
    }

    #[test]
    fn overlapping_or_unlike_parts_are_refused() {
        let twice = merge(vec![
            report(&["faults"], 1.0, &[]),
            report(&["faults", "soak"], 1.0, &[]),
        ]);
        assert!(twice.unwrap_err().to_string().contains("`faults`"));
        let mut quick = report(&["soak"], 1.0, &[]);
        quick.machine.quick = true;
        assert!(merge(vec![report(&["faults"], 1.0, &[]), quick]).is_err());
        assert!(merge(Vec::new()).is_err());
        let merged = merge(vec![report(&["faults"], 1.0, &[])]).unwrap();
        assert!(merge(vec![merged]).is_err());
    }
}
