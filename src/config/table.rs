//! How every table of the config file is read: from a map only ([`table`]), never from a
//! sequence. A leaf of `config`: the raw tables of every file (`raw.rs`, `reboot.rs`,
//! `fleetlock.rs`) read through it.

use std::fmt;

use serde::Deserialize;

/// A table of the config file. serde builds a struct from a sequence as readily as from a map,
/// so `taint = [false, "a/b", "x", "NoExecute"]` would be read positionally; every table is read
/// through [`table`], which takes a map only, and anything else is refused with
/// [`Table::EXPECTING`] (toml attaches the value's span, so the error names the key).
pub trait Table {
    /// What the error says was expected.
    const EXPECTING: &'static str;
}

/// Reads a [`Table`] from a map only (`#[serde(deserialize_with = "table")]`).
pub fn table<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Table,
{
    struct Map<T>(std::marker::PhantomData<T>);
    impl<'de, T: Deserialize<'de> + Table> serde::de::Visitor<'de> for Map<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(T::EXPECTING)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(serde::de::value::MapAccessDeserializer::new(map))
        }
    }
    d.deserialize_map(Map(std::marker::PhantomData))
}
