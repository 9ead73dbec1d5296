//! The code stays readable and layered.
//!
//! - No function in `src/` over 100 lines (from its `fn` line to its closing brace, nested
//!   closures included).
//! - The module graph of `src/` has no cycle. A file depends on the files it names: `use
//!   crate::…`, `use super::…`, `use self::…`, `use child::…` of a module it declares, and
//!   inline paths such as `crate::a::b` or `super::x` in code (comments and strings stripped,
//!   `{…}` use trees expanded), each path mapped to the longest module file it reaches
//!   (`a/b.rs` or `a/b/mod.rs`). A parent's `mod child;` and `pub use child::…` are the
//!   module's public face, not dependencies. No allowance: a new cycle fails the test.
//! - The layers import downward only ([`LAYERS`], the order of `src/lib.rs`'s module doc): the
//!   simulation (`model`, `rl`, `task`, `metrics`) never reads the experiment runner, the
//!   report or the commands, and the report never reads the commands.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MAX_FN_LINES: usize = 100;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `text` with comments, string and char literals blanked out (newlines kept), so braces and
/// `fn` can be found by plain scanning.
fn code_only(text: &str) -> Vec<char> {
    let c: Vec<char> = text.chars().collect();
    let mut out = c.clone();
    let blank = |out: &mut Vec<char>, a: usize, b: usize| {
        for x in &mut out[a..b.min(c.len())] {
            if *x != '\n' {
                *x = ' ';
            }
        }
    };
    let mut i = 0;
    while i < c.len() {
        let start = i;
        if c[i] == '/' && c.get(i + 1) == Some(&'/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
            blank(&mut out, start, i);
        } else if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            while i + 1 < c.len() && !(c[i] == '*' && c[i + 1] == '/') {
                i += 1;
            }
            i += 2;
            blank(&mut out, start, i);
        } else if c[i] == 'r'
            && (c.get(i + 1) == Some(&'"') || c.get(i + 1) == Some(&'#'))
            && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_'))
        {
            let mut j = i + 1;
            let mut hashes = 0;
            while c.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                i += 1;
                continue;
            }
            j += 1;
            let close: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            while j < c.len() && c[j..].iter().take(close.len()).ne(close.iter()) {
                j += 1;
            }
            i = j + close.len();
            blank(&mut out, start, i);
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            blank(&mut out, start, i);
        } else if c[i] == '\'' {
            // A char literal ('x', '\n', '\u{..}'), else a lifetime.
            if c.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < c.len() && c[i] != '\'' {
                    i += 1;
                }
                i += 1;
                blank(&mut out, start, i);
            } else if c.get(i + 2) == Some(&'\'') {
                i += 3;
                blank(&mut out, start, i);
            } else {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// (name, first line, lines) of every function with a body.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let c = code_only(text);
    let line_of = |pos: usize| c[..pos].iter().filter(|&&x| x == '\n').count() + 1;
    let mut out = Vec::new();
    let mut i = 0;
    while i + 3 < c.len() {
        let word_start = i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_');
        if word_start && c[i] == 'f' && c[i + 1] == 'n' && c[i + 2].is_whitespace() {
            let name: String = c[i + 3..]
                .iter()
                .skip_while(|x| x.is_whitespace())
                .take_while(|x| x.is_alphanumeric() || **x == '_')
                .collect();
            let mut j = i + 3;
            while j < c.len() && c[j] != '{' && c[j] != ';' {
                j += 1;
            }
            if j < c.len() && c[j] == '{' {
                let mut depth = 0;
                let mut k = j;
                while k < c.len() {
                    match c[k] {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                    k += 1;
                }
                out.push((name, line_of(i), line_of(k) - line_of(i) + 1));
            }
            i += 2;
        } else {
            i += 1;
        }
    }
    out
}

#[test]
fn the_scanner_measures_functions_by_hand() {
    let text = "fn a() {\n    let s = \"}\";\n    let c = '{';\n}\n// fn b() {\nfn c<'x>(v: &'x str) -> usize { v.len() }\ntrait T { fn d(&self); }\n";
    assert_eq!(
        functions(text),
        vec![("a".into(), 1, 4), ("c".into(), 6, 1)]
    );
}

#[test]
fn no_function_over_100_lines() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 20, "found the sources");
    let mut long = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (name, at, n) in functions(&text) {
            if n > MAX_FN_LINES {
                long.push(format!("{}:{at}: fn {name} has {n} lines", f.display()));
            }
        }
    }
    assert!(long.is_empty(), "too long:\n{}", long.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The module graph: which file of src/ reads which other file.

/// Top-level folders that hold the simulation itself, and what they must never import.
const LOWER: &[&str] = &["model", "rl", "task", "metrics"];
const ABOVE_LOWER: &[&str] = &["experiment", "report", "commands", "cli", "run"];
/// What the report must never import.
const ABOVE_REPORT: &[&str] = &["commands", "cli", "run"];

/// The layers of `src/lib.rs`'s module doc, bottom up, by top-level folder (a file at the
/// root of src/ is its own folder). A folder imports from its own layer and those below.
const LAYERS: &[&[&str]] = &[
    &["util", "device"],
    &["kernels"],
    &["model", "task", "optim"],
    &["generate", "coldstart", "rl"],
    &["metrics"],
    &["experiment", "bench"],
    &["report", "check"],
    &["cli", "commands"],
];

/// One dependency: the file read, with the line and the path that reads it.
#[derive(Clone, Debug, PartialEq)]
struct Edge {
    to: String,
    line: usize,
    path: String,
}

/// file -> the files it reads (first evidence of each), files named `src/...`.
type Graph = BTreeMap<String, BTreeMap<String, Edge>>;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Sep,
    Open,
    Close,
    Semi,
    Comma,
    Star,
    Punct(char),
}

