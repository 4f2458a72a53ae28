//! Keeps every crate of the workspace free of import cycles between modules, at every depth:
//! reads each crate's `src/`, resolves every path a module names (`crate::…`, `super::…`,
//! `self::…`, also inside `use` groups, and through a parent's `pub use child::Item`
//! re-exports) to the module it lands in, and fails on any cycle between sibling modules,
//! naming it. Layers stay layers: a parent's items are the ground its children stand on, so a
//! child may use them; but two siblings never use each other, directly or round a ring, and
//! leaves (config, store, hub, providers, dkim…) never reach back up to the state, the services
//! or the API.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

/// A module's path inside its crate (`["store", "writer"]`); the crate root is `[]`.
type ModPath = Vec<String>;

/// Edges between siblings: for each parent, which of its children uses which.
type Graph = BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>>;

/// One source file: its module path and its code (comments and test modules removed).
struct Source {
    module: ModPath,
    code: String,
}

/// The modules of a crate's `src/`, one per file (`foo.rs` and `foo/mod.rs` are `foo`).
fn sources(src: &Path) -> Vec<Source> {
    fn walk(dir: &Path, module: &ModPath, out: &mut Vec<Source>) {
        let mut entries: Vec<PathBuf> =
            std::fs::read_dir(dir).expect("read src").flatten().map(|e| e.path()).collect();
        entries.sort();
        for path in entries {
            let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
            if path.is_dir() {
                // `bin/` holds binaries, each a crate of its own.
                if !(module.is_empty() && name == "bin") {
                    let mut inner = module.clone();
                    inner.push(name);
                    walk(&path, &inner, out);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || name == "tests" {
                continue;
            }
            let mut this = module.clone();
            if !(["mod", "lib", "main"].contains(&name.as_str())
                || (module.is_empty() && name == "module_graph"))
            {
                this.push(name);
            }
            let text = std::fs::read_to_string(&path).expect("read a source file");
            out.push(Source { module: this, code: code_of(&text) });
        }
    }
    let mut out = Vec::new();
    walk(src, &Vec::new(), &mut out);
    out
}

/// The code of a file without comments and without its `#[cfg(test)]` modules' bodies (tests may
/// reach anywhere).
fn code_of(text: &str) -> String {
    let without_comments: String =
        text.lines().map(|line| line.split("//").next().unwrap_or_default()).collect::<Vec<_>>().join("\n");
    match without_comments.find("#[cfg(test)]\nmod tests") {
        Some(at) => without_comments[..at].to_owned(),
        None => without_comments,
    }
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Reads a path tree at `at` (`a::b`, `a::{b, c::{d, e}}`, `a::*`), appending every full path to
/// `out` with `prefix` before it; returns where it ended.
fn path_tree(code: &[u8], mut at: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        while code.get(at).is_some_and(|c| c.is_ascii_whitespace()) {
            at += 1;
        }
        match code.get(at) {
            Some(b'{') => {
                at += 1;
                loop {
                    at = path_tree(code, at, &path, out);
                    while code.get(at).is_some_and(|c| c.is_ascii_whitespace() || *c == b',') {
                        at += 1;
                    }
                    match code.get(at) {
                        Some(b'}') => return at + 1,
                        None => return at,
                        _ => {}
                    }
                }
            }
            Some(c) if is_ident(*c) => {
                let start = at;
                while code.get(at).is_some_and(|c| is_ident(*c)) {
                    at += 1;
                }
                path.push(String::from_utf8_lossy(&code[start..at]).into_owned());
                if code.get(at..at + 2) == Some(b"::") {
                    at += 2;
                    continue;
                }
                out.push(path);
                return at;
            }
            // `*`, or anything else: the path so far.
            _ => {
                out.push(path);
                return at;
            }
        }
    }
}

/// Every path in `code` that starts with `crate`, `super` or `self`, made absolute from
/// `module` (the module the code is in).
fn paths_in(code: &str, module: &ModPath) -> Vec<ModPath> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = code[from..].find(start).map(|n| n + from) {
            from = at + start.len();
            if at > 0 && is_ident(bytes[at - 1]) {
                continue;
            }
            let mut paths = Vec::new();
            path_tree(bytes, at, &[], &mut paths);
            for path in paths {
                let mut absolute: ModPath = Vec::new();
                let mut parts = path.into_iter().peekable();
                match parts.peek().map(String::as_str) {
                    Some("crate") => {
                        parts.next();
                    }
                    Some("self") => {
                        parts.next();
                        absolute = module.clone();
                    }
                    _ => {
                        absolute = module.clone();
                        while parts.next_if(|p| p == "super").is_some() {
                            absolute.pop();
                        }
                    }
                }
                absolute.extend(parts);
                found.push(absolute);
            }
        }
    }
    found
}

