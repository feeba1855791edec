//! The core's layout as CONTRIBUTING.md draws it ("The core's folders"):
//! each folder uses only the folders above it in the drawing (and `sys`),
//! no two modules of a folder use each other in a cycle (their tests
//! aside, and the folder's `mod.rs`, whose types its modules may use), and
//! no source file is over 700 lines. Read from the sources, so
//! a `use` that breaks the drawing fails here, not in a reviewer's head.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The drawing's order, top first.
const FOLDERS: [&str; 8] = [
    "sys", "spec", "host", "confine", "launch", "watch", "terminal", "executor",
];

const MAX_LINES: usize = 700;

struct Source {
    /// `executor/foreground` (`executor/mod` for a folder's own module).
    module: String,
    folder: String,
    /// The file without its `#[cfg(test)]` module.
    code: String,
    lines: usize,
}

fn sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .filter_map(|path: PathBuf| {
            let relative = path.strip_prefix(&root).unwrap().with_extension("");
            let module = relative.to_string_lossy().into_owned();
            if module == "lib" {
                return None; // declares and re-exports every folder
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let folder = module.split('/').next().unwrap().to_owned();
            // A module's tests may use anything: cut them off.
            let code = match text.find("#[cfg(test)]\nmod tests") {
                Some(at) => text[..at].to_owned(),
                None if module.ends_with("_tests") => String::new(),
                None => text.clone(),
            };
            Some(Source {
                module,
                folder,
                code,
                lines: text.lines().count(),
            })
        })
        .collect()
}

/// Every `crate::a::b…` path in `code`, as its segments.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
            continue; // `dsh_crate::`, not ours
        }
        let rest = &code[at + "crate::".len()..];
        assert!(
            !rest.starts_with('{'),
            "a grouped `use crate::{{…}}` hides its paths from this check: write one `use` per path"
        );
        let path: Vec<String> = rest
            .split("::")
            .map(|s| {
                s.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
            .take_while(|s| !s.is_empty())
            .collect();
        out.push(path);
    }
    out
}

/// The modules of `folder` a module of it names: `super::x`, `crate::folder::x`
/// and, in `mod.rs`, a child's `x::`.
fn sibling_uses(source: &Source, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let folder = &source.folder;
    let mut used = BTreeSet::new();
    for path in crate_paths(&source.code) {
        if path.len() >= 2 && &path[0] == folder {
            used.insert(format!("{folder}/{}", path[1]));
        }
    }
    let parent = if source.module.ends_with("/mod") {
        source.module.clone()
    } else {
        format!("{folder}/mod")
    };
    for (at, _) in source.code.match_indices("super::") {
        let name: String = source.code[at + "super::".len()..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let sibling = format!("{folder}/{name}");
        used.insert(if modules.contains(&sibling) {
            sibling
        } else {
            parent.clone()
        });
    }
    if source.module.ends_with("/mod") {
        for m in modules.iter().filter(|m| m.starts_with(&format!("{folder}/"))) {
            let name = m.rsplit('/').next().unwrap();
            let code = &source.code;
            let named = code
                .match_indices(&format!("{name}::"))
                .any(|(at, _)| !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':'));
            if named {
                used.insert(m.clone());
            }
        }
    }
    // A folder's `mod.rs` is its front, declaring the folder's own types:
    // its modules may use what it declares (a module that adds methods to
    // its type must), so uses of it make no cycle here.
    used.retain(|m| modules.contains(m) && *m != source.module && !m.ends_with("/mod"));
    used
}

#[test]
fn each_folder_uses_only_the_folders_above_it() {
    let rank = |f: &str| FOLDERS.iter().position(|x| *x == f);
    let mut wrong = Vec::new();
    let sources = sources();
    assert!(sources.len() > 20, "the sources were not found");
    for source in &sources {
        let own = rank(&source.folder)
            .unwrap_or_else(|| panic!("{} is in a folder the drawing does not have", source.module));
        for path in crate_paths(&source.code) {
            let Some(first) = path.first() else { continue };
            if let Some(used) = rank(first) {
                if used > own {
                    wrong.push(format!("{} uses crate::{}", source.module, path.join("::")));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "uses from a folder below (CONTRIBUTING.md):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_two_modules_of_a_folder_use_each_other_in_a_cycle() {
    let sources = sources();
    let modules: BTreeSet<String> = sources.iter().map(|s| s.module.clone()).collect();
    let graph: BTreeMap<String, BTreeSet<String>> = sources
        .iter()
        .map(|s| (s.module.clone(), sibling_uses(s, &modules)))
        .collect();
    // Depth-first search with colours: grey on the stack, black done.
    fn visit<'a>(
        m: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        colour: &mut BTreeMap<&'a str, u8>,
        stack: &mut Vec<&'a str>,
    ) -> Option<Vec<String>> {
        colour.insert(m, 1);
        stack.push(m);
        for next in &graph[m] {
            match colour.get(next.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|s| s == next).unwrap();
                    let mut cycle: Vec<String> = stack[from..].iter().map(|s| s.to_string()).collect();
                    cycle.push(next.clone());
                    return Some(cycle);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(next, graph, colour, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        colour.insert(m, 2);
        None
    }
    let mut colour = BTreeMap::new();
    for m in graph.keys() {
        if !colour.contains_key(m.as_str()) {
            if let Some(cycle) = visit(m, &graph, &mut colour, &mut Vec::new()) {
                panic!("an import cycle inside a folder: {}", cycle.join(" → "));
            }
        }
    }
}

#[test]
fn no_source_file_is_over_700_lines() {
    let long: Vec<String> = sources()
        .iter()
        .filter(|s| s.lines > MAX_LINES)
        .map(|s| format!("{}.rs: {} lines", s.module, s.lines))
        .collect();
    assert!(
        long.is_empty(),
        "split these (CONTRIBUTING.md):\n{}",
        long.join("\n")
    );
}
