//! Hand-computed cases and invariants of the objectives, on small literal tensors.

mod common;
use burn::tensor::Tensor;
use common::flex;
use driftlab::rl::advantage::advantages;
use driftlab::rl::loss::{PolicyBatch, policy_loss};
use driftlab::rl::{
    AdvantageMode, Aggregation, Algorithm, CispoConfig, GmpoConfig, GrpoConfig, GspoConfig,
    GvpoConfig, RlConfig, TisConfig,
};
use driftlab::util::tensors::{floats, to_vec};

fn close(a: f32, b: f32, tol: f32) -> bool {
    (a - b).abs() <= tol
}

/// Two responses (lengths 2 and 1), ratios w = [1.5, 0.5, 1.1], logp_old = 0.
fn batch(
    adv: [f32; 2],
    logp: &[f32],
    lens: &[usize],
    logp_ref: Option<Vec<f32>>,
) -> (PolicyBatch, Tensor<1>) {
    let n = logp.len();
    let leaf = floats(logp.to_vec(), [n], &flex())
        .autodiff()
        .require_grad();
    let seg: Vec<usize> = lens
        .iter()
        .enumerate()
        .flat_map(|(i, &l)| std::iter::repeat_n(i, l))
        .collect();
    let b = PolicyBatch {
        logp: leaf.clone(),
        logp_old: vec![0.0; n],
        logp_tis: vec![0.0; n],
        logp_mu: vec![0.0; n],
        logp_ref,
        fixes: Default::default(),
        adv: adv.to_vec(),
        rewards: vec![1.0, 0.0],
        seg,
        lens: lens.to_vec(),
        group_size: 2,
        teacher: None,
    };
    (b, leaf)
}

/// `b` with TIS's weights set on it (none when `tis` is off), as the trainer sets every
/// stability fix's.
fn set_tis(b: &mut PolicyBatch, tis: Option<&TisConfig>) {
    let cfg = RlConfig {
        tis: tis.cloned(),
        ..RlConfig::default()
    };
    let (weights, _) = driftlab::rl::fixes::weigh(&cfg.fixes(), &b.fix_batch());
    b.fixes = weights;
}

fn w3() -> Vec<f32> {
    vec![1.5f32.ln(), 0.5f32.ln(), 1.1f32.ln()]
}

#[test]
fn advantages_by_hand() {
    let a = advantages(
        &[1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5],
        4,
        AdvantageMode::MeanStd,
    );
    let s = (1.0f32 / 3.0).sqrt(); // unbiased std of [1, 0, 0, 1]
    assert!(close(a[0], 0.5 / (s + 1e-6), 1e-5) && close(a[1], -0.5 / (s + 1e-6), 1e-5));
    assert_eq!(
        &a[4..],
        &[0.0; 4],
        "identical rewards give zero advantage, not NaN"
    );
    let m = advantages(&[1.0, 0.0, 0.0, 0.0], 4, AdvantageMode::MeanOnly);
    assert_eq!(m, vec![0.75, -0.25, -0.25, -0.25]);
    assert!(
        advantages(&[0.0, 0.0], 2, AdvantageMode::MeanStd)
            .iter()
            .all(|v| *v == 0.0)
    );
}

#[test]
fn grpo_loss_and_clipping_by_hand() {
    // token 0: Â=1, w=1.5 → clipped high, ℓ = −1.27; token 1: Â=1, w=0.5 → ℓ = −0.5 (no clip:
    // low clipping only removes gradient for Â<0); token 2: Â=−1, w=1.1 → ℓ = 1.1.
    let (b, _) = batch([1.0, -1.0], &w3(), &[2, 1], None);
    let alg = Algorithm::Grpo(GrpoConfig::default());
    let (loss, st) = policy_loss(&alg, &b);
    assert!(close(
        to_vec(loss.inner())[0],
        ((-1.27 - 0.5) / 2.0 + 1.1) / 2.0,
        1e-6
    ));
    assert_eq!(st.clip_high, vec![true, false, false]);
    assert_eq!(st.clip_low, vec![false, false, false]);
    assert_eq!(st.clip_seq, vec![true, false]);
    for (r, want) in st.ratio_tok.iter().zip([1.5, 0.5, 1.1]) {
        assert!(close(*r, want, 1e-6));
    }
    let tm = Algorithm::Grpo(GrpoConfig {
        aggregation: Aggregation::TokenMean,
        ..GrpoConfig::default()
    });
    let (loss, _) = policy_loss(&tm, &b);
    assert!(close(
        to_vec(loss.inner())[0],
        (-1.27 - 0.5 + 1.1) / 3.0,
        1e-6
    ));
    // Â=−1 with w=0.5 < 0.8: clipped low.
    let (b2, _) = batch([-1.0, 1.0], &w3(), &[2, 1], None);
    let (_, st2) = policy_loss(&alg, &b2);
    assert_eq!(st2.clip_low, vec![false, true, false]);
    assert_eq!(
        st2.clip_high,
        vec![false, false, false],
        "Â=1 with w=1.1 is inside 1 + 0.27"
    );
}

