//! The documentation's relative links resolve: every markdown link and image in the repository's
//! `*.md` files that points inside the repository names a file or directory that exists and,
//! for `#anchor` into a markdown file, a heading of that file (GitHub's slug). The front page
//! stays a front page: `README.md` has at most `README_MAX_LINES` lines; the manual lives in
//! `docs/`.
//!
//! Needs no cluster: it reads files only. Links are read with a CommonMark parser, so a link in a
//! code block or inline code is not a link, and reference-style links are resolved as GitHub
//! resolves them.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::process::Command;

use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};

/// The front page's budget: what the project is, the two commands, install, one example and the
/// links into `docs/`. Anything longer belongs to a page of the manual.
const README_MAX_LINES: usize = 300;

/// Path components never walked: build output and installed front-end packages.
const SKIPPED_DIRS: [&str; 2] = ["target", "node_modules"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e sits in the workspace root")
        .to_path_buf()
}

/// The repository's markdown files: tracked ones and new ones not ignored, as git lists them.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let out = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
            "*.md",
        ])
        .current_dir(root)
        .output()
        .expect("git must be installed to list the repository's markdown files");
    assert!(
        out.status.success(),
        "git ls-files failed in {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files: Vec<PathBuf> = out
        .stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| PathBuf::from(String::from_utf8_lossy(p).into_owned()))
        .filter(|p| {
            !p.components()
                .any(|c| SKIPPED_DIRS.iter().any(|s| c.as_os_str() == *s))
        })
        // A file deleted from the work tree but still in the index is not documentation.
        .filter(|p| root.join(p).is_file())
        .collect();
    files.sort();
    files.dedup();
    files
}

/// One link or image as written, with the line it starts on.
struct Link {
    line: usize,
    dest: String,
}

/// What the check needs of one markdown file.
struct Doc {
    links: Vec<Link>,
    /// GitHub's anchors for the file's headings.
    anchors: HashSet<String>,
}

fn parse(text: &str) -> Doc {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS;
    let mut links = Vec::new();
    let mut anchors = HashSet::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut heading: Option<String> = None;
    for (event, range) in Parser::new_ext(text, options).into_offset_iter() {
        match event {
            Event::Start(Tag::Link {
                link_type,
                dest_url,
                ..
            })
            | Event::Start(Tag::Image {
                link_type,
                dest_url,
                ..
            })
            // An e-mail autolink's destination carries no scheme: it is not a path.
            if link_type != LinkType::Email =>
            {
                links.push(Link {
                    line: line_of(text, range.start),
                    dest: dest_url.into_string(),
                });
            }
            Event::Start(Tag::Heading { .. }) => heading = Some(String::new()),
            Event::Text(t) | Event::Code(t) => {
                if let Some(h) = heading.as_mut() {
                    h.push_str(&t);
                }
            }
            Event::End(TagEnd::Heading(_)) => {
                if let Some(h) = heading.take() {
                    anchors.insert(unique_slug(&slug(&h), &mut seen));
                }
            }
            _ => {}
        }
    }
    Doc { links, anchors }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset].bytes().filter(|b| *b == b'\n').count() + 1
}

/// GitHub's heading anchor: the heading's text lower-cased, every character that is not a
/// letter, a digit, `-` or `_` dropped, and each space turned into `-`.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// A repeated heading gets `-1`, `-2`, … in document order, as on GitHub: the count is kept
/// per base slug, and a suffixed slug that a heading already took is skipped.
fn unique_slug(base: &str, seen: &mut HashMap<String, usize>) -> String {
    let mut candidate = base.to_string();
    while seen.contains_key(&candidate) {
        let n = seen.entry(base.to_string()).or_default();
        *n += 1;
        candidate = format!("{base}-{n}");
    }
    seen.insert(candidate.clone(), 0);
    candidate
}

/// A link that leaves the repository (any URL scheme) is not checked.
fn is_external(dest: &str) -> bool {
    match dest.split_once(':') {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        }
        None => dest.starts_with("//"),
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `a/./b/../c` → `a/c`, without touching the file system; `None` when it climbs out of `root`.
fn normalise(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => {}
        }
    }
    Some(out)
}

#[derive(Debug, PartialEq, Eq)]
struct DeadLink {
    file: PathBuf,
    line: usize,
    dest: String,
    why: String,
}

impl fmt::Display for DeadLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: dead link `{}`: {}",
            self.file.display(),
            self.line,
            self.dest,
            self.why
        )
    }
}

