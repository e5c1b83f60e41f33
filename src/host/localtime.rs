//! The time zone `[reboot] time_zone` names, as the host has it: UTC, a name looked up in the
//! system's tz database (`/usr/share/zoneinfo`, through jiff), or `"localtime"`: the TZif file
//! at `/etc/localtime`, and UTC when that file does not exist, as zincati reads it
//! (`coreos/zincati/docs/usage/updates-strategy.md`, localtime(5)).
//! The daemon's reboot follower reads its windows in it (`crate::daemon::reboot`).

use std::io::{ErrorKind, Read};
use std::path::Path;

use jiff::tz::TimeZone;

use crate::config::reboot::Zone;

/// Where the system's local zone is configured (localtime(5)).
pub const LOCALTIME: &str = "/etc/localtime";
/// A TZif file is a few KiB; anything larger at `/etc/localtime` is not one.
const MAX_TZIF: u64 = 256 * 1024;

/// The zone could not be read; names the zone or the file.
#[derive(Debug, thiserror::Error)]
pub enum ZoneError {
    #[error("the time zone {name:?} is not in the system's tz database: {reason}")]
    Named { name: String, reason: String },
    #[error("cannot read the local time zone from {path}: {reason}")]
    Local { path: String, reason: String },
}

/// `zone` as a jiff `TimeZone`; `localtime` is the file standing for `/etc/localtime`.
pub fn time_zone(zone: &Zone, localtime: &Path) -> Result<TimeZone, ZoneError> {
    match zone {
        Zone::Utc => Ok(TimeZone::UTC),
        Zone::Named(name) => TimeZone::get(name).map_err(|e| ZoneError::Named {
            name: name.clone(),
            reason: e.to_string(),
        }),
        Zone::Local => local(localtime),
    }
}

/// The TZif file at `path`, named after its place under a `zoneinfo` directory when it is a
/// link there; UTC when there is no file.
fn local(path: &Path) -> Result<TimeZone, ZoneError> {
    let error = |reason: String| ZoneError::Local {
        path: path.display().to_string(),
        reason,
    };
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(TimeZone::UTC),
        Err(e) => return Err(error(e.to_string())),
    };
    let mut data = Vec::new();
    file.take(MAX_TZIF + 1)
        .read_to_end(&mut data)
        .map_err(|e| error(e.to_string()))?;
    if data.len() as u64 > MAX_TZIF {
        return Err(error(format!("larger than {MAX_TZIF} bytes")));
    }
    let target = std::fs::read_link(path).ok();
    let name = target
        .as_deref()
        .and_then(|t| t.to_str())
        .and_then(|t| t.split_once("zoneinfo/").map(|(_, name)| name.to_string()))
        .unwrap_or_else(|| "localtime".to_string());
    TimeZone::tzif(&name, &data).map_err(|e| error(e.to_string()))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use jiff::Timestamp;

    use super::*;

    #[test]
    fn localtime_is_the_linked_zone_and_utc_without_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("localtime");
        let berlin = Path::new("/usr/share/zoneinfo/Europe/Berlin");
        std::os::unix::fs::symlink(berlin, &link).unwrap();
        let tz = time_zone(&Zone::Local, &link).unwrap();
        assert_eq!(tz.iana_name(), Some("Europe/Berlin"));
        let summer: Timestamp = "2026-07-01T12:00:00Z".parse().unwrap();
        assert_eq!(tz.to_offset(summer).seconds(), 2 * 3600);
        // A copy instead of a link is read as it is.
        let copy = dir.path().join("copy");
        std::fs::copy(berlin, &copy).unwrap();
        let tz = time_zone(&Zone::Local, &copy).unwrap();
        assert_eq!(tz.to_offset(summer).seconds(), 2 * 3600);
        let missing = dir.path().join("none");
        assert_eq!(time_zone(&Zone::Local, &missing).unwrap(), TimeZone::UTC);
        let garbage = dir.path().join("garbage");
        std::fs::write(&garbage, "not a tzif file").unwrap();
        let err = time_zone(&Zone::Local, &garbage).unwrap_err().to_string();
        assert!(err.contains(&*garbage.to_string_lossy()), "{err}");
        let err = time_zone(&Zone::Named("Mars/Olympus".into()), &missing)
            .unwrap_err()
            .to_string();
        assert!(err.contains("Mars/Olympus"), "{err}");
    }
}