#[test]
fn k3_kl_term_by_hand() {
    let (b, _) = batch([0.0, 0.0], &w3(), &[2, 1], Some(vec![0.0; 3]));
    let alg = Algorithm::Grpo(GrpoConfig {
        kl_beta: 0.5,
        ..GrpoConfig::default()
    });
    let (loss, st) = policy_loss(&alg, &b);
    // d = logp_ref − logp; k3 = e^d − d − 1 = [0.072132, 0.306853, 0.004401].
    let k3 = [
        1.0 / 1.5 + 1.5f32.ln() - 1.0,
        2.0 - 2f32.ln() - 1.0,
        1.0 / 1.1 + 1.1f32.ln() - 1.0,
    ];
    let kl = ((k3[0] + k3[1]) / 2.0 + k3[2]) / 2.0;
    assert!(close(st.kl_ref.unwrap(), kl, 1e-6));
    assert!(
        close(to_vec(loss.inner())[0], 0.5 * kl, 1e-6),
        "zero advantages leave only β·KL"
    );
}

#[test]
fn tis_weights_by_hand() {
    let (mut b, _) = batch([1.0, 1.0], &[0.0, 0.0, 0.0], &[2, 1], None);
    // TIS weighs π_old before any router shift (`logp_tis`) against the engine.
    b.logp_tis = vec![2f32.ln(), 0.5f32.ln(), 3f32.ln()];
    b.logp_old = b.logp_tis.clone();
    let tis = TisConfig { cap: 2.0 };
    let w = tis.tok(&b.fix_batch());
    assert!(close(w[0], 2.0, 1e-6) && close(w[1], 0.5, 1e-6) && close(w[2], 2.0, 1e-6));
    // Sequence level: geometric mean of response 0 is exp((ln2 + ln0.5)/2) = 1.
    let s = tis.seq(&b.fix_batch());
    assert!(close(s[0], 1.0, 1e-6) && close(s[1], 2.0, 1e-6));
    // π_old taken from the engine (`old_logp = rollout`): the ratio already corrects for it,
    // and every TIS weight is 1.
    let mut r = b.clone();
    r.logp_old = r.logp_mu.clone();
    r.logp_tis = r.logp_mu.clone();
    let rb = r.fix_batch();
    assert!(tis.tok(&rb).iter().chain(&tis.seq(&rb)).all(|&w| w == 1.0));
    set_tis(&mut b, Some(&tis));
    let (_, st) = policy_loss(&Algorithm::Grpo(GrpoConfig::default()), &b);
    assert_eq!(st.tis_weight.unwrap().len(), 3);
}

#[test]
fn gspo_sequence_ratio_and_loss_by_hand() {
    let (b, _) = batch([1.0, 1.0], &w3(), &[2, 1], None);
    let (loss, st) = policy_loss(&Algorithm::Gspo(GspoConfig::default()), &b);
    let s0 = 0.75f32.sqrt();
    assert!(close(st.ratio_seq[0], s0, 1e-6) && close(st.ratio_seq[1], 1.1, 1e-6));
    // Response 0: Â=1, s=0.866 (below the range, not clipped for Â>0) → −0.866.
    // Response 1: Â=1, s=1.1 > 1.0004 → clipped: −1.0004.
    assert!(close(to_vec(loss.inner())[0], (-s0 - 1.0004) / 2.0, 1e-6));
    assert_eq!(st.clip_seq, vec![false, true]);
    assert_eq!(
        st.clip_high,
        vec![false, false, true],
        "a clipped response clips all its tokens"
    );
}

