//! Entry point: parse the command line, install logging, dispatch, map the result to the
//! documented exit code. No logic here.

use std::process::ExitCode;

use kube_shutdown_drain::cli::{Cli, Command, EXIT_USAGE};

fn main() -> ExitCode {
    let cli = match Cli::try_parse_args() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let log = kube_shutdown_drain::logging::init();
    // One thread runs every task: the program waits on the network, the bus and timers, and
    // nothing of it blocks its thread (DNS lookups and file writes go to tokio's blocking pool,
    // credential plugins are child processes, the inhibitor's release has a thread of its own,
    // `host::lock`). tokio's multi-thread scheduler would add two workers and load libm for one
    // function (`pow`, averaging poll times), 0.5 MiB resident (docs/benchmarks.md).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let daemon = matches!(cli.command, Command::Run);
    let result = runtime.block_on(cli.dispatch());
    if daemon {
        // A blocking-pool thread may still be in a DNS lookup or a write; it ends with the
        // process instead of holding up its exit.
        runtime.shutdown_background();
    }
    // The queued log lines first, then the final error: they read in the order they happened.
    drop(log);
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
