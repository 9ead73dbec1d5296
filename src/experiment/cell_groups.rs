//! The resolved cells of a `config.json`, as a run writes them (`cells`: one full config per
//! cell) or in the committed form `slim` writes (`cell_groups`: each config once, with the
//! seeds that ran it). A map's cells differ only in their seed within a (regime, arm), so the
//! grouped form is a few percent of the list; both read back as the same list, in order.

use serde_json::{Map, Value};

/// The `cells` list of a config.json in either form; `Value::Null` when it records none.
pub fn cells_value(cfg: &Value) -> Value {
    if let Some(cells) = cfg.get("cells") {
        return cells.clone();
    }
    match cfg.get("cell_groups").and_then(Value::as_array) {
        Some(groups) => expand(groups).map_or(Value::Null, Value::Array),
        None => Value::Null,
    }
}

/// `cells` as groups of consecutive cells that differ only in their `seed`, when that form
/// reads back as exactly `cells` (every cell an object with an integer seed); else `None`.
pub fn group(cells: &Value) -> Option<Value> {
    let list = cells.as_array()?;
    let mut groups: Vec<(Value, Vec<Value>)> = Vec::new();
    for c in list {
        let mut rest: Map<String, Value> = c.as_object()?.clone();
        let seed = rest.remove("seed").filter(Value::is_u64)?;
        let rest = Value::Object(rest);
        match groups.last_mut() {
            Some((cell, seeds)) if *cell == rest => seeds.push(seed),
            _ => groups.push((rest, vec![seed])),
        }
    }
    let groups: Vec<Value> = groups
        .into_iter()
        .map(|(cell, seeds)| serde_json::json!({ "cell": cell, "seeds": seeds }))
        .collect();
    (expand(&groups).as_deref() == Some(list.as_slice())).then_some(Value::Array(groups))
}

/// The cells of `groups`, each group's config once per seed in its order.
fn expand(groups: &[Value]) -> Option<Vec<Value>> {
    let mut out = Vec::new();
    for g in groups {
        let cell = g.get("cell")?.as_object()?;
        for seed in g.get("seeds")?.as_array()? {
            let mut c = cell.clone();
            c.insert("seed".into(), seed.clone());
            out.push(Value::Object(c));
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn groups_read_back_as_the_list_in_its_order() {
        let cells = json!([
            {"arm": "a", "seed": 0, "x": 1}, {"arm": "a", "seed": 1, "x": 1},
            {"arm": "b", "seed": 0, "x": 1}, {"arm": "a", "seed": 2, "x": 1},
            {"arm": "a", "seed": 3, "x": 2}
        ]);
        let g = group(&cells).unwrap();
        // a/0-1 together; b; a/2 after b stays its own group; x = 2 differs beyond the seed.
        assert_eq!(g.as_array().unwrap().len(), 4);
        assert_eq!(g[0]["seeds"], json!([0, 1]));
        assert!(g[0]["cell"].get("seed").is_none());
        assert_eq!(cells_value(&json!({ "cell_groups": g })), cells);
        assert_eq!(cells_value(&json!({ "cells": cells })), cells);
        assert_eq!(cells_value(&json!({})), Value::Null);
    }

    #[test]
    fn cells_without_an_integer_seed_are_not_grouped() {
        assert!(group(&json!([{"arm": "a"}])).is_none());
        assert!(group(&json!([{"arm": "a", "seed": "0"}])).is_none());
        assert!(group(&json!([1, 2])).is_none());
        assert!(group(&json!({"arm": "a"})).is_none());
        assert_eq!(group(&json!([])), Some(json!([])));
    }
}