#[test]
fn gvpo_loss_by_hand() {
    let (b, _) = batch([0.0, 0.0], &w3(), &[2, 1], None);
    let (loss, st) = policy_loss(&Algorithm::Gvpo(GvpoConfig { beta: 0.1 }), &b);
    let d = [0.75f32.ln(), 1.1f32.ln()];
    let m = (d[0] + d[1]) / 2.0;
    let r = [0.5f32, -0.5];
    let l: f32 = (0..2)
        .map(|i| (0.1 * (d[i] - m) - r[i]).powi(2))
        .sum::<f32>()
        / 2.0;
    assert!(close(to_vec(loss.inner())[0], l, 1e-6));
    assert!(st.clip_seq.iter().all(|c| !c), "GVPO never clips");
}

fn grad(loss: Tensor<1>, leaf: &Tensor<1>) -> Vec<f32> {
    to_vec(leaf.grad(&loss.backward()).expect("gradient"))
}

#[test]
fn gspo_equals_grpo_when_every_response_has_length_one() {
    let logp = vec![0.1f32, -0.05, 0.3, -0.2];
    let lens = [1usize; 4];
    let mk = || {
        let leaf = floats(logp.clone(), [4], &flex()).autodiff().require_grad();
        let b = PolicyBatch {
            logp: leaf.clone(),
            logp_old: vec![0.0; 4],
            logp_tis: vec![0.0; 4],
            logp_mu: vec![0.0; 4],
            logp_ref: None,
            fixes: Default::default(),
            adv: vec![1.0, -1.0, 0.5, -0.5],
            rewards: vec![1.0, 0.0, 1.0, 0.0],
            seg: vec![0, 1, 2, 3],
            lens: lens.to_vec(),
            group_size: 2,
            teacher: None,
        };
        (b, leaf)
    };
    let eps = (0.2, 0.27);
    let (ga, la) = mk();
    let (gb, lb) = mk();
    let (loss_a, _) = policy_loss(
        &Algorithm::Grpo(GrpoConfig {
            eps_low: eps.0,
            eps_high: eps.1,
            ..GrpoConfig::default()
        }),
        &ga,
    );
    let (loss_b, _) = policy_loss(
        &Algorithm::Gspo(GspoConfig {
            eps_low: eps.0,
            eps_high: eps.1,
        }),
        &gb,
    );
    assert!(close(
        to_vec(loss_a.clone().inner())[0],
        to_vec(loss_b.clone().inner())[0],
        1e-6
    ));
    let (ga_, gb_) = (grad(loss_a, &la), grad(loss_b, &lb));
    assert!(
        ga_.iter().zip(&gb_).all(|(a, b)| close(*a, *b, 1e-6)),
        "{ga_:?} vs {gb_:?}"
    );
}

#[test]
fn gspo_token_equals_gspo_in_value_and_gradient() {
    let logp = vec![0.01f32, -0.02, 0.005, 0.0002, -0.0001, 0.03];
    let lens = vec![3usize, 1, 2];
    let seg = vec![0, 0, 0, 1, 2, 2];
    for eps in [(3e-4, 4e-4), (0.2, 0.27)] {
        let mk = || {
            let leaf = floats(logp.clone(), [6], &flex()).autodiff().require_grad();
            let b = PolicyBatch {
                logp: leaf.clone(),
                logp_old: vec![0.0; 6],
                logp_tis: vec![0.0; 6],
                logp_mu: vec![0.0; 6],
                logp_ref: None,
                fixes: Default::default(),
                adv: vec![1.0, -0.5, 0.7],
                rewards: vec![1.0, 0.0, 1.0],
                seg: seg.clone(),
                lens: lens.clone(),
                group_size: 3,
                teacher: None,
            };
            (b, leaf)
        };
        let c = GspoConfig {
            eps_low: eps.0,
            eps_high: eps.1,
        };
        let (ba, la) = mk();
        let (bb, lb) = mk();
        let (loss_a, sa) = policy_loss(&Algorithm::Gspo(c.clone()), &ba);
        let (loss_b, sb) = policy_loss(&Algorithm::GspoToken(c), &bb);
        assert!(close(
            to_vec(loss_a.clone().inner())[0],
            to_vec(loss_b.clone().inner())[0],
            1e-6
        ));
        assert_eq!(sa.clip_seq, sb.clip_seq);
        let (ga, gb) = (grad(loss_a, &la), grad(loss_b, &lb));
        assert!(
            ga.iter().zip(&gb).all(|(a, b)| close(*a, *b, 1e-6)),
            "eps {eps:?}: {ga:?} vs {gb:?}"
        );
        assert!(
            ga.iter().any(|g| g.abs() > 1e-4) || eps.0 < 1e-3,
            "some gradient flows"
        );
    }
}

