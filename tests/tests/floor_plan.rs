//! The floor plan (issue 24): no two top-level modules of `tower-cancel` or `tower-cancel-io` import each other in
//! a loop, so that each crate reads from the bottom up.
//!
//! A top-level module is a file `src/x.rs` or a folder `src/x/`; a path `crate::y` (or a group `crate::{y, z::w}`)
//! anywhere in its code is an arrow x -> y, and so is `crate::Name` for a name `lib.rs` re-exports from y. Comments,
//! string literals and test code are not read: items under `#[cfg(test)]` (or `cfg(all(test, ..))`), and the files
//! such an item declares (`#[cfg(all(test, loom))] mod model;`, the loom models). `lib.rs` is the crate's face,
//! not a room: it re-exports from every module.
//!
//! A crate fails with every circle it has (a strongly connected component of more than one module), each with the
//! arrows that tie it and the files that draw them. At most one pair of modules per crate may import each other,
//! named below with the reason, and ARCHITECTURE.md must name it too.
//!
//! ARCHITECTURE.md's table of `tower-cancel`'s floors is checked against the same plan (`floor_plan/drawing.rs`):
//! a row per module, naming exactly the modules it imports, each on a lower floor.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
};

#[path = "floor_plan/drawing.rs"]
mod drawing;

/// The one pair of `tower-cancel`'s modules allowed to import each other, with ARCHITECTURE.md saying why: none.
const CORE_ALLOWED_PAIR: Option<[&str; 2]> = None;

/// The one pair of `tower-cancel-io`'s modules allowed to import each other: none.
const IO_ALLOWED_PAIR: Option<[&str; 2]> = None;

#[test]
fn tower_cancel_has_no_import_circle() {
    check_crate("crates/tower-cancel", CORE_ALLOWED_PAIR);
}

#[test]
fn tower_cancel_io_has_no_import_circle() {
    check_crate("crates/tower-cancel-io", IO_ALLOWED_PAIR);
}

/// ARCHITECTURE.md draws `tower-cancel`'s floor plan: every module a row, on a floor above each module it stands
/// on, naming exactly the modules it imports.
#[test]
fn architecture_draws_tower_cancel_as_it_is() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let plan = FloorPlan::read(&root.join("crates/tower-cancel/src"));
    let text = fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let drawn = drawing::read(&text, &plan.modules);
    // A table read as empty, or a column read as nothing, would pass the comparison below as little as the code's.
    assert!(
        drawn.len() >= 5,
        "only {} rooms read from ARCHITECTURE.md",
        drawn.len()
    );
    let arrows: BTreeSet<(String, String)> = plan.arrows.keys().cloned().collect();
    let differences = drawing::differences(&drawn, &plan.modules, &arrows);
    assert!(
        differences.is_empty(),
        "ARCHITECTURE.md's floor plan differs from tower-cancel's imports:\n{differences}"
    );
}

/// Fail with every circle of the crate at `dir` (from the workspace's root) but `allowed`.
fn check_crate(dir: &str, allowed: Option<[&str; 2]>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(dir)
        .join("src");
    let plan = FloorPlan::read(&src);
    // A wrong path or a reader that sees nothing would pass: a crate of ours has several modules and arrows.
    assert!(
        plan.modules.len() >= 5 && plan.arrows.len() >= 3,
        "{dir}: only {} modules and {} arrows read from {}",
        plan.modules.len(),
        plan.arrows.len(),
        src.display()
    );
    let report = plan.report(allowed);
    assert!(report.is_empty(), "import circles in {dir}/src:\n{report}");
}

/// A crate's top-level modules and the arrows between them.
#[derive(Debug, Default)]
struct FloorPlan {
    modules: BTreeSet<String>,
    /// (from, to) -> the files of `from` that import `to`, relative to `src/`.
    arrows: BTreeMap<(String, String), BTreeSet<String>>,
}

impl FloorPlan {
    /// The plan of the crate whose sources are under `src`.
    fn read(src: &Path) -> Self {
        let mut files = Vec::new();
        collect_rust_files(src, src, &mut files);
        let sources: Vec<(String, String)> = files
            .into_iter()
            .map(|(relative, path)| {
                let text =
                    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                (relative, text)
            })
            .collect();
        Self::from_sources(
            sources
                .iter()
                .map(|(path, text)| (path.as_str(), text.as_str())),
        )
    }

