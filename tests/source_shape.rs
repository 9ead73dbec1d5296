//! The code stays readable: no file in `src/` over 500 lines, no function over 100 lines
//! (from its `fn` line to its closing brace, nested closures included).

use std::path::{Path, PathBuf};

const MAX_FILE_LINES: usize = 500;
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
fn no_file_over_500_lines_and_no_function_over_100() {
    let mut files = Vec::new();
    rust_files(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    assert!(files.len() > 20, "found the sources");
    let mut long = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let lines = text.lines().count();
        if lines > MAX_FILE_LINES {
            long.push(format!("{}: {lines} lines", f.display()));
        }
        for (name, at, n) in functions(&text) {
            if n > MAX_FN_LINES {
                long.push(format!("{}:{at}: fn {name} has {n} lines", f.display()));
            }
        }
    }
    assert!(long.is_empty(), "too long:\n{}", long.join("\n"));
}
