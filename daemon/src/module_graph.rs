//! Keeps the daemon's top-level modules free of import cycles: reads `src/`, finds which
//! top-level modules each one uses (`crate::x`, also inside `use crate::{…}` groups), and fails
//! on any cycle, naming it. Layers stay layers: leaves (config, store, hub, providers, dkim…)
//! never reach back up to the state, the services or the API.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

type Graph = BTreeMap<String, BTreeSet<String>>;

fn source_files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for entry in std::fs::read_dir(path).expect("read src").flatten() {
            source_files(&entry.path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_owned());
    }
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

/// The top-level names used through `crate::` in `code`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let start = code.len() - rest.len() + at + "crate::".len();
        rest = &code[start..];
        if bytes.get(start) == Some(&b'{') {
            // A group: the first name of each comma-separated part at depth one.
            let mut depth = 0;
            let mut expecting = true;
            let mut i = start;
            while i < bytes.len() {
                match bytes[i] {
                    b'{' => {
                        depth += 1;
                        expecting = depth == 1;
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b',' if depth == 1 => expecting = true,
                    c if depth == 1 && expecting && (c.is_ascii_alphabetic() || c == b'_') => {
                        let end = code[i..]
                            .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
                            .map_or(code.len(), |n| i + n);
                        names.insert(code[i..end].to_owned());
                        expecting = false;
                        i = end;
                        continue;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            let end = rest.find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_')).unwrap_or(rest.len());
            names.insert(rest[..end].to_owned());
        }
    }
    names
}

fn module_graph(src: &Path) -> Graph {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src).expect("read src").flatten() {
        let path = entry.path();
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
        if ["lib", "main", "module_graph"].contains(&name.as_str()) {
            continue;
        }
        modules.entry(name).or_insert_with(Vec::new).push(path);
    }
    let names: BTreeSet<String> = modules.keys().cloned().collect();
    modules
        .into_iter()
        .map(|(name, paths)| {
            let mut files = Vec::new();
            for path in &paths {
                source_files(path, &mut files);
            }
            let mut uses = BTreeSet::new();
            for file in files {
                let text = std::fs::read_to_string(&file).expect("read a source file");
                uses.extend(
                    crate_paths(&code_of(&text)).into_iter().filter(|n| names.contains(n) && *n != name),
                );
            }
            (name, uses)
        })
        .collect()
}

/// A cycle, if the graph has one (depth-first search with the path kept).
fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
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
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_top_level_modules_have_no_cycle() {
    let graph = module_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.len() > 10, "the modules were found: {graph:?}");
    if let Some(cycle) = find_cycle(&graph) {
        let edges: Vec<String> = graph.iter().map(|(m, uses)| format!("  {m} -> {uses:?}")).collect();
        panic!("import cycle between top-level modules: {}\n{}", cycle.join(" -> "), edges.join("\n"));
    }
}

#[test]
fn the_checker_sees_grouped_imports_and_cycles() {
    let code = "use crate::{a::X, b::{Y, Z}, c};\nfn f() { crate::d::g(); }";
    assert_eq!(crate_paths(code), BTreeSet::from(["a", "b", "c", "d"].map(String::from)));
    let graph: Graph = [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec![])]
        .into_iter()
        .map(|(m, uses)| (m.to_owned(), uses.into_iter().map(String::from).collect()))
        .collect();
    assert_eq!(find_cycle(&graph), Some(["a", "b", "c", "a"].map(String::from).to_vec()));
    let mut acyclic = graph.clone();
    acyclic.insert("c".to_owned(), BTreeSet::new());
    assert_eq!(find_cycle(&acyclic), None);
}