#[test]
fn gvpo_gradient_at_old_policy_is_scaled_reinforce() {
    // θ = θ_old: logp = logp_old. Two groups of G = 3.
    let logp_old = vec![
        -0.3f32, -1.2, -0.7, -0.4, -0.9, -0.2, -1.5, -0.6, -0.8, -0.1,
    ];
    let lens = vec![2usize, 1, 2, 1, 3, 1];
    let seg: Vec<usize> = lens
        .iter()
        .enumerate()
        .flat_map(|(i, &l)| std::iter::repeat_n(i, l))
        .collect();
    let rewards = vec![1.0f32, 0.0, 0.5, 0.0, 0.0, 1.0];
    let beta = 0.1;
    let leaf = floats(logp_old.clone(), [10], &flex())
        .autodiff()
        .require_grad();
    let b = PolicyBatch {
        logp: leaf.clone(),
        logp_old: logp_old.clone(),
        logp_tis: logp_old.clone(),
        logp_mu: logp_old.clone(),
        logp_ref: None,
        fixes: Default::default(),
        adv: vec![0.0; 6],
        rewards: rewards.clone(),
        seg: seg.clone(),
        lens,
        group_size: 3,
        teacher: None,
    };
    let (loss, _) = policy_loss(&Algorithm::Gvpo(GvpoConfig { beta }), &b);
    let g_gvpo = grad(loss, &leaf);
    // REINFORCE with a group-mean baseline, averaged over groups: −mean_g Σ_i (r_i − r̄) Σ_t logp.
    let mut want = vec![0f32; 10];
    for (t, &i) in seg.iter().enumerate() {
        let grp = &rewards[(i / 3) * 3..(i / 3) * 3 + 3];
        let mean = grp.iter().sum::<f32>() / 3.0;
        want[t] = -(rewards[i] - mean) / 2.0 * (beta as f32 / 2.0);
    }
    assert!(
        g_gvpo.iter().zip(&want).all(|(a, b)| close(*a, *b, 1e-6)),
        "{g_gvpo:?} vs {want:?}"
    );
}

/// A minibatch of two groups of G = 2 (lengths 2, 1, 3, 2) and its two micro-batches of one
/// group each, with their own leaves.
fn split_case() -> (Vec<f32>, Vec<usize>, Vec<f32>) {
    let logp = vec![-0.31f32, -1.02, -0.55, -0.18, -0.92, -0.4, -1.3, -0.07];
    let lens = vec![2usize, 1, 3, 2];
    let rewards = vec![1.0f32, 0.0, 0.2, 0.9];
    (logp, lens, rewards)
}

fn policy_batch(
    logp: &[f32],
    lens: &[usize],
    rewards: &[f32],
    tok0: usize,
) -> (PolicyBatch, Tensor<1>) {
    let (mut b, leaf) = batch([0.0; 2], logp, lens, None);
    // Per-token constants that differ from logp, and between tokens, so ratios, TIS weights
    // and the KL are all non-trivial.
    let at = |t: usize, a: f32, b: f32| a + b * ((t + tok0) as f32 * 0.7).sin();
    let n = logp.len();
    b.logp_old = (0..n).map(|t| logp[t] + at(t, 0.0, 0.15)).collect();
    b.logp_tis = b.logp_old.clone();
    b.logp_mu = (0..n).map(|t| logp[t] + at(t, 0.05, 0.1)).collect();
    b.logp_ref = Some((0..n).map(|t| logp[t] + at(t, -0.1, 0.2)).collect());
    b.adv = advantages(rewards, 2, AdvantageMode::MeanStd);
    b.rewards = rewards.to_vec();
    (b, leaf)
}

