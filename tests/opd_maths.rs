//! The sequence- and token-level on-policy distillation losses (src/rl/loss/opd/: GVPD,
//! teacher-anchored RL, PG-OPD): the checked vectors of docs/opd_sources.md §7 against f64
//! references of each formula, and the autograd loss and gradient against those references
//! (loss to 1e-6 relative, gradient to 1e-6). The full-vocabulary JSD is in opd_jsd.rs.

mod common;
use burn::tensor::Tensor;
use common::flex;
use common::grads::{assert_abs, assert_rel, f64s, grad, value};
use driftlab::rl::loss::PolicyBatch;
use driftlab::rl::loss::opd::{
    GvpdConfig, OpdPgConfig, OpdStudent, PgForm, gvpd, pg, teacher_anchored,
};
use driftlab::rl::{Aggregation, GvpoConfig};
use driftlab::util::tensors::floats;

fn seg_of(lens: &[usize]) -> Vec<usize> {
    (lens.iter().enumerate())
        .flat_map(|(i, &l)| std::iter::repeat_n(i, l))
        .collect()
}

/// Each response's value `v[i]` spread evenly over its `lens[i]` tokens.
fn spread(v: &[f64], lens: &[usize]) -> Vec<f32> {
    (v.iter().zip(lens))
        .flat_map(|(&x, &l)| std::iter::repeat_n((x / l as f64) as f32, l))
        .collect()
}

/// A batch whose live log-probs `logp` are the gradient's leaf.
fn batch(
    logp: &[f32],
    logp_old: &[f32],
    lens: &[usize],
    group_size: usize,
) -> (PolicyBatch, Tensor<1>) {
    let n = logp.len();
    let leaf = floats(logp.to_vec(), [n], &flex())
        .autodiff()
        .require_grad();
    let r = lens.len();
    let b = PolicyBatch {
        logp: leaf.clone(),
        logp_old: logp_old.to_vec(),
        logp_tis: logp_old.to_vec(),
        logp_mu: logp_old.to_vec(),
        logp_ref: None,
        fixes: Default::default(),
        adv: vec![0.0; r],
        rewards: vec![0.0; r],
        seg: seg_of(lens),
        lens: lens.to_vec(),
        group_size,
        teacher: None,
    };
    (b, leaf)
}

// ---------------------------------------------------------------------------------- GVPD

/// GVPD in f64: loss (mean over groups) and ∂L/∂s_i = β f_i ρ_i / ((k−1)·groups).
fn gvpd_ref(
    s: &[f64],
    t: &[f64],
    lens: &[usize],
    k: usize,
    beta: f64,
    alpha: f64,
) -> (f64, Vec<f64>) {
    let groups = s.len() / k;
    let (mut loss, mut g) = (0.0, vec![0.0; s.len()]);
    for gi in 0..groups {
        let idx = gi * k..(gi + 1) * k;
        let f: Vec<f64> = idx
            .clone()
            .map(|i| beta * (lens[i] as f64).powf(-alpha))
            .collect();
        let x: Vec<f64> = idx.clone().map(|i| f[i - gi * k] * (s[i] - t[i])).collect();
        let m = x.iter().sum::<f64>() / k as f64;
        for (j, i) in idx.enumerate() {
            let rho = x[j] - m;
            loss += rho * rho / (2.0 * (k as f64 - 1.0) * groups as f64);
            g[i] = f[j] * rho / ((k as f64 - 1.0) * groups as f64);
        }
    }
    (loss, g)
}

/// GVPD's loss and per-response gradient (every token of a response gets ∂L/∂s_i).
fn gvpd_autograd(
    c: &GvpdConfig,
    s: &[f64],
    t: &[f64],
    a: &[f64],
    lens: &[usize],
    k: usize,
) -> (f64, Vec<f64>) {
    let (b, leaf) = batch(&spread(s, lens), &spread(a, lens), lens, k);
    let (loss, _) = gvpd::loss(c, &b, &spread(t, lens));
    let l = value(&loss);
    let g = grad(loss, &leaf);
    let per_resp: Vec<f64> = (0..lens.len())
        .map(|i| f64::from(g[seg_of(lens).iter().position(|&x| x == i).unwrap()]))
        .collect();
    (l, per_resp)
}

const S: [f64; 3] = [-2.0, -3.0, -1.5];
const T: [f64; 3] = [-2.5, -2.0, -1.0];
const A: [f64; 3] = [-2.2, -2.8, -1.4];
const LENS: [usize; 3] = [2, 4, 1];