    /// The plan of the files given as (path relative to `src/` with `/` separators, source text).
    fn from_sources<'a>(files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let files: Vec<(&str, SourceFile)> = files
            .into_iter()
            .map(|(path, text)| (path, SourceFile::parse(path, text)))
            .collect();
        let test_only: Vec<String> = files
            .iter()
            .flat_map(|(_, file)| file.test_only_children.iter().cloned())
            .collect();
        let is_test_only = |path: &str| {
            test_only.iter().any(|child| {
                path == format!("{child}.rs") || path.starts_with(&format!("{child}/"))
            })
        };
        let code: Vec<(&str, &SourceFile)> = files
            .iter()
            .filter(|(path, file)| !file.is_test_only && !is_test_only(path))
            .map(|(path, file)| (*path, file))
            .collect();

        let root = code.iter().find(|(path, _)| *path == "lib.rs");
        let reexports = root.map(|(_, lib)| lib.reexports()).unwrap_or_default();
        let mut plan = FloorPlan::default();
        for (path, _) in &code {
            if let Some(module) = top_module(path) {
                plan.modules.insert(module);
            }
        }
        for (path, file) in &code {
            let Some(from) = top_module(path) else {
                continue;
            };
            for first in file.crate_paths() {
                let to = if plan.modules.contains(&first) {
                    first
                } else if let Some(module) = reexports.get(&first) {
                    module.clone()
                } else {
                    continue;
                };
                if to != from && plan.modules.contains(&to) {
                    plan.arrows
                        .entry((from.clone(), to))
                        .or_default()
                        .insert((*path).to_owned());
                }
            }
        }
        plan
    }

    /// The circles, largest first, each a sorted list of modules.
    fn circles(&self) -> Vec<Vec<String>> {
        let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (from, to) in self.arrows.keys() {
            next.entry(from).or_default().push(to);
        }
        let mut circles: Vec<Vec<String>> = strongly_connected(&self.modules, &next)
            .into_iter()
            .filter(|component| component.len() > 1)
            .collect();
        circles.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        circles
    }

    /// Every circle but the allowed pair, each with its arrows; empty when there is none.
    fn report(&self, allowed: Option<[&str; 2]>) -> String {
        let mut report = String::new();
        for circle in self.circles() {
            if allowed.is_some_and(|pair| {
                circle.len() == 2 && pair.iter().all(|m| circle.iter().any(|c| c == m))
            }) {
                continue;
            }
            let _ = writeln!(
                report,
                "cycle of {} modules: {}",
                circle.len(),
                circle.join(" ")
            );
            for ((from, to), files) in &self.arrows {
                if circle.contains(from) && circle.contains(to) {
                    let files: Vec<&str> = files.iter().map(String::as_str).collect();
                    let _ = writeln!(report, "  {from} -> {to}  ({})", files.join(", "));
                }
            }
        }
        report
    }
}

/// Every `.rs` file under `dir`, as (its path relative to `src` with `/` separators, its path).
fn collect_rust_files(src: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            collect_rust_files(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let relative = path.strip_prefix(src).expect("under src");
            let relative: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            out.push((relative.join("/"), path));
        }
    }
}

/// The top-level module a file belongs to (`x.rs`, `x/...` -> `x`); none for the crate's root.
fn top_module(path: &str) -> Option<String> {
    if path == "lib.rs" || path == "main.rs" {
        return None;
    }
    let first = path.split('/').next().expect("a path");
    Some(first.strip_suffix(".rs").unwrap_or(first).to_owned())
}