#[test]
fn micro_batch_losses_add_up_to_the_minibatch_loss_and_gradient() {
    use driftlab::rl::loss::LossStats;
    use driftlab::rl::loss::micro_share;
    let (logp, lens, rewards) = split_case();
    let wide = GspoConfig {
        eps_low: 0.2,
        eps_high: 0.27,
    };
    let algs = [
        Algorithm::Grpo(GrpoConfig {
            kl_beta: 0.1,
            ..GrpoConfig::default()
        }),
        Algorithm::Grpo(GrpoConfig {
            kl_beta: 0.1,
            aggregation: Aggregation::TokenMean,
            ..GrpoConfig::default()
        }),
        Algorithm::Gspo(wide.clone()),
        Algorithm::GspoToken(wide),
        Algorithm::Gvpo(GvpoConfig::default()),
        Algorithm::Cispo(CispoConfig {
            eps_low: 0.1,
            eps_high: 0.05,
        }),
        Algorithm::Gmpo(GmpoConfig {
            eps_low: 0.1,
            eps_high: 0.1,
        }),
    ];
    for alg in algs {
        for tis in [None, Some(TisConfig { cap: 1.05 })] {
            let (mut full, leaf) = policy_batch(&logp, &lens, &rewards, 0);
            set_tis(&mut full, tis.as_ref());
            let (loss, st) = policy_loss(&alg, &full);
            let l_full = to_vec(loss.clone().inner())[0];
            let g_full = grad(loss, &leaf);
            // Micro-batches: group 0 = responses 0, 1 (tokens 0..3), group 1 = tokens 3..8.
            let mut l_sum = 0.0;
            let mut g_cat = Vec::new();
            let mut parts = Vec::new();
            for (resp, toks) in [(0..2, 0..3), (2..4, 3..8)] {
                let (mut part, pleaf) = policy_batch(
                    &logp[toks.clone()],
                    &lens[resp.clone()],
                    &rewards[resp.clone()],
                    toks.start,
                );
                // The micro-batch sees the minibatch's own constants and advantages.
                part.logp_old = full.logp_old[toks.clone()].to_vec();
                part.logp_tis = full.logp_tis[toks.clone()].to_vec();
                part.logp_mu = full.logp_mu[toks.clone()].to_vec();
                part.logp_ref = full.logp_ref.as_ref().map(|r| r[toks.clone()].to_vec());
                part.adv = full.adv[resp].to_vec();
                let share = micro_share(&alg, &part, 4, 8);
                set_tis(&mut part, tis.as_ref());
                let (l, s) = policy_loss(&alg, &part);
                l_sum += share * to_vec(l.clone().inner())[0];
                g_cat.extend(grad(l * share, &pleaf));
                parts.push((s, share));
            }
            let what = format!("{alg:?} tis {tis:?}");
            assert!(
                l_full.abs() > 1e-4,
                "{what}: a loss worth comparing ({l_full})"
            );
            assert!(close(l_sum, l_full, 1e-6), "{what}: {l_sum} vs {l_full}");
            assert!(
                g_full.iter().any(|g| g.abs() > 1e-3),
                "{what}: some gradient flows {g_full:?}"
            );
            assert!(
                g_cat.iter().zip(&g_full).all(|(a, b)| close(*a, *b, 1e-6)),
                "{what}: {g_cat:?} vs {g_full:?}"
            );
            let merged = LossStats::concat(parts);
            assert!(close(merged.loss_policy, st.loss_policy, 1e-6), "{what}");
            assert_eq!(merged.ratio_tok, st.ratio_tok, "{what}");
            assert_eq!(merged.ratio_seq, st.ratio_seq, "{what}");
            assert_eq!(
                (merged.clip_low, merged.clip_high, merged.clip_seq),
                (st.clip_low, st.clip_high, st.clip_seq),
                "{what}"
            );
            assert_eq!(merged.tis_weight, st.tis_weight, "{what}");
            match (merged.kl_ref, st.kl_ref) {
                (Some(a), Some(b)) => assert!(close(a, b, 1e-6), "{what}: kl {a} vs {b}"),
                (a, b) => assert_eq!(a, b, "{what}"),
            }
        }
    }
}