#[test]
fn gvpd_matches_the_checked_vectors() {
    // docs/opd_sources.md §7.1: (β, α, L, ∂L/∂s).
    let rows = [
        (1.0, 0.0, 0.29166667, [0.416667, -0.333333, -0.083333]),
        (1.0, 1.0, 0.07291667, [0.104167, -0.010417, -0.166667]),
        (0.5, 0.0, 0.07291667, [0.104167, -0.083333, -0.020833]),
        (0.5, 1.0, 0.01822917, [0.026042, -0.002604, -0.041667]),
    ];
    for (beta, alpha, l, g) in rows {
        let (rl, rg) = gvpd_ref(&S, &T, &LENS, 3, beta, alpha);
        assert_rel(rl, l, 1e-6, "reference loss vs table");
        assert_abs(&rg, &g, 1e-6, "reference gradient vs table");
        let (al, ag) = gvpd_autograd(
            &GvpdConfig {
                beta,
                alpha,
                lambda: None,
            },
            &S,
            &T,
            &A,
            &LENS,
            3,
        );
        assert_rel(al, rl, 1e-6, "autograd loss");
        assert_abs(&ag, &rg, 1e-6, "autograd gradient");
    }
}

#[test]
fn gvpd_gradient_is_beta_over_k_minus_one_times_rho_on_two_groups() {
    // Two groups of k = 4, α = 0.5: the loss is the mean over groups.
    let s = [-3.1, -2.4, -5.0, -1.2, -0.7, -2.2, -4.4, -3.3];
    let t = [-2.9, -2.0, -4.1, -1.9, -1.1, -2.0, -3.8, -3.9];
    let a = [-3.0, -2.5, -4.8, -1.0, -0.9, -2.1, -4.0, -3.0];
    let lens = [3, 2, 5, 1, 1, 2, 4, 3];
    for alpha in [0.0, 0.5] {
        let c = GvpdConfig {
            beta: 0.3,
            alpha,
            lambda: None,
        };
        let (rl, rg) = gvpd_ref(&s, &t, &lens, 4, c.beta, alpha);
        let (al, ag) = gvpd_autograd(&c, &s, &t, &a, &lens, 4);
        assert_rel(al, rl, 1e-6, "loss");
        assert_abs(&ag, &rg, 1e-6, "gradient");
    }
}

#[test]
fn gvpd_ignores_the_old_policy_and_vanishes_at_a_constant_gap() {
    let c = GvpdConfig {
        beta: 1.0,
        alpha: 0.0,
        lambda: None,
    };
    let (l1, _) = gvpd_autograd(&c, &S, &T, &A, &LENS, 3);
    let (l2, _) = gvpd_autograd(&c, &S, &T, &[0.0, -9.0, 3.0], &LENS, 3);
    assert_eq!(l1, l2, "π_old cancels");
    let shifted: Vec<f64> = T.iter().map(|t| t + 0.7).collect();
    let (l0, g0) = gvpd_autograd(&c, &shifted, &T, &A, &LENS, 3);
    assert!(
        l0.abs() < 1e-12 && g0.iter().all(|g| g.abs() < 1e-6),
        "{l0} {g0:?}"
    );
}

#[test]
fn teacher_anchored_rl_matches_the_checked_vectors_and_gvpd() {
    // §7.1: β = 1, λ = 0.5, r = [1, 0, 0] through GVPO's code path.
    let c = GvpoConfig { beta: 1.0 };
    let run = |lambda: f64, rewards: Vec<f32>| {
        let (mut b, leaf) = batch(&spread(&S, &LENS), &spread(&A, &LENS), &LENS, 3);
        b.rewards = rewards;
        let (loss, _) = teacher_anchored(&c, lambda, &b, &spread(&T, &LENS));
        let l = value(&loss);
        let g = grad(loss, &leaf);
        (l, [0, 2, 6].map(|t| f64::from(g[t])))
    };
    let (l, g) = run(0.5, vec![1.0, 0.0, 0.0]);
    assert_rel(l, 0.01791667, 1e-6, "loss");
    assert_abs(&g, &[-0.066667, -0.041667, 0.108333], 1e-6, "gradient");
    // r ≡ 0, λ = 1 is GVPD at α = 0.
    let (l, g) = run(1.0, vec![0.0; 3]);
    let (gl, gg) = gvpd_autograd(
        &GvpdConfig {
            beta: 1.0,
            alpha: 0.0,
            lambda: None,
        },
        &S,
        &T,
        &A,
        &LENS,
        3,
    );
    assert_rel(l, gl, 1e-6, "loss as GVPD");
    assert_abs(&g, &gg, 1e-6, "gradient as GVPD");
    assert_rel(l, 0.29166667, 1e-6, "row 1");
}

