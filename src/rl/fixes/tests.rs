//! The registry and the fixes together, by hand; each fix's own maths is tested in its file.

use super::*;

/// Two responses, of 2 and 3 tokens, whose engine log-ratios ln(π_old / π_engine) are `x`
/// (`logp_mu = 0`), with advantages `adv` and, when given, log π_θ at the current parameters.
pub(super) fn batch(x: [f64; 5], adv: [f32; 2], logp: Option<[f32; 5]>) -> Batch<'static> {
    let leak = |v: Vec<f32>| -> &'static [f32] { Vec::leak(v) };
    Batch::new(
        leak(x.iter().map(|&v| v as f32).collect()),
        leak(vec![0.0; 5]),
        leak(adv.to_vec()),
        Vec::leak(vec![0, 0, 1, 1, 1]),
        Vec::leak(vec![2, 3]),
        Box::new(move || logp.expect("this test reads no current log-probs").to_vec()),
    )
}

pub(super) fn close(a: &[f32], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (f64::from(*x) - y).abs() < 1e-5)
}

/// The registry starts with the fixes, and their logged columns, in the order configs and the
/// updates frame have always had them (a new fix goes after them).
#[test]
fn the_registry_keeps_the_order_of_the_first_fixes_and_their_columns() {
    assert_eq!(KEYS[..4], ["tis", "icepop", "mis", "opsm"]);
    let cols: Vec<&str> = SHARES.iter().map(|s| s.column).collect();
    assert_eq!(
        cols[..3],
        ["icepop_masked_frac", "mis_masked_frac", "opsm_masked_frac"]
    );
}

/// Without a mismatch (engine = trainer) and before the policy moves, nothing is masked and
/// every weight is 1; with every fix off there are no weights at all.
#[test]
fn on_policy_nothing_is_masked() {
    let b = batch([0.0; 5], [-1.0, 1.0], Some([0.0; 5]));
    let fixes = (
        TisConfig::default(),
        IcePopConfig::default(),
        MisConfig::default(),
        OpsmConfig::default(),
    );
    let mut on: [Option<&dyn On>; COUNT] = [None; COUNT];
    on[position::<TisConfig>()] = Some(&fixes.0);
    on[position::<IcePopConfig>()] = Some(&fixes.1);
    on[position::<MisConfig>()] = Some(&fixes.2);
    on[position::<OpsmConfig>()] = Some(&fixes.3);
    let (w, masked) = weigh(&on, &b);
    assert!(w.mask.as_ref().unwrap().iter().all(|&w| w == 1.0));
    assert!(w.ratio.as_ref().unwrap().tok.iter().all(|&w| w == 1.0));
    assert!(masked.of::<TisConfig>().is_none(), "TIS masks nothing");
    for m in [masked.of::<IcePopConfig>(), masked.of::<MisConfig>()] {
        assert!(m.unwrap().iter().all(|&x| !x));
    }
    assert_eq!(masked.of::<OpsmConfig>().unwrap(), [false, false]);
    assert!(!w.all_masked());
    let shares = masked.shares();
    // The first three columns are those of IcePop, MIS and OPSM (the test above).
    assert!(
        shares[..3].iter().all(|(_, s)| *s == Some(0.0)),
        "{shares:?}"
    );
    let (w, masked) = weigh(&[None; COUNT], &b);
    assert_eq!(w, Weights::default());
    assert_eq!(masked, Masked::default());
    assert!(masked.shares().iter().all(|(_, s)| s.is_none()));
}
