//! `forecast`: if the node shut down now, would its drain complete within its time limit, and what
//! holds it. Reads (the Node, its pods, the budgets, where needed the other nodes, logind's
//! maximum delay); writes nothing. Exit 0 when it completes, 1 when it would not, 3 when the
//! cluster gives no usable answer (as [`crate::cli::CliError::exit_code`] maps it).

use std::sync::Arc;

use crate::cli::{CliError, EXIT_DONE, EXIT_INCOMPLETE, Output, out, outln, print_json};
use crate::config::Settings;
use crate::engine::Engine;
use crate::forecast::{Verdict, read};

pub async fn run(settings: Arc<Settings>, output: Output) -> Result<u8, CliError> {
    let engine = Engine::new(settings.clone())?;
    let (time_limit, logind) = read::logind_time_limit(&settings).await;
    let forecast = read::gather(&engine, &time_limit, logind).await?;
    match output {
        Output::Json => print_json(&forecast)?,
        Output::Text => out!("{}", forecast.to_text()),
    }
    Ok(if forecast.verdict == Verdict::Completes {
        EXIT_DONE
    } else {
        EXIT_INCOMPLETE
    })
}

/// The forecast as one line of `check` and `status` (never their failure: a blocked drain is
/// the cluster's state, not a broken installation).
pub(crate) async fn line(settings: &Arc<Settings>, indent: &str) {
    let made = async {
        let engine = Engine::new(settings.clone())?;
        let (time_limit, logind) = read::logind_time_limit(settings).await;
        Ok::<_, CliError>(read::gather(&engine, &time_limit, logind).await?)
    };
    match made.await {
        Ok(f) if f.verdict == Verdict::Completes => outln!("{indent}forecast: {}", f.summary),
        Ok(f) => outln!(
            "{indent}forecast: WARNING {} (kube-shutdown-drain forecast says why and what fixes it)",
            f.summary
        ),
        Err(e) => outln!("{indent}forecast: cannot forecast the drain: {e}"),
    }
}
