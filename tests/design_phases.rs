//! `docs/design.md`'s phase tables against the ones they copy, the module docs of
//! `src/daemon/phase.rs` and `src/daemon/phase_reboot.rs`:
//! the same rows in the same order, and every phase, event and effect the code declares named
//! in its lists. The code's doc is the table; the design doc may not drift from it.

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const PHASE_RS: &str = "src/daemon/phase.rs";
/// The reboot part of the table, in a file of its own.
const PHASE_REBOOT_RS: &str = "src/daemon/phase_reboot.rs";
const DESIGN: &str = "docs/design.md";

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The table rows of `phase.rs`'s module doc (`//! | ... |`), without the doc marker.
fn code_rows(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|l| l.strip_prefix("//! "))
        .filter(|l| l.starts_with('|'))
        .map(str::to_owned)
        .collect()
}

/// The `### Phases` section of the design doc, up to the next heading.
fn phases_section(design: &str) -> &str {
    let start = design
        .find("\n### Phases\n")
        .unwrap_or_else(|| panic!("{DESIGN} has no ### Phases section"));
    let rest = &design[start + 1..];
    let end = rest[1..].find("\n#").map_or(rest.len(), |i| i + 1);
    &rest[..end]
}

/// The table rows of the design doc's phase section.
fn design_rows(section: &str) -> Vec<String> {
    section
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(str::to_owned)
        .collect()
}

/// The variants of `pub enum NAME` in `source`: the lines indented once that start with a
/// capital letter.
fn variants(source: &str, name: &str) -> Vec<String> {
    let head = format!("pub enum {name} {{\n");
    let start = source
        .find(&head)
        .unwrap_or_else(|| panic!("no enum {name}"))
        + head.len();
    let body = &source[start..start + source[start..].find("\n}").expect("the enum's end")];
    body.lines()
        .filter_map(|l| l.strip_prefix("    "))
        .filter(|l| l.starts_with(|c: char| c.is_ascii_uppercase()))
        .map(|l| {
            l.split(|c: char| !c.is_alphanumeric())
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[test]
fn the_design_doc_s_phase_tables_are_phase_rs_s_row_for_row() {
    let mut code = code_rows(&read(PHASE_RS));
    code.extend(code_rows(&read(PHASE_REBOOT_RS)));
    assert!(
        code.len() > 40,
        "{PHASE_RS}'s tables were not found: {code:?}"
    );
    let design = read(DESIGN);
    let copied = design_rows(phases_section(&design));
    let missing: Vec<&String> = code.iter().filter(|r| !copied.contains(r)).collect();
    let extra: Vec<&String> = copied.iter().filter(|r| !code.contains(r)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{DESIGN} ### Phases differs from {PHASE_RS}'s module doc:\nmissing {missing:#?}\nnot in \
         the code {extra:#?}"
    );
    assert_eq!(copied, code, "{DESIGN}: the rows are in another order");
}

#[test]
fn every_phase_event_and_effect_is_named_in_the_design_doc() {
    let source = read(PHASE_RS);
    let design = read(DESIGN);
    let section = phases_section(&design);
    for (list, enum_name) in [
        ("- Phases: ", "Phase"),
        ("- Events: ", "Event"),
        ("- Effects: ", "Effect"),
    ] {
        let line = section
            .lines()
            .find(|l| l.starts_with(list))
            .unwrap_or_else(|| panic!("{DESIGN} ### Phases has no `{list}` line"));
        let named: Vec<String> = line[list.len()..]
            .split(", ")
            .map(|w| w.trim_end_matches('.').trim_matches('`').to_owned())
            .collect();
        let declared = variants(&source, enum_name);
        assert!(declared.len() > 5, "{PHASE_RS}: enum {enum_name} not read");
        assert_eq!(
            named, declared,
            "{DESIGN} lists other {enum_name} variants than {PHASE_RS} declares"
        );
    }
}
