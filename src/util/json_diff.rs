//! Where two JSON documents differ: the first differing key path and both values, so that a
//! refusal (`--resume`, `merge`, a run into another run's folder) names what changed instead of
//! "see config.json".

use serde_json::Value;

/// The first place (in key order, arrays by index) where `a` and `b` differ, as
/// `path: <a's value> vs <b's value>` with a path such as `cells[3].rl.kl_beta`; `None` when
/// they are equal. A key only one side has reads `(absent)` on the other.
pub fn first_difference(a: &Value, b: &Value) -> Option<String> {
    walk(a, b, "")
}

fn walk(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter().find_map(|k| {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match (x.get(k), y.get(k)) {
                    (Some(u), Some(v)) => walk(u, v, &p),
                    (u, v) => Some(format!("{p}: {} vs {}", shown(u), shown(v))),
                }
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            let inner = x
                .iter()
                .zip(y)
                .enumerate()
                .find_map(|(i, (u, v))| walk(u, v, &format!("{path}[{i}]")));
            inner.or_else(|| {
                (x.len() != y.len()).then(|| {
                    format!(
                        "{}: {} entries vs {}",
                        if path.is_empty() { "(top)" } else { path },
                        x.len(),
                        y.len()
                    )
                })
            })
        }
        _ if a == b => None,
        _ => Some(format!(
            "{}: {} vs {}",
            if path.is_empty() { "(top)" } else { path },
            shown(Some(a)),
            shown(Some(b))
        )),
    }
}

/// A value as JSON text, cut to 80 characters.
fn shown(v: Option<&Value>) -> String {
    let Some(v) = v else {
        return "(absent)".into();
    };
    let s = v.to_string();
    if s.chars().count() > 80 {
        format!("{}…", s.chars().take(80).collect::<String>())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::first_difference;
    use serde_json::json;

    #[test]
    fn names_the_first_differing_key_path_and_both_values() {
        let a = json!({"cells": [{"arm": "grpo", "rl": {"kl_beta": 0.0, "lr": 1e-3}}]});
        let b = json!({"cells": [{"arm": "grpo", "rl": {"kl_beta": 0.01, "lr": 1e-3}}]});
        assert_eq!(
            first_difference(&a, &b).unwrap(),
            "cells[0].rl.kl_beta: 0.0 vs 0.01"
        );
        assert_eq!(first_difference(&a, &a), None);
        let c = json!({"cells": [{"arm": "grpo", "rl": {"lr": 1e-3}}]});
        assert_eq!(
            first_difference(&a, &c).unwrap(),
            "cells[0].rl.kl_beta: 0.0 vs (absent)"
        );
        let d = json!({"cells": [a["cells"][0].clone(), a["cells"][0].clone()]});
        assert_eq!(first_difference(&a, &d).unwrap(), "cells: 1 entries vs 2");
    }
}