/// Every dead relative link of `files` (paths relative to `root`).
fn dead_links(root: &Path, files: &[PathBuf]) -> Vec<DeadLink> {
    let mut docs: HashMap<PathBuf, Doc> = HashMap::new();
    let read = |rel: &Path, docs: &mut HashMap<PathBuf, Doc>| -> bool {
        if docs.contains_key(rel) {
            return true;
        }
        match std::fs::read_to_string(root.join(rel)) {
            Ok(text) => {
                docs.insert(rel.to_path_buf(), parse(&text));
                true
            }
            Err(_) => false,
        }
    };
    let mut dead = Vec::new();
    for file in files {
        assert!(read(file, &mut docs), "cannot read {}", file.display());
        let links: Vec<(usize, String)> = docs[file]
            .links
            .iter()
            .map(|l| (l.line, l.dest.clone()))
            .collect();
        for (line, dest) in links {
            if dest.is_empty() || is_external(&dest) {
                continue;
            }
            let mut report = |why: String| {
                dead.push(DeadLink {
                    file: file.clone(),
                    line,
                    dest: dest.clone(),
                    why,
                })
            };
            let (path_part, anchor) = match dest.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (dest.as_str(), None),
            };
            let path_part = path_part.split('?').next().unwrap_or_default();
            let target = if path_part.is_empty() {
                Some(file.clone())
            } else {
                let decoded = percent_decode(path_part);
                let joined = match decoded.strip_prefix('/') {
                    // GitHub resolves a leading `/` from the repository's root.
                    Some(from_root) => PathBuf::from(from_root),
                    None => file.parent().unwrap_or(Path::new("")).join(&decoded),
                };
                normalise(&joined)
            };
            let Some(target) = target else {
                report("it leaves the repository".into());
                continue;
            };
            let abs = root.join(&target);
            if !abs.exists() {
                report(format!("{} does not exist", target.display()));
                continue;
            }
            let Some(anchor) = anchor.filter(|a| !a.is_empty()) else {
                continue;
            };
            if !abs.is_file() || target.extension().is_none_or(|e| e != "md") {
                continue;
            }
            if !read(&target, &mut docs) {
                report(format!("{} cannot be read", target.display()));
                continue;
            }
            let anchor = percent_decode(anchor);
            if !docs[&target].anchors.contains(&anchor) {
                report(format!(
                    "{} has no heading with the anchor #{anchor}",
                    target.display()
                ));
            }
        }
    }
    dead
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = repo_root();
    let files = markdown_files(&root);
    assert!(
        files.iter().any(|f| f == Path::new("README.md")),
        "README.md not among the markdown files git lists in {}",
        root.display()
    );
    let dead = dead_links(&root, &files);
    assert!(
        dead.is_empty(),
        "{} dead relative link(s) in the repository's markdown:\n{}",
        dead.len(),
        dead.iter()
            .map(|d| format!("  {d}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn readme_is_a_front_page() {
    let text = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let lines = text.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: it is the front page; move the detail into a page under docs/ and link it"
    );
}

#[test]
fn dead_files_and_anchors_are_reported_with_file_and_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    std::fs::create_dir(root.join("docs")).expect("mkdir");
    std::fs::write(
        root.join("README.md"),
        "# Top\n\nSee [the guide](docs/guide.md#two-words) and [gone](docs/gone.md).\n\n\
         ![shot](docs/shot.png) [up](../outside.md) [site](https://example.com/x.md)\n\
         `[not a link](nowhere.md)`\n\n```\n[nor this](nowhere.md)\n```\n",
    )
    .expect("write");
    std::fs::write(
        root.join("docs/guide.md"),
        "# Guide\n\n## Two words\n\n## Two words\n\n[back](../README.md#top) \
         [self](#two-words-1) [missing](#three) [ref][r]\n\n[r]: ../README.md#nope\n",
    )
    .expect("write");
    let files = [PathBuf::from("README.md"), PathBuf::from("docs/guide.md")];
    let found: Vec<String> = dead_links(root, &files)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        found,
        [
            "README.md:3: dead link `docs/gone.md`: docs/gone.md does not exist",
            "README.md:5: dead link `docs/shot.png`: docs/shot.png does not exist",
            "README.md:5: dead link `../outside.md`: it leaves the repository",
            "docs/guide.md:7: dead link `#three`: docs/guide.md has no heading with the anchor #three",
            "docs/guide.md:7: dead link `../README.md#nope`: README.md has no heading with the anchor #nope",
        ]
    );
}

#[test]
fn slugs_are_githubs() {
    let cases = [
        ("Concurrency and performance", "concurrency-and-performance"),
        (
            "core.subWorkflow (also core.control.subWorkflow)",
            "coresubworkflow-also-corecontrolsubworkflow",
        ),
        (
            "Host profile: what discovery advertises is what a run gets",
            "host-profile-what-discovery-advertises-is-what-a-run-gets",
        ),
        ("Retry behaviour (RFC 0033)", "retry-behaviour-rfc-0033"),
        (
            "core.setVariable and core.getVariable",
            "coresetvariable-and-coregetvariable",
        ),
        ("3.1 auth.test.ts (5f098ff)", "31-authtestts-5f098ff"),
        ("Figures — current", "figures--current"),
        ("snake_case and kebab-case", "snake_case-and-kebab-case"),
    ];
    for (heading, want) in cases {
        assert_eq!(slug(heading), want, "slug of {heading:?}");
    }
    let mut seen = HashMap::new();
    let got: Vec<String> = ["a", "a", "a-1", "a"]
        .iter()
        .map(|h| unique_slug(h, &mut seen))
        .collect();
    assert_eq!(got, ["a", "a-1", "a-1-1", "a-2"]);
}
