//! The one `client_params.id` the FleetLock server accepts: the id zincati sends for this node.
//!
//! zincati (`src/identity/mod.rs`) identifies a node by `node_uuid`, libsystemd's
//! `get_machine_app_specific` of the application id `de35106b6ec24688b63afddaa156679b`, and
//! sends it as 32 lower-case hex digits (`lower_hex()`, `src/fleet_lock/mod.rs`). That
//! function is systemd's `sd_id128_get_machine_app_specific()` (`src/libsystemd/sd-id128/
//! sd-id128.c`): HMAC-SHA256 keyed with the 16 bytes of `/etc/machine-id`, over the 16 bytes of
//! the application id, the first half of the digest kept and marked as a version 4 UUID
//! (`id128_make_v4_uuid`). An admin who overrides zincati's `[identity] node_uuid` sends another
//! id, which this server refuses as another node's.

use std::io::Read;
use std::path::Path;

use ring::hmac;

/// zincati's application id (`APP_ID` in zincati's `src/identity/mod.rs`).
pub const ZINCATI_APP_ID: [u8; 16] = [
    0xde, 0x35, 0x10, 0x6b, 0x6e, 0xc2, 0x46, 0x88, 0xb6, 0x3a, 0xfd, 0xda, 0xa1, 0x56, 0x67, 0x9b,
];

/// Where systemd keeps the machine id (machine-id(5)).
pub const MACHINE_ID_PATH: &str = "/etc/machine-id";

/// Why the machine id could not be read.
#[derive(Debug, thiserror::Error)]
pub enum MachineIdError {
    #[error("cannot read the machine id {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("the machine id {path} is not 32 hexadecimal digits on one line")]
    Malformed { path: String },
}

/// `sd_id128_get_app_specific(base, app)`: see the module doc.
pub fn app_specific(base: &[u8; 16], app: &[u8; 16]) -> [u8; 16] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, base);
    let digest = hmac::sign(&key, app);
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest.as_ref()[..16]);
    id[6] = (id[6] & 0x0F) | 0x40;
    id[8] = (id[8] & 0x3F) | 0x80;
    id
}

/// 32 hex digits (either case) into 16 bytes; machine-id(5) allows a trailing newline.
pub fn parse_id128(text: &str) -> Option<[u8; 16]> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    if text.len() != 32 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(id)
}

/// 16 bytes as 32 lower-case hex digits (libsystemd's `lower_hex`).
pub fn lower_hex(id: &[u8; 16]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// The id zincati sends on a node whose machine id is in `path`.
pub fn read(path: &Path) -> Result<String, MachineIdError> {
    let shown = path.display().to_string();
    // machine-id(5) is 33 bytes: reading 64 at most tells a longer file from it.
    let mut text = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(64).read_to_end(&mut text))
        .map_err(|source| MachineIdError::Read {
            path: shown.clone(),
            source,
        })?;
    let base = std::str::from_utf8(&text)
        .ok()
        .and_then(parse_id128)
        .ok_or(MachineIdError::Malformed { path: shown })?;
    Ok(lower_hex(&app_specific(&base, &ZINCATI_APP_ID)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// systemd's own vector (`src/test/test-id128.c`: `systemd-id128 -a
    /// f03daaeb1c334b43a732172944bf772e show 51df0b4bc3b04c9780e299b98ca373b8`).
    #[test]
    fn the_app_specific_id_is_systemds() {
        let base = parse_id128("51df0b4bc3b04c9780e299b98ca373b8").unwrap();
        let app = parse_id128("f03daaeb1c334b43a732172944bf772e").unwrap();
        assert_eq!(
            lower_hex(&app_specific(&base, &app)),
            "1dee5954e75c4d6fb96cc6c04ca18a86"
        );
    }

    #[test]
    fn zincatis_id_is_read_from_the_machine_id_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("machine-id");
        std::fs::write(&path, "51DF0B4BC3B04C9780E299B98CA373B8\n").unwrap();
        let id = read(&path).unwrap();
        let base = parse_id128("51df0b4bc3b04c9780e299b98ca373b8").unwrap();
        assert_eq!(id, lower_hex(&app_specific(&base, &ZINCATI_APP_ID)));
        assert_eq!(id.len(), 32);
        assert_eq!(&id[12..13], "4", "a version 4 UUID: {id}");

        for bad in [
            "",
            "uninitialized\n",
            "51df0b4bc3b04c9780e299b98ca373b",
            "51df0b4bc3b04c9780e299b98ca373b8\n\n",
        ] {
            std::fs::write(&path, bad).unwrap();
            let err = read(&path).unwrap_err();
            assert!(
                matches!(err, MachineIdError::Malformed { .. }),
                "{bad:?}: {err}"
            );
            assert!(
                err.to_string().contains(&path.display().to_string()),
                "{err}"
            );
        }
        let err = read(&dir.path().join("none")).unwrap_err();
        assert!(
            err.to_string().starts_with("cannot read the machine id"),
            "{err}"
        );
    }
}