// ---------------------------------------------------------------------------------- PG-OPD

/// PG-OPD in f64: (loss, ∂L/∂logp) with advantages `adv_env[seg] − λ D`.
fn pg_ref(
    c: &OpdPgConfig,
    lp: &[f64],
    student: &[f64],
    old: &[f64],
    tea: &[f64],
    lens: &[usize],
    adv_env: &[f64],
) -> (f64, Vec<f64>) {
    let seg = seg_of(lens);
    let n = lp.len();
    let mut d: Vec<f64> = (0..n).map(|t| student[t] - tea[t]).collect();
    for t in (0..n - 1).rev() {
        if seg[t + 1] == seg[t] {
            d[t] += c.gamma * d[t + 1];
        }
    }
    let (mut loss, mut g) = (0.0, vec![0.0; n]);
    for t in 0..n {
        let a = adv_env[seg[t]] - c.lambda * d[t];
        let w = (lp[t] - old[t]).exp();
        let weight = match c.aggregation {
            Aggregation::TokenMean => 1.0 / n as f64,
            Aggregation::SeqMeanTokenMean => 1.0 / (lens[seg[t]] * lens.len()) as f64,
        };
        let (l, dl) = match c.form {
            PgForm::ImportanceSampling => (-w * a, -w * a),
            PgForm::Ppo { eps_low, eps_high } => {
                let clip = w.clamp(1.0 - eps_low, 1.0 + eps_high) * a;
                if w * a <= clip {
                    (-w * a, -w * a)
                } else {
                    (-clip, 0.0)
                }
            }
        };
        loss += weight * l;
        g[t] = weight * dl;
    }
    (loss, g)
}

fn pg_autograd(c: &OpdPgConfig, lp: &[f32], b: PolicyBatch, tea: &[f32]) -> (f64, Vec<f64>) {
    let leaf = floats(lp.to_vec(), [lp.len()], &flex())
        .autodiff()
        .require_grad();
    let b = PolicyBatch {
        logp: leaf.clone(),
        ..b
    };
    let (loss, _) = pg::loss(c, &b, tea);
    (value(&loss), f64s(&grad(loss, &leaf)))
}

const OLD: [f32; 3] = [-0.5, -1.2, -0.3];
const TEA: [f32; 3] = [-0.7, -0.9, -1.3];

#[test]
fn pg_advantages_follow_tinker_and_stop_at_a_response_end() {
    let (b, _) = batch(&OLD, &OLD, &[3], 1);
    let adv = |gamma| {
        pg::advantages(
            &OpdPgConfig {
                gamma,
                ..OpdPgConfig::default()
            },
            &b,
            &TEA,
        )
    };
    assert_abs(&f64s(&adv(0.0)), &[-0.2, 0.3, -1.0], 1e-6, "γ = 0");
    assert_abs(&f64s(&adv(0.5)), &[-0.3, -0.2, -1.0], 1e-6, "γ = 0.5");
    // Two responses of lengths 2 and 1, env advantages [1, −1]: the discount restarts.
    let (mut b, _) = batch(&OLD, &OLD, &[2, 1], 2);
    b.adv = vec![1.0, -1.0];
    let c = OpdPgConfig {
        gamma: 0.5,
        ..OpdPgConfig::default()
    };
    assert_abs(
        &f64s(&pg::advantages(&c, &b, &TEA)),
        &[1.0 - 0.05, 1.3, -2.0],
        1e-6,
        "two responses",
    );
}

