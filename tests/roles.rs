//! An arm's declared `role`: checked against the known roles and against what the arm runs,
//! one arm per role in a regime, and absent from `config.json` unless declared.

use driftlab::experiment::{ExperimentSpec, Role};

const HEAD: &str = "name = 'x'\ndescription = 'd'\nseeds = [0]\nsteps = 1\n";
const GRPO: &str = "[[arms]]\nname = 'grpo'\nalgorithm = { kind = 'grpo' }\n";

fn err(text: &str) -> String {
    format!(
        "{:#}",
        ExperimentSpec::from_toml(&format!("{HEAD}{text}"), "x.toml").unwrap_err()
    )
}

#[test]
fn an_unknown_role_is_an_error_naming_the_arm_and_the_allowed_roles() {
    let e = err(&format!(
        "{GRPO}[[arms]]\nname = 'thr'\nalgorithm = {{ kind = 'grpo' }}\nrouting = 'r3'\nrole = 'r3'\n"
    ));
    assert!(
        e.contains("x.toml")
            && e.contains("arm 'thr'")
            && e.contains("'role'")
            && e.contains("unknown role 'r3'")
            && e.contains(&Role::NAMES.join(", ")),
        "{e}"
    );
    let e = err(&format!("{GRPO}role = 3\n"));
    assert!(e.contains("arm 'grpo'") && e.contains("'role'"), "{e}");
}

#[test]
fn a_role_must_describe_its_arm_and_belongs_to_one_arm_per_regime() {
    // A GSPO arm cannot be "R3"; an arm without TIS cannot be "grpo_tis".
    let e = err("[[arms]]\nname = 'g'\nalgorithm = { kind = 'gspo' }\nrole = 'grpo_r3'\n");
    assert!(
        e.contains("arm 'g'") && e.contains("role 'grpo_r3' does not describe"),
        "{e}"
    );
    let e = err(&format!("{}role = 'grpo_tis'\n", GRPO));
    assert!(e.contains("arm 'grpo'") && e.contains("without TIS"), "{e}");
    let two = "[[arms]]\nname = 'a'\nalgorithm = { kind = 'grpo' }\nrouting = 'r3'\nrole = 'grpo_r3'\n\
               [[arms]]\nname = 'b'\nalgorithm = { kind = 'grpo' }\nrouting = 'r3'\nrole = 'grpo_r3'\n";
    let e = err(two);
    assert!(e.contains("'a' and 'b' both declare role 'grpo_r3'"), "{e}");
    // In different regimes they may.
    let split = format!(
        "{two}[[regimes]]\nname = 'one'\narms = ['a']\n[[regimes]]\nname = 'two'\narms = ['b']\n"
    );
    ExperimentSpec::from_toml(&format!("{HEAD}{split}"), "x.toml").unwrap();
}

#[test]
fn a_declared_role_round_trips_and_an_undeclared_one_is_not_written() {
    let text = format!(
        "{HEAD}{GRPO}[[arms]]\nname = 't'\nalgorithm = {{ kind = 'grpo' }}\nrole = 'grpo_tis'\n\
         rl = {{ old_logp = 'rollout', tis = {{ cap = 2.0 }} }}\n"
    );
    let s = ExperimentSpec::from_toml(&text, "x.toml").unwrap();
    assert_eq!(s.arms[1].role, Some(Role::GrpoTis));
    let json = serde_json::to_value(&s).unwrap();
    assert!(json["spec"].is_null() && json["arms"][0].get("role").is_none());
    assert_eq!(json["arms"][1]["role"], "grpo_tis");
    let back: ExperimentSpec = serde_json::from_value(json).unwrap();
    assert_eq!(back, s);
}

/// Every committed spec still validates with its declared roles (r3_mismatch's `grpo_tis`).
#[test]
fn committed_specs_declare_valid_roles() {
    let s = ExperimentSpec::load(std::path::Path::new("experiments/r3_mismatch.toml")).unwrap();
    let tis = s.arms.iter().find(|a| a.name == "grpo_tis").unwrap();
    assert_eq!(tis.role, Some(Role::GrpoTis));
}
