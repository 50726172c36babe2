//! `completions` and `man`: the command's own documentation, generated from its clap definition
//! ([`crate::args::command`]), so that they always match `locksmith --help`.

use std::io::Write;
use std::process::ExitCode;

use clap_complete::Shell;

/// The command's name in completion scripts and on the manual page.
const BIN: &str = "locksmith";

/// `locksmith completions SHELL`: the completion script on stdout.
pub fn completions(shell: Shell) -> ExitCode {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut crate::args::command(), BIN, &mut script);
    write_stdout(&script)
}

/// `locksmith man`: the manual page (roff) on stdout.
pub fn man() -> ExitCode {
    let mut page = Vec::new();
    if let Err(e) = clap_mangen::Man::new(crate::args::command()).render(&mut page) {
        crate::output::stderr_line(format_args!("locksmith: cannot render the manual page: {e}"));
        return ExitCode::FAILURE;
    }
    write_stdout(&page)
}

/// Writes `bytes` to stdout: exit 0, or a one-line error and exit 1 when stdout is closed or full
/// (`locksmith man | head` closing the pipe early is not an internal error).
fn write_stdout(bytes: &[u8]) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            crate::output::stderr_line(format_args!("locksmith: cannot write to stdout: {e}"));
            ExitCode::FAILURE
        }
    }
}