/// The edges between siblings of one crate.
fn module_graph(src: &Path) -> Graph {
    let sources = sources(src);
    let modules: BTreeSet<ModPath> = sources.iter().map(|s| s.module.clone()).collect();
    // A parent's re-exports: `pub use child::Item` makes `parent::Item` land in `child`.
    let mut reexports: BTreeMap<ModPath, String> = BTreeMap::new();
    for source in &sources {
        for line in source.code.split(';') {
            let line = line.trim_start();
            let Some(rest) = ["pub use ", "pub(crate) use ", "pub(super) use ", "pub(in crate::"]
                .iter()
                .find_map(|p| line.strip_prefix(p))
            else {
                continue;
            };
            let rest = rest.split_once("use ").map_or(rest, |(_, r)| r);
            let mut paths = Vec::new();
            path_tree(rest.as_bytes(), 0, &[], &mut paths);
            for path in paths {
                let mut child = source.module.clone();
                child.push(path[0].clone());
                if path.len() > 1 && modules.contains(&child) {
                    let mut item = source.module.clone();
                    item.push(path[path.len() - 1].clone());
                    reexports.insert(item, path[0].clone());
                }
            }
        }
    }
    let mut graph = Graph::new();
    for source in &sources {
        for target in paths_in(&source.code, &source.module) {
            let common = source.module.iter().zip(&target).take_while(|(a, b)| a == b).count();
            // A module using itself, something inside itself, or its own ancestors' items.
            if common >= source.module.len() || common >= target.len() {
                continue;
            }
            let parent = source.module[..common].to_vec();
            let from = source.module[common].clone();
            let mut named = parent.clone();
            named.push(target[common].clone());
            let to = if modules.contains(&named) || modules.iter().any(|m| m.starts_with(&named)) {
                target[common].clone()
            } else if let Some(child) = reexports.get(&named) {
                child.clone()
            } else {
                continue;
            };
            if to != from {
                graph.entry(parent).or_default().entry(from).or_default().insert(to);
            }
        }
    }
    graph
}

/// A cycle among one parent's children, if there is one (depth-first search with the path kept).
fn find_cycle(edges: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, edges, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges.keys().find_map(|node| visit(node, edges, &mut Vec::new(), &mut done))
}

/// Every cycle of a crate's graph, one per parent that has one, as `parent: a -> b -> a`.
fn cycles(graph: &Graph) -> Vec<String> {
    graph
        .iter()
        .filter_map(|(parent, edges)| {
            let cycle = find_cycle(edges)?;
            let parent = if parent.is_empty() { "crate".to_owned() } else { parent.join("::") };
            Some(format!("{parent}: {}", cycle.join(" -> ")))
        })
        .collect()
}

#[test]
fn no_crate_of_the_workspace_has_an_import_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for krate in ["common", "daemon", "cli", "tui", "tests", "bench"] {
        let src = root.join(krate).join("src");
        let graph = module_graph(&src);
        if krate == "daemon" {
            assert!(
                graph.get(&Vec::new()).is_some_and(|g| g.len() > 10),
                "the modules were found: {graph:?}"
            );
        }
        found.extend(cycles(&graph).into_iter().map(|c| format!("{krate}/src: {c}")));
    }
    assert!(found.is_empty(), "import cycles between sibling modules:\n{}", found.join("\n"));
}

#[test]
fn the_checker_sees_grouped_imports_and_cycles() {
    let module = vec!["store".to_owned(), "writer".to_owned()];
    let code = "use crate::{a::X, b::{Y, Z}, c};\nfn f() { crate::d::g(); super::e::h(); self::i::j(); }\n\
                use super::{Conn, notifications::{Dispatch, x}};";
    let found: BTreeSet<String> = paths_in(code, &module).into_iter().map(|p| p.join("::")).collect();
    let expected = [
        "a::X",
        "b::Y",
        "b::Z",
        "c",
        "d::g",
        "store::e::h",
        "store::writer::i::j",
        "store::Conn",
        "store::notifications::Dispatch",
        "store::notifications::x",
    ];
    assert_eq!(found, expected.into_iter().map(String::from).collect());
    let edges: BTreeMap<String, BTreeSet<String>> =
        [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec![])]
            .into_iter()
            .map(|(m, uses)| (m.to_owned(), uses.into_iter().map(String::from).collect()))
            .collect();
    assert_eq!(find_cycle(&edges), Some(["a", "b", "c", "a"].map(String::from).to_vec()));
    let mut acyclic = edges.clone();
    acyclic.insert("c".to_owned(), BTreeSet::new());
    assert_eq!(find_cycle(&acyclic), None);
}

/// The store's old cycle, as it was written: the writer named the notifications' work through
/// `super::`, and the notifications named the writer's queue back, one of them through the
/// parent's re-export.
#[test]
fn the_checker_sees_a_cycle_through_super_and_a_reexport() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    std::fs::create_dir_all(store.join("notifications")).unwrap();
    std::fs::write(dir.path().join("lib.rs"), "mod store;").unwrap();
    std::fs::write(
        store.join("mod.rs"),
        "mod notifications;\nmod writer;\npub use writer::WriterHandle;\npub struct Conn;",
    )
    .unwrap();
    std::fs::write(
        store.join("writer.rs"),
        "use super::{Conn, notifications};\nfn f() { notifications::run(); }",
    )
    .unwrap();
    std::fs::write(
        store.join("notifications").join("mod.rs"),
        "use super::Conn;\nfn g(_: super::WriterHandle) {}",
    )
    .unwrap();
    let graph = module_graph(dir.path());
    assert_eq!(cycles(&graph), ["store: notifications -> writer -> notifications"]);
    // Without the re-export's use, the writer alone names its sibling: no cycle.
    std::fs::write(store.join("notifications").join("mod.rs"), "use super::Conn;").unwrap();
    assert!(cycles(&module_graph(dir.path())).is_empty());
}
