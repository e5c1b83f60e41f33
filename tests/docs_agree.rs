//! The documentation against the code, where one can be tied to the other (as
//! `packaging/check-manifests` does for the RBAC manifest): every repository path the docs name
//! exists, the metrics page lists exactly the metrics the daemon writes, the configuration
//! reference names every key and the README's config parses, and the sysext image
//! `packaging/build` announces is the one `packaging/build-sysext` makes. And the docs against
//! themselves: every page under `docs/` is linked from the README and links back, and every
//! relative link and `#anchor` resolves.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use kube_shutdown_drain::config::Settings;
use kube_shutdown_drain::daemon::metrics::{Snapshot, render};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Words in `text` that look like a path inside this repository (`packaging/build`,
/// `tests/e2e/run`, `src/daemon/`), trailing punctuation removed; globs, shell variables and
/// placeholders left out.
fn repo_paths(text: &str) -> BTreeSet<String> {
    const TOP: [&str; 8] = [
        "packaging/",
        "scripts/",
        "systemd/",
        "tests/",
        "src/",
        "docs/",
        "examples/",
        "demo/",
    ];
    text.split(|c: char| c.is_whitespace() || "`'\"()[]<>,;|=".contains(c))
        .filter(|w| TOP.iter().any(|t| w.starts_with(t)))
        // A link's anchor (`docs/fleet.md#the-reboot-gate`) is not part of the path.
        .map(|w| {
            w.split('#')
                .next()
                .unwrap_or(w)
                .trim_end_matches(['.', ':'])
                .to_owned()
        })
        // Globs and placeholders (`target/packages/*.deb`, `src/api`) are not single paths.
        .filter(|w| !w.contains('*') && !w.contains("...") && !w.contains('{') && !w.contains('$'))
        // `systemd-analyze cat-config systemd/logind.conf` names systemd's file, not ours.
        .filter(|w| w != "systemd/logind.conf")
        .collect()
}

/// The Markdown pages under `docs/`, as repository paths (`docs/fleet.md`), sorted.
fn doc_pages() -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .expect("a docs directory")
        .map(|e| {
            e.expect("a docs entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|name| name.ends_with(".md"))
        .map(|name| format!("docs/{name}"))
        .collect();
    pages.sort();
    pages
}

/// The README and every page under `docs/`.
fn markdown_files() -> Vec<String> {
    let mut files = vec!["README.md".to_owned()];
    files.extend(doc_pages());
    files
}

/// Every file under `dir` (a repository path), recursively.
fn files_under(dir: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(Path::new(ROOT).join(&dir)).unwrap() {
            let entry = entry.unwrap();
            let path = format!("{dir}/{}", entry.file_name().to_string_lossy());
            if entry.file_type().unwrap().is_dir() {
                todo.push(path);
            } else {
                found.push(path);
            }
        }
    }
    found
}

#[test]
fn every_repository_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    let mut docs: Vec<String> = [
        "config.example.toml",
        "packaging/README.md",
        "packaging/build",
        "packaging/build-sysext",
        "scripts/test",
        "scripts/demo",
        "scripts/install-deps",
    ]
    .map(String::from)
    .into();
    docs.extend(markdown_files());
    for doc in &docs {
        for p in repo_paths(&read(doc)) {
            if !Path::new(ROOT).join(&p).exists() {
                missing.push(format!("{doc} names {p}"));
            }
        }
    }
    // The code points its readers at pages (`see docs/kubelet.md`): those pages exist too.
    for source in files_under("src") {
        for p in repo_paths(&read(&source))
            .into_iter()
            .filter(|p| p.starts_with("docs/"))
        {
            if !Path::new(ROOT).join(&p).exists() {
                missing.push(format!("{source} names {p}"));
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

#[test]
fn the_metrics_page_lists_exactly_the_metrics_the_daemon_writes() {
    let report = serde_json::from_value(serde_json::json!({
        "node": "n", "why": "reboot", "started_at": "2026-01-01T00:00:00Z", "duration_ms": 1,
        "complete": true, "deadline_reached": false, "dry_run": false,
        "counts": {"evicted": 0, "deleted": 0, "gone": 0, "completed": 0, "skipped": 0,
                   "blocked": 1, "failed": 0, "pending": 0},
        "pods": [], "blocked_by": [{"budget": "a/b", "message": "m", "pods": ["a/p"]}],
        "errors": [], "slot": {"slot": "kube-shutdown-drain-slot-0", "waited_ms": 1}
    }))
    .unwrap();
    let text = render(&Snapshot {
        node: "n".into(),
        lock_held: true,
        budget: Some((Duration::from_secs(1), Duration::from_secs(2))),
        last_drain: Some(report),
        last_restore: Some((1.0, true)),
        unclean: Some(Default::default()),
        forecast: Some(kube_shutdown_drain::daemon::metrics::ForecastFacts {
            at: 1.0,
            verdict: kube_shutdown_drain::forecast::Verdict::Blocked,
            blocked: [("a/b".to_owned(), 1)].into(),
            estimate_seconds: Some(1.0),
            budget_seconds: 1.0,
        }),
        gate_closed: Some(true),
        reboot: Some(kube_shutdown_drain::daemon::metrics::RebootFacts::default()),
    });
    let written: BTreeSet<String> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    // The metrics page's table abbreviates a repeated prefix as `..._rest`.
    let page = read("docs/metrics.md");
    let section = &page[page
        .find("## The metrics")
        .expect("a section listing the metrics")..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let mut listed = BTreeSet::new();
    let mut last_full = String::new();
    for name in section.split('`').skip(1).step_by(2) {
        let name = name.split('{').next().unwrap();
        if let Some(rest) = name.strip_prefix("...") {
            let stem = last_full
                .rsplit_once("_last_")
                .map(|(s, _)| s.to_owned())
                .expect("an abbreviation after a full name");
            listed.insert(format!("{stem}{rest}"));
        } else if name.starts_with("kube_shutdown_drain_") {
            last_full = name.to_owned();
            listed.insert(name.to_owned());
        }
    }
    assert_eq!(
        listed, written,
        "docs/metrics.md (left) vs render() (right)"
    );
}

#[test]
fn packaging_build_announces_the_sysext_image_build_sysext_makes() {
    let build = read("packaging/build");
    let sysext = read("packaging/build-sysext");
    let made = sysext
        .lines()
        .find_map(|l| l.strip_prefix("# Result: OUT_DIR/"))
        .and_then(|l| l.split_whitespace().next())
        .expect("build-sysext names its result");
    let announced = build
        .lines()
        .find_map(|l| l.strip_prefix("#   sysext  "))
        .and_then(|l| l.split_whitespace().next())
        .expect("packaging/build names the sysext image");
    assert_eq!(announced, made);
    assert!(read("README.md").contains(&format!("target/packages/{made}")));
}

/// `text` without fenced code blocks and inline code spans: what is left is prose, whose
/// headings and links GitHub renders. A code span may run across lines but not across a
/// paragraph, so backticks are paired within each paragraph.
fn prose(text: &str) -> String {
    let mut fenced = false;
    let mut paragraphs = vec![String::new()];
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if line.trim().is_empty() {
            paragraphs.push(String::new());
        } else if !fenced {
            let last = paragraphs.last_mut().expect("a paragraph");
            last.push_str(line);
            last.push('\n');
        }
    }
    let mut out = String::new();
    for paragraph in paragraphs {
        // Odd pieces between backticks are code spans.
        for piece in paragraph.split('`').step_by(2) {
            out.push_str(piece);
        }
        out.push('\n');
    }
    out
}

/// The anchors GitHub gives a page's headings, as github.com/Flet/github-slugger computes them:
/// the heading's text lower-cased, every character but letters, digits, `_`, `-` and spaces
/// dropped (backticks too), spaces as `-`; a repeated anchor gets `-1`, `-2`, ...
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if fenced {
            continue;
        }
        let heading = heading.trim_start_matches('#');
        let Some(title) = heading.strip_prefix(' ') else {
            continue;
        };
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
            .map(|c| if c == ' ' { '-' } else { c })
            .collect();
        let mut anchor = slug.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{slug}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// The targets of the inline links (`[text](target)`) in `text`'s prose.
fn link_targets(text: &str) -> Vec<String> {
    prose(text)
        .split("](")
        .skip(1)
        .filter_map(|rest| rest.split_once(')').map(|(target, _)| target.to_owned()))
        .collect()
}

/// A relative link `target` in the repository file `from`, as the repository path it names and
/// its anchor (`None` for a link to the page itself or without one); `None` for an outside link.
fn resolve(from: &str, target: &str) -> Option<(String, Option<String>)> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor.to_owned())),
        None => (target, None),
    };
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    if path.is_empty() {
        return Some((from.to_owned(), anchor));
    }
    for part in path.split('/') {
        match part {
            "." => {}
            ".." => {
                parts.pop();
            }
            part => parts.push(part),
        }
    }
    Some((parts.join("/").trim_end_matches('/').to_owned(), anchor))
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let mut broken = Vec::new();
    for file in markdown_files() {
        for target in link_targets(&read(&file)) {
            let Some((path, anchor)) = resolve(&file, &target) else {
                continue;
            };
            if !Path::new(ROOT).join(&path).exists() {
                broken.push(format!("{file}: ({target}): no {path}"));
                continue;
            }
            if let Some(anchor) = anchor
                && path.ends_with(".md")
                && !anchors(&read(&path)).contains(&anchor)
            {
                broken.push(format!(
                    "{file}: ({target}): no heading #{anchor} in {path}"
                ));
            }
        }
    }
    assert!(broken.is_empty(), "{broken:#?}");
}

#[test]
fn every_docs_page_is_linked_from_the_readme_and_links_back() {
    let linked: BTreeSet<String> = link_targets(&read("README.md"))
        .iter()
        .filter_map(|t| resolve("README.md", t))
        .map(|(path, _)| path)
        .collect();
    let mut wrong = Vec::new();
    for page in files_under("docs") {
        if !linked.contains(&page) {
            wrong.push(format!("README.md does not link {page}"));
        }
        // Each page says what it is for and links back within its first lines.
        if page.ends_with(".md") {
            let text = read(&page);
            let head: String = text.lines().take(5).collect::<Vec<_>>().join("\n");
            if !link_targets(&head)
                .iter()
                .any(|t| t.starts_with("../README.md"))
            {
                wrong.push(format!(
                    "{page} does not link back to the README in its first lines"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

#[test]
fn the_readme_config_parses() {
    let readme = read("README.md");
    let start = readme
        .find("```toml\n")
        .expect("a toml block in the README")
        + "```toml\n".len();
    let block = &readme[start..start + readme[start..].find("```").unwrap()];
    let settings = Settings::from_str_at(Path::new("/README.md"), block)
        .unwrap_or_else(|e| panic!("the README's config: {e}\n{block}"));
    assert_eq!(settings.node_name, "worker-1");
}

/// Every key `config.example.toml` shows (set or in a comment), as `section.key` (`drain.timeout`,
/// `rules.order`; top-level keys without a section).
fn example_keys() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    let mut section = String::new();
    for line in read("config.example.toml").lines() {
        let commented = line.strip_prefix("# ");
        if let Some(name) = commented
            .unwrap_or(line)
            .strip_prefix("[[")
            .and_then(|l| l.strip_suffix("]]"))
        {
            section = name.to_owned();
        } else if let Some(name) = commented
            .unwrap_or(line)
            .strip_prefix('[')
            .and_then(|l| l.strip_suffix(']'))
            .filter(|n| {
                n.chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
            })
        {
            section = name.to_owned();
        } else if let Some((key, _)) = commented.unwrap_or(line).split_once(" = ")
            && !key.is_empty()
            && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
        {
            keys.insert(if section.is_empty() {
                key.to_owned()
            } else {
                format!("{section}.{key}")
            });
        }
    }
    keys
}

#[test]
fn the_configuration_reference_names_every_key() {
    // A row's first cell names a section once, then its keys: `[drain] concurrency, timeout`.
    let mut named = BTreeSet::new();
    for row in read("docs/configuration.md")
        .lines()
        .filter(|l| l.starts_with("| `"))
    {
        let cell = row[2..].split(" | ").next().unwrap().replace('`', "");
        let (section, rest) = match cell.strip_prefix('[') {
            Some(rest) => {
                let (section, rest) = rest.split_once(']').unwrap();
                (
                    section.trim_matches(['[', ']']).to_owned(),
                    rest.trim_start_matches(']'),
                )
            }
            None => (String::new(), cell.as_str()),
        };
        for key in rest
            .split(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .filter(|k| !k.is_empty())
        {
            named.insert(if section.is_empty() {
                key.to_owned()
            } else {
                format!("{section}.{key}")
            });
        }
    }
    let missing: Vec<_> = example_keys().difference(&named).cloned().collect();
    assert!(
        missing.is_empty(),
        "keys of config.example.toml not in docs/configuration.md: {missing:?}"
    );
}

/// The modules of `src/`: each folder, and each file directly in it but the test files
/// (`*_tests.rs`), by name (`main.rs` as `main.rs`, `daemon/` as `daemon`, `text.rs` as
/// `text`).
fn src_modules() -> BTreeSet<String> {
    let dir = Path::new(ROOT).join("src");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("src: {e}"))
        .map(|entry| {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let keeps_rs = entry.path().is_dir() || name == "main.rs" || name == "lib.rs";
            if keeps_rs {
                name
            } else {
                name.trim_end_matches(".rs").to_string()
            }
        })
        .filter(|name| !name.ends_with("_tests"))
        .collect()
}

/// The modules the design doc's module map names: the first cell of each row of the table
/// under "## Source layout", each name in backquotes.
fn mapped_modules(design: &str) -> BTreeSet<String> {
    let start = design
        .find("## Source layout")
        .expect("docs/design.md has a \"## Source layout\" section");
    design[start..]
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .flat_map(|row| {
            let first = row.split('|').nth(1).unwrap_or_default();
            first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[test]
fn the_design_doc_s_module_map_names_every_module_and_only_those() {
    let design = read("docs/design.md");
    let (code, doc) = (src_modules(), mapped_modules(&design));
    let unmapped: Vec<_> = code.difference(&doc).collect();
    let gone: Vec<_> = doc.difference(&code).collect();
    assert!(
        unmapped.is_empty() && gone.is_empty(),
        "docs/design.md's module map: no row for {unmapped:?}; rows for modules that do not \
         exist: {gone:?}"
    );
}