#[test]
fn cispo_loss_and_gradient_by_hand() {
    // w = [1.5, 0.5, 1.1], Â per token [1, 1, −1]; defaults: no lower bound, 1 + 0.2 above, so
    // ŵ = [1.2, 0.5, 1.1]; loss = −(1/3) Σ ŵ·Â·logp, gradient −ŵ·Â/3 (never zero).
    let logp = w3();
    let (b, leaf) = batch([1.0, -1.0], &logp, &[2, 1], None);
    let alg = Algorithm::Cispo(CispoConfig::default());
    let (loss, st) = policy_loss(&alg, &b);
    let what = (1.2 * logp[0] + 0.5 * logp[1] - 1.1 * logp[2]) / -3.0;
    assert!(close(to_vec(loss.clone().inner())[0], what, 1e-6));
    let g = grad(loss, &leaf);
    for (a, want) in g.iter().zip([-1.2 / 3.0, -0.5 / 3.0, 1.1 / 3.0]) {
        assert!(close(*a, want, 1e-6), "{g:?}");
    }
    assert_eq!(st.clip_high, vec![true, false, false]);
    assert_eq!(st.clip_low, vec![false; 3]);
    assert_eq!(st.clip_seq, vec![true, false]);
    // A lower bound truncates from below too: w = 0.5 < 1 − 0.4.
    let tight = Algorithm::Cispo(CispoConfig {
        eps_low: 0.4,
        eps_high: 0.2,
    });
    let (_, st) = policy_loss(&tight, &b);
    assert_eq!(st.clip_low, vec![false, true, false]);
}

/// On-policy (w = 1) CISPO's gradient is REINFORCE with the same advantages, token-mean: the
/// same as GRPO's with `token_mean` aggregation.
#[test]
fn cispo_on_policy_gradient_is_token_mean_reinforce() {
    let (logp, lens, rewards) = split_case();
    let mk = || {
        let (mut b, leaf) = policy_batch(&logp, &lens, &rewards, 0);
        b.logp_old = logp.clone();
        (b, leaf)
    };
    let (b, leaf) = mk();
    let g = grad(
        policy_loss(&Algorithm::Cispo(CispoConfig::default()), &b).0,
        &leaf,
    );
    let n = logp.len() as f32;
    let seg: Vec<usize> = lens
        .iter()
        .enumerate()
        .flat_map(|(i, &l)| std::iter::repeat_n(i, l))
        .collect();
    for (t, a) in g.iter().enumerate() {
        assert!(close(*a, -b.adv[seg[t]] / n, 1e-6), "{g:?}");
    }
    let (b2, leaf2) = mk();
    let tm = Algorithm::Grpo(GrpoConfig {
        aggregation: Aggregation::TokenMean,
        ..GrpoConfig::default()
    });
    let g2 = grad(policy_loss(&tm, &b2).0, &leaf2);
    assert!(g.iter().zip(&g2).all(|(a, b)| close(*a, *b, 1e-6)));
}

#[test]
fn gmpo_loss_and_gradient_by_hand() {
    // Response 0 (Â = 1): Δ = [ln 1.5, ln 0.5] = [0.405, −0.693]; the pessimistic clipped log
    // ratios are [0.4 (clipped), −0.693], ρ0 = exp((0.4 + ln 0.5) / 2). Response 1 (Â = −1):
    // Δ = ln 1.1 inside ±0.4, ρ1 = 1.1. loss = (−ρ0 + ρ1) / 2; gradient: token 0 none,
    // token 1 −ρ0 / (2·2), token 2 ρ1 / 2.
    let (b, leaf) = batch([1.0, -1.0], &w3(), &[2, 1], None);
    let alg = Algorithm::Gmpo(GmpoConfig::default());
    let (loss, st) = policy_loss(&alg, &b);
    let rho0 = ((0.4 + 0.5f32.ln()) / 2.0).exp();
    assert!(close(
        to_vec(loss.clone().inner())[0],
        (-rho0 + 1.1) / 2.0,
        1e-6
    ));
    let g = grad(loss, &leaf);
    for (a, want) in g.iter().zip([0.0, -rho0 / 4.0, 1.1 / 2.0]) {
        assert!(close(*a, want, 1e-6), "{g:?}");
    }
    assert_eq!(st.clip_high, vec![true, false, false]);
    assert_eq!(st.clip_low, vec![false; 3]);
    // Â < 0 clips below: Δ = ln 0.5 < −0.4.
    let (b, _) = batch([-1.0, 1.0], &w3(), &[2, 1], None);
    let (_, st) = policy_loss(&alg, &b);
    assert_eq!(st.clip_low, vec![false, true, false]);
    assert_eq!(st.clip_high, vec![false; 3]);
}