/// The tokens of code (comments and strings already blanked), each with its line.
fn tokens(c: &[char]) -> Vec<(Tok, usize)> {
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < c.len() {
        let x = c[i];
        if x == '\n' {
            line += 1;
            i += 1;
        } else if x.is_whitespace() {
            i += 1;
        } else if x.is_alphanumeric() || x == '_' {
            let s = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(c[s..i].iter().collect()), line));
        } else if x == ':' && c.get(i + 1) == Some(&':') {
            out.push((Tok::Sep, line));
            i += 2;
        } else {
            let t = match x {
                '{' => Tok::Open,
                '}' => Tok::Close,
                ';' => Tok::Semi,
                ',' => Tok::Comma,
                '*' => Tok::Star,
                _ => Tok::Punct(x),
            };
            out.push((t, line));
            i += 1;
        }
    }
    out
}

fn ident(t: Option<&(Tok, usize)>) -> Option<&str> {
    match t {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

/// The paths of a use tree (the tokens between `use` and `;`), braces expanded; `self` in
/// braces names the prefix; a glob or `as` ends a path.
fn expand_use(toks: &[Tok]) -> Vec<Vec<String>> {
    fn walk(toks: &[Tok], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        while *i < toks.len() {
            match &toks[*i] {
                Tok::Ident(s) if s == "as" => {
                    *i += 2;
                }
                // `self` first: in braces the prefix itself, at the start this module.
                Tok::Ident(s) if s == "self" && path.len() == prefix.len() => *i += 1,
                Tok::Ident(s) => {
                    path.push(s.clone());
                    *i += 1;
                }
                Tok::Sep => *i += 1,
                Tok::Star => *i += 1,
                Tok::Open => {
                    *i += 1;
                    while *i < toks.len() && toks[*i] != Tok::Close {
                        walk(toks, i, &path, out);
                        if *i < toks.len() && toks[*i] == Tok::Comma {
                            *i += 1;
                        }
                    }
                    *i += 1;
                    return;
                }
                Tok::Comma | Tok::Close => break,
                _ => *i += 1,
            }
        }
        out.push(path);
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        walk(toks, &mut i, &[], &mut out);
        i += 1;
    }
    out
}

/// Every reference of one file to the crate's modules: (line, absolute module path, path as
/// written, is the module's public face). `module` is the file's own module path, `children`
/// the modules it declares with `mod name;`.
fn references(text: &str, module: &[String]) -> Vec<(usize, Vec<String>, String, bool)> {
    let toks = tokens(&code_only(text));
    let t = |i: usize| toks.get(i).map(|x| &x.0);
    // The modules this file declares: `mod name;` outside any braces.
    let mut children = BTreeSet::new();
    let mut depth = 0usize;
    for i in 0..toks.len() {
        match t(i) {
            Some(Tok::Open) => depth += 1,
            Some(Tok::Close) => depth = depth.saturating_sub(1),
            Some(Tok::Ident(m)) if m == "mod" && depth == 0 => {
                if let (Some(name), Some(Tok::Semi)) = (ident(toks.get(i + 1)), t(i + 2)) {
                    children.insert(name.to_string());
                }
            }
            _ => {}
        }
    }
    // Resolve a path as written in the module `here` (the file's module, then inline ones).
    let resolve = |segs: &[String], inline: usize| -> Option<Vec<String>> {
        let here: Vec<String> = module.to_vec();
        let (first, rest) = segs.split_first()?;
        match first.as_str() {
            "crate" => Some(rest.to_vec()),
            "self" if inline == 0 => Some([&here[..], rest].concat()),
            "self" => None, // an inline module's own items
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                let from = here.len() + inline;
                // inline modules are not files: going up from them lands back in this file
                let keep = from.checked_sub(ups)?;
                let base = &here[..keep.min(here.len())];
                Some([base, &segs[ups..]].concat())
            }
            c if inline == 0 && children.contains(c) => Some([&here[..], segs].concat()),
            _ => None,
        }
    };
    let mut out = Vec::new();
    let mut inline: Vec<usize> = Vec::new(); // brace depth at which each inline `mod` opened
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let line = toks[i].1;
        match &toks[i].0 {
            Tok::Open => depth += 1,
            Tok::Close => {
                if inline.last() == Some(&depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Ident(m) if m == "mod" && ident(toks.get(i + 1)).is_some() => {
                if t(i + 2) == Some(&Tok::Open) {
                    inline.push(depth + 1);
                }
                i += 2;
                continue;
            }
            Tok::Ident(u) if u == "use" => {
                let public = ident(toks.get(i.wrapping_sub(1))) == Some("pub")
                    || (t(i.wrapping_sub(1)) == Some(&Tok::Punct(')'))
                        && toks[..i]
                            .iter()
                            .rev()
                            .take(6)
                            .any(|x| x.0 == Tok::Ident("pub".into())));
                let end = (i..toks.len())
                    .find(|&j| t(j) == Some(&Tok::Semi))
                    .unwrap_or(toks.len());
                let tree: Vec<Tok> = toks[i + 1..end].iter().map(|x| x.0.clone()).collect();
                for segs in expand_use(&tree) {
                    if let Some(abs) = resolve(&segs, inline.len()) {
                        let local: Vec<&String> =
                            segs.iter().skip_while(|s| *s == "self").collect();
                        let face = public
                            && inline.is_empty()
                            && local.first().is_some_and(|c| children.contains(c.as_str()));
                        out.push((line, abs, segs.join("::"), face));
                    }
                }
                i = end;
                continue;
            }
            Tok::Ident(first)
                if t(i + 1) == Some(&Tok::Sep)
                    && t(i.wrapping_sub(1)) != Some(&Tok::Sep)
                    && (["crate", "super", "self"].contains(&first.as_str())
                        || (inline.is_empty() && children.contains(first))) =>
            {
                let mut segs = vec![first.clone()];
                let mut j = i + 1;
                while t(j) == Some(&Tok::Sep) {
                    match ident(toks.get(j + 1)) {
                        Some(s) => segs.push(s.to_string()),
                        None => break,
                    }
                    j += 2;
                }
                if let Some(abs) = resolve(&segs, inline.len()) {
                    out.push((line, abs, segs.join("::"), false));
                }
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// The module path of a file under src/: `model/moe.rs` -> [model, moe], `model/mod.rs` ->
/// [model], `lib.rs` -> [].
fn module_of(rel: &Path) -> Vec<String> {
    let mut segs: Vec<String> = rel
        .iter()
        .map(|s| s.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(segs.last().map(String::as_str), Some("mod" | "lib")) {
        segs.pop();
    }
    segs
}

/// The graph of a set of files: (file name, module path, text).
fn graph_of(files: &[(String, Vec<String>, String)]) -> Graph {
    let by_module: BTreeMap<&[String], &str> = files
        .iter()
        .map(|(name, m, _)| (m.as_slice(), name.as_str()))
        .collect();
    let mut g = Graph::new();
    for (name, module, text) in files {
        let edges = g.entry(name.clone()).or_default();
        for (line, abs, path, face) in references(text, module) {
            if face {
                continue;
            }
            // The longest prefix that is a module file.
            let to = (0..=abs.len())
                .rev()
                .find_map(|k| by_module.get(&abs[..k]).copied());
            if let Some(to) = to.filter(|to| *to != name) {
                edges.entry(to.to_string()).or_insert(Edge {
                    to: to.to_string(),
                    line,
                    path,
                });
            }
        }
    }
    g
}

/// The strongly connected components of more than one file (Tarjan), each sorted.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on.insert(v);
        for w in s.g.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let l = s.low[w].min(s.low[v]);
                s.low.insert(v, l);
            } else if s.on.contains(w) {
                let l = s.index[w].min(s.low[v]);
                s.low.insert(v, l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    let nodes: BTreeSet<&str> = g
        .iter()
        .flat_map(|(k, e)| std::iter::once(k.as_str()).chain(e.keys().map(String::as_str)))
        .collect();
    for v in nodes {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

/// One cycle through the first file of a component, as its path of edges:
/// `a -> b (a:12 crate::b::x) -> a (b:3 super::y)`.
fn describe(g: &Graph, comp: &[String]) -> String {
    let inside: BTreeSet<&str> = comp.iter().map(String::as_str).collect();
    let start = comp[0].as_str();
    // Breadth-first from start inside the component until an edge leads back to it.
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut last = None;
    while let Some(v) = queue.pop_front() {
        let next = g.get(v).into_iter().flat_map(|e| e.keys());
        for w in next.map(String::as_str).filter(|w| inside.contains(w)) {
            if w == start {
                last = Some(v);
                break;
            }
            if !prev.contains_key(w) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
        if last.is_some() {
            break;
        }
    }
    let mut path = vec![start];
    let mut v = last.expect("a component has a cycle through each of its files");
    while v != start {
        path.push(v);
        v = prev[v];
    }
    path.push(start);
    let n = path.len();
    path[1..n - 1].reverse();
    let mut s = start.to_string();
    for w in path.windows(2) {
        let e = &g[w[0]][w[1]];
        s += &format!("\n    -> {} ({}:{} {})", e.to, w[0], e.line, e.path);
    }
    format!("files {{{}}}; one cycle: {s}", comp.join(", "))
}

/// The graph of src/.
fn source_graph() -> Graph {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut paths = Vec::new();
    rust_files(&root.join("src"), &mut paths);
    let files: Vec<(String, Vec<String>, String)> = paths
        .iter()
        .filter(|p| !p.ends_with("main.rs"))
        .map(|p| {
            let rel = p.strip_prefix(root.join("src")).unwrap();
            let name = Path::new("src")
                .join(rel)
                .to_string_lossy()
                .replace('\\', "/");
            (name, module_of(rel), std::fs::read_to_string(p).unwrap())
        })
        .collect();
    assert!(files.len() > 20, "found the sources");
    graph_of(&files)
}

/// `src/model/moe.rs` -> `model`; `src/io.rs` -> `io`.
fn top_folder(file: &str) -> &str {
    let rel = file.trim_start_matches("src/");
    rel.split('/').next().unwrap().trim_end_matches(".rs")
}

#[test]
fn the_module_graph_has_no_cycle() {
    let g = source_graph();
    let bad: Vec<String> = cycles(&g).iter().map(|c| describe(&g, c)).collect();
    assert!(
        bad.is_empty(),
        "import cycles (cut each at a real seam: move the shared item to the file that owns it \
         or to a lower module):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_layers_import_downward() {
    let g = source_graph();
    let mut bad = Vec::new();
    for (from, edges) in &g {
        let a = top_folder(from);
        for (to, e) in edges {
            let b = top_folder(to);
            // `lib` (the crate root, home of the `#[macro_export]` macros) is in no layer.
            let forbidden = (LOWER.contains(&a) && ABOVE_LOWER.contains(&b))
                || (a == "report" && ABOVE_REPORT.contains(&b));
            if forbidden {
                bad.push(format!("{a} imports {b}: {from}:{} {}", e.line, e.path));
            } else if let (Some(la), Some(lb)) = (layer(a), layer(b))
                && lb > la
            {
                bad.push(format!(
                    "{a} (layer {}) imports {b} (layer {}): {from}:{} {}",
                    la + 1,
                    lb + 1,
                    e.line,
                    e.path
                ));
            }
        }
    }
    assert!(bad.is_empty(), "upward imports:\n{}", bad.join("\n"));
}

/// The layer of a top-level folder, bottom up from 0 (none for the crate root).
fn layer(folder: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&folder))
}

/// The kernels sit between the utilities and the model: they import `util` only, so the model
/// (and everything above) reads them and they never read the model.
#[test]
fn the_kernels_import_util_only() {
    let g = source_graph();
    let mut bad = Vec::new();
    for (from, edges) in g.iter().filter(|(f, _)| top_folder(f) == "kernels") {
        for (to, e) in edges {
            let b = top_folder(to);
            if b != "kernels" && b != "util" && b != "lib" {
                bad.push(format!("{from}:{} reads {b} ({})", e.line, e.path));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "kernels import beyond util:\n{}",
        bad.join("\n")
    );
    let model_reads_kernels = g
        .iter()
        .filter(|(f, _)| top_folder(f) == "model")
        .any(|(_, edges)| edges.keys().any(|t| top_folder(t) == "kernels"));
    assert!(
        model_reads_kernels,
        "the model reads its ops from the kernels"
    );
}

#[test]
fn every_top_level_module_has_a_layer() {
    let g = source_graph();
    let missing: BTreeSet<&str> = g
        .keys()
        .map(|f| top_folder(f))
        .filter(|&t| t != "lib" && layer(t).is_none())
        .collect();
    assert!(
        missing.is_empty(),
        "modules in no layer: {missing:?}; add each to LAYERS in tests/source_shape.rs and to \
         the layer list in src/lib.rs's module doc"
    );
}

#[test]
fn the_dependency_reader_reads_use_trees_and_inline_paths() {
    let m = |s: &str| -> Vec<String> {
        s.split('/')
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()
    };
    let text = "//! crate::doc::x\n\
        pub mod child;\n\
        mod other;\n\
        pub use child::Face;\n\
        use other::Inner;\n\
        use crate::{model::{self, moe::X}, rl::Y as Z};\n\
        use super::*;\n\
        fn f() { let s = \"crate::in_string::x\"; crate::task::run(); super::super::io::f(); }\n\
        #[cfg(test)]\n\
        mod tests {\n    use super::*;\n    use super::super::sib::T;\n}\n";
    let refs: Vec<(usize, Vec<String>, bool)> = references(text, &m("exp/runner"))
        .into_iter()
        .map(|(l, abs, _, face)| (l, abs, face))
        .collect();
    assert_eq!(
        refs,
        vec![
            (4, m("exp/runner/child/Face"), true),
            (5, m("exp/runner/other/Inner"), false),
            (6, m("model"), false),
            (6, m("model/moe/X"), false),
            (6, m("rl/Y"), false),
            (7, m("exp"), false),
            (8, m("task/run"), false),
            (8, m("io/f"), false),
            (11, m("exp/runner"), false),
            (12, m("exp/sib/T"), false),
        ]
    );
}

#[test]
fn the_cycle_checker_reports_a_hand_built_cycle() {
    let files: Vec<(String, Vec<String>, String)> = [
        ("src/lib.rs", "", "pub mod a;\npub mod b;\npub mod c;\n"),
        (
            "src/a/mod.rs",
            "a",
            "pub mod x;\npub use x::X;\nuse crate::b::B;\n",
        ),
        (
            "src/a/x.rs",
            "a/x",
            "pub struct X;\nfn f() { super::super::c::g(); }\n",
        ),
        ("src/b.rs", "b", "pub struct B(crate::c::C);\n"),
        (
            "src/c.rs",
            "c",
            "pub struct C;\npub fn g() {}\nuse crate::a::X;\n",
        ),
    ]
    .iter()
    .map(|(f, m, t)| {
        (
            f.to_string(),
            m.split('/')
                .filter(|x| !x.is_empty())
                .map(String::from)
                .collect(),
            t.to_string(),
        )
    })
    .collect();
    let g = graph_of(&files);
    // lib.rs's declarations and a/mod.rs's re-export are no edges; the cycle is a -> b -> c -> a.
    assert_eq!(g["src/lib.rs"].len(), 0);
    assert_eq!(g["src/a/mod.rs"].keys().collect::<Vec<_>>(), ["src/b.rs"]);
    let comps = cycles(&g);
    assert_eq!(comps, vec![vec!["src/a/mod.rs", "src/b.rs", "src/c.rs"]]);
    let msg = describe(&g, &comps[0]);
    assert!(
        msg.contains("src/a/mod.rs\n    -> src/b.rs (src/a/mod.rs:3 crate::b::B)\n    -> src/c.rs (src/b.rs:1 crate::c::C)\n    -> src/a/mod.rs (src/c.rs:3 crate::a::X)"),
        "{msg}"
    );
    // a/x.rs -> c.rs is an edge but on no cycle.
    assert!(g["src/a/x.rs"].contains_key("src/c.rs"));
}

/// A column the schema marks unread (in every frame that has it) is one `driftlab slim` drops
/// from a committed folder; a report that names it as a string literal would then print
/// nothing for it. So no quoted column name of that kind may appear in `src/report/` outside
/// the slimmer itself.
#[test]
fn the_report_reads_no_column_the_schema_marks_unread() {
    use driftlab::metrics::schema::frames;
    let mut read = BTreeSet::new();
    let mut unread = BTreeSet::new();
    for f in frames() {
        for c in f.columns() {
            if c.report_reads {
                read.insert(c.name);
            } else {
                unread.insert(c.name);
            }
        }
    }
    let mut files = Vec::new();
    rust_files(Path::new("src/report"), &mut files);
    let mut bad = Vec::new();
    for p in files.iter().filter(|p| !p.ends_with("slim.rs")) {
        let text = std::fs::read_to_string(p).unwrap();
        for (n, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for name in unread.difference(&read) {
                if line.contains(&format!("\"{name}\"")) {
                    bad.push(format!("{}:{}: \"{name}\"", p.display(), n + 1));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "the report reads columns the schema marks unread (mark them read in \
         src/metrics/schema/columns.rs, or `driftlab slim` drops them):\n{}",
        bad.join("\n")
    );
}