/// Tarjan's algorithm: the strongly connected components of the graph.
fn strongly_connected(
    nodes: &BTreeSet<String>,
    next: &BTreeMap<&str, Vec<&str>>,
) -> Vec<Vec<String>> {
    #[derive(Default)]
    struct Walk<'a> {
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        components: Vec<Vec<String>>,
    }

    fn visit<'a>(v: &'a str, next: &BTreeMap<&str, Vec<&'a str>>, walk: &mut Walk<'a>) {
        let index = walk.index.len();
        walk.index.insert(v, index);
        walk.low.insert(v, index);
        walk.stack.push(v);
        walk.on_stack.insert(v);
        for &w in next.get(v).into_iter().flatten() {
            if !walk.index.contains_key(w) {
                visit(w, next, walk);
                let low = walk.low[v].min(walk.low[w]);
                walk.low.insert(v, low);
            } else if walk.on_stack.contains(w) {
                let low = walk.low[v].min(walk.index[w]);
                walk.low.insert(v, low);
            }
        }
        if walk.low[v] == walk.index[v] {
            let mut component = Vec::new();
            loop {
                let w = walk.stack.pop().expect("v is on the stack");
                walk.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            component.sort();
            walk.components.push(component);
        }
    }

    let mut walk = Walk::default();
    for node in nodes {
        if !walk.index.contains_key(node.as_str()) {
            visit(node, next, &mut walk);
        }
    }
    walk.components
}

/// One source file, read as far as the floor plan needs: its tokens outside comments, literals and test code.
#[derive(Debug)]
struct SourceFile {
    tokens: Vec<String>,
    /// `#![cfg(test)]` at its top.
    is_test_only: bool,
    /// The files its test-only `mod x;` declare, as paths relative to `src/` without `.rs`.
    test_only_children: Vec<String>,
}

impl SourceFile {
    fn parse(path: &str, text: &str) -> Self {
        let tokens = tokenize(text);
        // A file's `mod x;` is `x.rs` beside it for the crate's root and a `mod.rs`, `stem/x.rs` for `stem.rs`.
        let children_dir = match path.rsplit_once('/') {
            _ if path == "lib.rs" || path == "main.rs" => String::new(),
            Some((dir, "mod.rs")) => format!("{dir}/"),
            Some((dir, file)) => format!("{dir}/{}/", file.trim_end_matches(".rs")),
            None => format!("{}/", path.trim_end_matches(".rs")),
        };
        let mut file = SourceFile {
            tokens: Vec::with_capacity(tokens.len()),
            is_test_only: false,
            test_only_children: Vec::new(),
        };
        let mut i = 0;
        while i < tokens.len() {
            if let Some((after, inner)) = cfg_test_attribute(&tokens, i) {
                if inner {
                    file.is_test_only = true;
                    file.tokens.clear();
                    return file;
                }
                let end = item_end(&tokens, skip_attributes(&tokens, after));
                if let Some(name) = declared_module(&tokens[after..end]) {
                    file.test_only_children
                        .push(format!("{children_dir}{name}"));
                }
                i = end;
                continue;
            }
            file.tokens.push(tokens[i].clone());
            i += 1;
        }
        file
    }

    /// The first segment of every `crate::` path in the file: `crate::a::B` gives `a`, `crate::{a, b::C}` `a` and
    /// `b`.
    fn crate_paths(&self) -> Vec<String> {
        let t = &self.tokens;
        let mut firsts = Vec::new();
        for i in 0..t.len() {
            if t[i] == "crate" && t.get(i + 1).is_some_and(|s| s == "::") {
                let mut leaves = Vec::new();
                use_tree(t, i + 2, &[], &mut leaves);
                firsts.extend(
                    leaves
                        .into_iter()
                        .filter_map(|(path, _)| path.into_iter().next()),
                );
            }
        }
        firsts
    }

    /// What a crate's root re-exports: a name -> the module it comes from (`pub use a::{B, c::D as E}` gives
    /// `B` and `E` from `a`).
    fn reexports(&self) -> BTreeMap<String, String> {
        let t = &self.tokens;
        let mut names = BTreeMap::new();
        for i in 0..t.len() {
            if t[i] == "use" {
                let mut leaves = Vec::new();
                use_tree(t, i + 1, &[], &mut leaves);
                for (path, name) in leaves {
                    let path: Vec<&String> = path
                        .iter()
                        .skip_while(|s| *s == "crate" || *s == "self")
                        .collect();
                    if let (Some(module), Some(name)) = (path.first(), name) {
                        names.insert(name, (*module).clone());
                    }
                }
            }
        }
        names
    }
}

