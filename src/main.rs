//! Entry point: parse the command line, install logging, dispatch, map the result to the
//! documented exit code. No logic here.

use std::process::ExitCode;

use clap::Parser;
use kube_shutdown_drain::cli::{Cli, Command, EXIT_USAGE};

/// Worker threads of the one runtime: two, so one blocked in the kube client leaves the other
/// working (and the daemon's loop, which runs on the main thread, fed by it). Tokio's default,
/// one a CPU, costs a stack and a malloc arena per CPU for an I/O-bound process.
const WORKERS: usize = 2;
/// Their stack: a drain's futures nest deep (drain, last stage, slots, the hold), and an
/// unoptimised build keeps large frames on every poll (a debug build's drain passed tokio's
/// 2 MiB default); 8 MiB is address space, touched only as deep as a poll goes.
const WORKER_STACK: usize = 8 << 20;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EXIT_USAGE } else { 0 });
        }
    };
    let log = kube_shutdown_drain::logging::init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .thread_stack_size(WORKER_STACK)
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
        // The daemon's workers may be blocked in the kube client; they end with the process
        // instead of holding up its exit.
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