#[test]
fn pg_matches_the_checked_vectors() {
    // §7.2: one sequence of 3 tokens, λ = 1, A_env = 0; the table sums over tokens, the
    // token mean divides by 3. (lp, γ, IS loss, IS grad, PPO loss, PPO grad.)
    let rows: [([f32; 3], f64, f64, [f64; 3], f64, [f64; 3]); 6] = [
        (OLD, 0.0, 0.9, [0.2, -0.3, 1.0], 0.9, [0.2, -0.3, 1.0]),
        (OLD, 0.5, 1.5, [0.3, 0.2, 1.0], 1.5, [0.3, 0.2, 1.0]),
        (
            [-0.4, -1.2, -0.5],
            0.0,
            0.739765,
            [0.221034, -0.3, 0.818731],
            0.739765,
            [0.221034, -0.3, 0.818731],
        ),
        (
            [-0.4, -1.2, -0.5],
            0.5,
            1.350282,
            [0.331551, 0.2, 0.818731],
            1.350282,
            [0.331551, 0.2, 0.818731],
        ),
        (
            [-0.2, -0.9, -0.3],
            0.0,
            0.865014,
            [0.269972, -0.404958, 1.0],
            0.909972,
            [0.269972, 0.0, 1.0],
        ),
        (
            [-0.2, -0.9, -0.3],
            0.5,
            1.674929,
            [0.404958, 0.269972, 1.0],
            1.674929,
            [0.404958, 0.269972, 1.0],
        ),
    ];
    let ppo = PgForm::Ppo {
        eps_low: 0.2,
        eps_high: 0.2,
    };
    for (lp, gamma, is_l, is_g, ppo_l, ppo_g) in rows {
        for (form, l, g) in [
            (PgForm::ImportanceSampling, is_l, is_g),
            (ppo, ppo_l, ppo_g),
        ] {
            let c = OpdPgConfig {
                gamma,
                form,
                ..OpdPgConfig::default()
            };
            let (rl, rg) = pg_ref(
                &c,
                &f64s(&lp),
                &f64s(&OLD),
                &f64s(&OLD),
                &f64s(&TEA),
                &[3],
                &[0.0],
            );
            let sum_g: Vec<f64> = rg.iter().map(|x| 3.0 * x).collect();
            assert_rel(3.0 * rl, l, 1e-6, "reference loss vs table");
            assert_abs(&sum_g, &g, 1e-6, "reference gradient vs table");
            let (b, _) = batch(&lp, &OLD, &[3], 1);
            let (al, ag) = pg_autograd(&c, &lp, b, &TEA);
            assert_rel(al, rl, 1e-6, "autograd loss");
            assert_abs(&ag, &rg, 1e-6, "autograd gradient");
        }
    }
}

#[test]
fn pg_on_two_groups_with_rewards_and_engine_log_probs() {
    // Four responses (lengths 2, 3, 1, 2) in two groups; env advantages; the teacher is
    // compared with the engine's log-probs; both aggregations and forms, γ = 0.9.
    let lens = [2, 3, 1, 2];
    let old = [-0.5f32, -1.2, -0.3, -2.0, -0.1, -0.8, -1.5, -0.4];
    let mu = [-0.6f32, -1.0, -0.35, -2.2, -0.05, -0.7, -1.4, -0.5];
    let tea = [-0.7f32, -0.9, -1.3, -1.0, -0.2, -0.6, -2.5, -0.3];
    let lp = [-0.3f32, -1.5, -0.2, -1.9, -0.4, -0.75, -1.1, -0.6];
    let adv = [0.5f32, -0.5, 1.0, -1.0];
    for aggregation in [Aggregation::TokenMean, Aggregation::SeqMeanTokenMean] {
        for form in [
            PgForm::ImportanceSampling,
            PgForm::Ppo {
                eps_low: 0.2,
                eps_high: 0.28,
            },
        ] {
            let c = OpdPgConfig {
                lambda: 0.7,
                gamma: 0.9,
                form,
                aggregation,
                student: OpdStudent::Engine,
                env_advantage: true,
            };
            let (mut b, _) = batch(&lp, &old, &lens, 2);
            b.logp_mu = mu.to_vec();
            b.adv = adv.to_vec();
            let (rl, rg) = pg_ref(
                &c,
                &f64s(&lp),
                &f64s(&mu),
                &f64s(&old),
                &f64s(&tea),
                &lens,
                &f64s(&adv),
            );
            let (al, ag) = pg_autograd(&c, &lp, b, &tea);
            assert_rel(al, rl, 1e-6, "loss");
            assert_abs(&ag, &rg, 1e-6, "gradient");
        }
    }
}

#[test]
fn pg_counts_the_tokens_ppo_clips() {
    let lp = [-0.2f32, -0.9, -0.3];
    let (b, _) = batch(&lp, &OLD, &[3], 1);
    let c = OpdPgConfig {
        form: PgForm::Ppo {
            eps_low: 0.2,
            eps_high: 0.2,
        },
        ..OpdPgConfig::default()
    };
    let (_, st) = pg::loss(&c, &b, &TEA);
    assert_eq!(
        st.clip_high,
        [false, true, false],
        "token 2: A > 0, w = e^0.3 > 1.2"
    );
    assert_eq!((st.clip_low, st.clip_seq), (vec![false; 3], vec![true]));
}