/// Parse the use tree at `t[i]` (`a::b`, `a::{b, c::d as e}`, `*`), with the segments in `prefix` before it:
/// each leaf's path and the name it binds (none for a glob). Also reads a path in an expression or a type
/// (`a::f(..)`, `a::T<..>`): it stops at the first token that cannot continue a path. Returns where it stopped.
fn use_tree(
    t: &[String],
    mut i: usize,
    prefix: &[String],
    leaves: &mut Vec<(Vec<String>, Option<String>)>,
) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match t.get(i).map(String::as_str) {
            Some("{") => {
                i += 1;
                while i < t.len() && t[i] != "}" {
                    i = use_tree(t, i, &path, leaves);
                    // Past the comma, or past a token that is no part of a use tree.
                    if t.get(i).is_some_and(|s| s != "}") {
                        i += 1;
                    }
                }
                return i + 1;
            }
            Some("*") => {
                leaves.push((path, None));
                return i + 1;
            }
            Some(segment) if is_identifier(segment) => {
                path.push(segment.to_owned());
                i += 1;
                if t.get(i).is_some_and(|s| s == "::") {
                    i += 1;
                    continue;
                }
                let name = if t.get(i).is_some_and(|s| s == "as") {
                    i += 2;
                    t.get(i - 1).cloned()
                } else {
                    path.last().cloned()
                };
                leaves.push((path, name));
                return i;
            }
            _ => {
                if !path.is_empty() && path != prefix {
                    let name = path.last().cloned();
                    leaves.push((path, name));
                }
                return i;
            }
        }
    }
}