/// On-policy GMPO's gradient is GRPO's (sequence-mean, token-mean): `−Â_i / (L_i · R)`.
#[test]
fn gmpo_on_policy_gradient_equals_grpo() {
    let (logp, lens, rewards) = split_case();
    let grads = |alg: Algorithm| {
        let (mut b, leaf) = policy_batch(&logp, &lens, &rewards, 0);
        b.logp_old = logp.clone();
        grad(policy_loss(&alg, &b).0, &leaf)
    };
    let g = grads(Algorithm::Gmpo(GmpoConfig::default()));
    let g2 = grads(Algorithm::Grpo(GrpoConfig::default()));
    assert!(g.iter().any(|x| x.abs() > 1e-3), "{g:?}");
    assert!(
        g.iter().zip(&g2).all(|(a, b)| close(*a, *b, 1e-6)),
        "{g:?} vs {g2:?}"
    );
}

#[test]
fn router_shift_ratio_by_hand() {
    use driftlab::rl::router_shift::router_shift;
    // Two MoE layers, 3 experts, top-2; π_old ran experts [0, 1] at position 0 and [2, 0] at 1.
    // Layer 0 at position 0: |ln .5 − ln .4| + |ln .3 − ln .4| over 2; layer 1 unchanged, so
    // γ = exp(−d₀ / 2). Position 1 has the same distributions in both: γ = 1.
    let now = vec![
        vec![0.5, 0.3, 0.2, 0.1, 0.1, 0.8],
        vec![0.2, 0.2, 0.6, 0.3, 0.3, 0.4],
    ];
    let old = vec![
        vec![0.4, 0.4, 0.2, 0.1, 0.1, 0.8],
        vec![0.2, 0.2, 0.6, 0.3, 0.3, 0.4],
    ];
    let ids = vec![vec![0, 1, 2, 0], vec![2, 0, 2, 0]];
    let d0 = ((0.5f64 / 0.4).ln().abs() + (0.3f64 / 0.4).ln().abs()) / 2.0;
    let want = (-d0 / 2.0).exp() as f32;
    let g = router_shift(&now, &old, &ids, &[0, 1], (3, 2), 0.8);
    assert!(close(g[0], want, 1e-6) && g[1] == 1.0, "{g:?} vs {want}");
    assert!(want < 0.9, "the floor below binds: {want}");
    let g = router_shift(&now, &old, &ids, &[0, 1], (3, 2), 0.9);
    assert_eq!(g, vec![0.9, 1.0], "floored");
    assert_eq!(
        router_shift(&[], &[], &[], &[0, 1], (3, 2), 0.8),
        vec![1.0, 1.0],
        "dense"
    );
}

/// The router shift multiplies the token ratio before clipping: GRPO on w̃ = w · γ̃.
#[test]
fn router_shift_rescales_ratios_before_clipping_by_hand() {
    use driftlab::rl::router_shift::shifted_old_logp;
    // w = [1.5, 0.5, 1.1], γ̃ = [0.9, 1, 0.5] → w̃ = [1.35, 0.5, 0.55]; Â per token [1, 1, −1]:
    // token 0 clipped high (ℓ = −1.27, no gradient), token 1 ℓ = −0.5, token 2 clipped low
    // (w̃ < 0.8 with Â < 0: ℓ = 0.8, no gradient). Gradient of token 1: −w̃ / (2 · 2).
    let (mut b, leaf) = batch([1.0, -1.0], &w3(), &[2, 1], None);
    b.logp_old = shifted_old_logp(&b.logp_old, &[0.9, 1.0, 0.5]);
    let (loss, st) = policy_loss(&Algorithm::Grpo(GrpoConfig::default()), &b);
    let want = ((-1.27 - 0.5) / 2.0 + 0.8) / 2.0;
    assert!(close(to_vec(loss.clone().inner())[0], want, 1e-6));
    let g = grad(loss, &leaf);
    for (a, w) in g.iter().zip([0.0, -0.125, 0.0]) {
        assert!(close(*a, w, 1e-6), "{g:?}");
    }
    assert_eq!(st.clip_high, vec![true, false, false]);
    assert_eq!(st.clip_low, vec![false, false, true]);
}