fn is_identifier(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// At `t[i]`, a `#[cfg(..)]` (or `#![cfg(..)]`) that holds only in a test build: the index after it, and whether
/// it is an inner attribute (the whole file).
fn cfg_test_attribute(t: &[String], i: usize) -> Option<(usize, bool)> {
    if t.get(i)? != "#" {
        return None;
    }
    let inner = t.get(i + 1)? == "!";
    let open = if inner { i + 2 } else { i + 1 };
    if t.get(open)? != "[" || t.get(open + 1)? != "cfg" || t.get(open + 2)? != "(" {
        return None;
    }
    let close = matching(t, open + 2)?;
    let after = matching(t, open)? + 1;
    requires_test(&t[open + 3..close]).then_some((after, inner))
}

/// Whether a `cfg` predicate can only hold in a test build: `test`, `all(.., test, ..)`, `any(` of such `)`.
fn requires_test(predicate: &[String]) -> bool {
    match predicate.first().map(String::as_str) {
        Some("test") => predicate.len() == 1,
        Some(all_or_any @ ("all" | "any")) if predicate.get(1).is_some_and(|s| s == "(") => {
            let Some(close) = matching(predicate, 1) else {
                return false;
            };
            let parts = split_top_level(&predicate[2..close]);
            if all_or_any == "all" {
                parts.iter().any(|p| requires_test(p))
            } else {
                !parts.is_empty() && parts.iter().all(|p| requires_test(p))
            }
        }
        _ => false,
    }
}

/// `tokens` split at its commas outside brackets.
fn split_top_level(tokens: &[String]) -> Vec<&[String]> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, token) in tokens.iter().enumerate() {
        match token.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth = depth.saturating_sub(1),
            "," if depth == 0 => {
                parts.push(&tokens[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < tokens.len() {
        parts.push(&tokens[start..]);
    }
    parts
}

/// The index of the bracket that closes the one at `t[open]`.
fn matching(t: &[String], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, token) in t.iter().enumerate().skip(open) {
        match token.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The index after the attributes (`#[..]`) that start at `t[i]`.
fn skip_attributes(t: &[String], mut i: usize) -> usize {
    while t.get(i).is_some_and(|s| s == "#") && t.get(i + 1).is_some_and(|s| s == "[") {
        match matching(t, i + 1) {
            Some(close) => i = close + 1,
            None => return t.len(),
        }
    }
    i
}

/// The index after the item (or statement, or field) that starts at `t[i]`: its `;`, or the end of its first
/// `{..}` block, or the bracket that closes what holds it.
fn item_end(t: &[String], i: usize) -> usize {
    let mut depth = 0usize;
    for (j, token) in t.iter().enumerate().skip(i) {
        match token.as_str() {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" if depth == 0 => return j,
            ")" | "]" => depth -= 1,
            "}" => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            ";" if depth == 0 => return j + 1,
            _ => {}
        }
    }
    t.len()
}

/// The module an item declares without a body (`pub(crate) mod x;` gives `x`).
fn declared_module(item: &[String]) -> Option<&str> {
    let at = item.iter().position(|s| s == "mod")?;
    match (item.get(at + 1), item.get(at + 2)) {
        (Some(name), Some(semicolon)) if semicolon == ";" => Some(name),
        _ => None,
    }
}

/// The source's tokens, without comments, string, character and byte literals, and lifetimes: identifiers and
/// keywords (and numbers) whole, `::` as one token, every other punctuation character alone.
fn tokenize(source: &str) -> Vec<String> {
    let chars: Vec<char> = source.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            // Block comments nest.
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&chars, i + 1);
        } else if c == '\'' {
            if at(i + 1) == '\\' {
                // An escaped character literal: up to its closing quote.
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or a label: the quote goes, the name after it is an identifier like any other.
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_string = matches!(word.as_str(), "r" | "br" | "cr")
                && (at(i) == '"'
                    || (at(i) == '#' && {
                        let mut j = i;
                        while at(j) == '#' {
                            j += 1;
                        }
                        at(j) == '"'
                    }));
            if raw_string {
                let mut hashes = 0;
                while at(i) == '#' {
                    hashes += 1;
                    i += 1;
                }
                i += 1;
                // Up to a quote followed by as many hashes.
                while i < chars.len() {
                    if chars[i] == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                        i += 1 + hashes;
                        break;
                    }
                    i += 1;
                }
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = skip_string(&chars, i + 1);
            } else if word == "b" && at(i) == '\'' {
                // A byte literal: the quote is read as a character literal's.
                continue;
            } else {
                tokens.push(word);
            }
        } else if c == ':' && at(i + 1) == ':' {
            tokens.push("::".to_owned());
            i += 2;
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

/// The index after the string literal whose contents start at `chars[i]`.
fn skip_string(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

// The checker itself, on small crates of a few lines: each of these would pass if it read nothing.

fn plan(files: &[(&str, &str)]) -> FloorPlan {
    FloorPlan::from_sources(files.iter().copied())
}

fn arrows(plan: &FloorPlan) -> Vec<String> {
    plan.arrows
        .keys()
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect()
}

#[test]
fn checker_finds_a_loop_of_two_modules_and_names_it() {
    let plan = plan(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "use crate::b::Thing;"),
        ("b/mod.rs", "mod inner;"),
        ("b/inner.rs", "pub(crate) fn f() { crate::a::g() }"),
        ("c.rs", "use crate::a;"),
    ]);
    assert_eq!(plan.circles(), vec![vec!["a".to_owned(), "b".to_owned()]]);
    let report = plan.report(None);
    assert!(report.starts_with("cycle of 2 modules: a b\n"), "{report}");
    assert!(report.contains("  b -> a  (b/inner.rs)"), "{report}");
    assert!(!report.contains("c ->"), "{report}");
}

#[test]
fn checker_lets_the_allowed_pair_pass_and_nothing_larger() {
    let pair = plan(&[("a.rs", "use crate::b;"), ("b.rs", "use crate::a;")]);
    assert!(pair.report(Some(["b", "a"])).is_empty());
    assert!(!pair.report(Some(["a", "c"])).is_empty());
    let three = plan(&[
        ("a.rs", "use crate::b;"),
        ("b.rs", "use crate::c;"),
        ("c.rs", "use crate::a;"),
    ]);
    assert!(three
        .report(Some(["a", "b"]))
        .starts_with("cycle of 3 modules: a b c"));
}

#[test]
fn checker_makes_an_arrow_for_each_module_of_a_group() {
    let plan = plan(&[
        (
            "a.rs",
            "use crate::{b, c::{D, e::F}, self as _};\nuse crate::d::*;",
        ),
        ("b.rs", ""),
        ("c.rs", ""),
        ("d.rs", ""),
        ("e.rs", "use crate::{\n    // crate::a\n    b::X,\n};"),
    ]);
    assert_eq!(arrows(&plan), ["a -> b", "a -> c", "a -> d", "e -> b"]);
}

#[test]
fn checker_reads_no_arrow_in_test_code_comments_or_literals() {
    let plan = plan(&[
        ("lib.rs", "mod a; #[cfg(test)] mod helpers;"),
        (
            "a.rs",
            r##"
            //! See [`crate::b`].
            // use crate::c;
            /* use crate::d; /* nested */ use crate::e; */
            const S: &str = "crate::f";
            const R: &str = r#"crate::g "quoted""#;
            fn f<'a>(x: &'a str) -> char { let _ = b'"'; '"' }

            #[cfg(test)]
            mod tests {
                use crate::h;
                fn inner() { use crate::i; }
            }

            #[cfg(all(test, loom))]
            use crate::j::J;

            #[cfg(not(test))]
            use crate::k;
            "##,
        ),
        ("b.rs", ""),
        ("c.rs", ""),
        ("d.rs", ""),
        ("e.rs", ""),
        ("f.rs", ""),
        ("g.rs", ""),
        ("h.rs", ""),
        ("i.rs", ""),
        ("j.rs", ""),
        ("k.rs", ""),
        ("helpers.rs", "use crate::a;"),
        (
            "m/mod.rs",
            "#[cfg(all(test, loom))]\nmod model;\n#[cfg(loom)] mod mocked;",
        ),
        ("m/model.rs", "use crate::a;"),
        ("m/mocked.rs", "use crate::b;"),
        ("n.rs", "#![cfg(test)]\nuse crate::a;"),
    ]);
    assert_eq!(arrows(&plan), ["a -> k", "m -> b"]);
    assert!(!plan.modules.contains("helpers"), "{:?}", plan.modules);
}

#[test]
fn checker_follows_a_name_the_crate_root_reexports() {
    let plan = plan(&[
        ("lib.rs", "pub use b::{Thing, inner::Other as Renamed};"),
        ("a.rs", "fn f(_: crate::Renamed) {}"),
        ("b.rs", "use crate::a;"),
        ("c.rs", "use crate::Thing; use crate::BoxError;"),
    ]);
    assert_eq!(arrows(&plan), ["a -> b", "b -> a", "c -> b"]);
    assert_eq!(plan.circles().len(), 1);
}

#[test]
fn drawing_is_read_row_by_row_and_each_difference_named() {
    let modules: BTreeSet<String> = ["a", "b", "c", "d"].iter().map(|m| m.to_string()).collect();
    let text = "\
```text
floor  what stands there                                        what it stands on
  3    a/             the top                                   b, c (an aside: d)
                      more of a                                 d
  2    b.rs           the middle                                c
  1    c.rs           the ground                                nothing
       d.rs           also the ground                           nothing
```
";
    let drawn = drawing::read(text, &modules);
    let floors: Vec<(&str, u32)> = drawn
        .iter()
        .map(|(room, row)| (room.as_str(), row.floor))
        .collect();
    assert_eq!(floors, [("a", 3), ("b", 2), ("c", 1), ("d", 1)]);
    let a: Vec<&str> = drawn["a"].stands_on.iter().map(String::as_str).collect();
    assert_eq!(
        a,
        ["b", "c", "d"],
        "the aside's d is not read, the next line's is"
    );
    let arrows = |list: &[(&str, &str)]| -> BTreeSet<(String, String)> {
        list.iter()
            .map(|(f, t)| (f.to_string(), t.to_string()))
            .collect()
    };
    let agreeing = arrows(&[("a", "b"), ("a", "c"), ("a", "d"), ("b", "c")]);
    assert_eq!(drawing::differences(&drawn, &modules, &agreeing), "");
    // a's d not imported; c -> d drawn as nothing, and on one floor.
    let differing = arrows(&[("a", "b"), ("a", "c"), ("b", "c"), ("c", "d")]);
    let report = drawing::differences(&drawn, &modules, &differing);
    assert!(
        report.contains("a: drawn standing on d, which it does not import"),
        "{report}"
    );
    assert!(
        report.contains("c: imports d but the drawing does not say so"),
        "{report}"
    );
    assert!(
        report.contains("c (floor 1) stands on d (floor 1): not a floor below it"),
        "{report}"
    );
    assert_eq!(report.lines().count(), 3, "{report}");
}
