//! The full-vocabulary generalised JSD of on-policy distillation (src/rl/loss/opd/jsd.rs, TRL's
//! loss): the checked vectors of docs/opd_sources.md §7.3 against an f64 reference (gradients
//! by central differences, and in closed form at β ∈ {0, 1}), and the autograd loss and
//! gradient against it (loss to 1e-6 relative, gradient to 1e-6).

mod common;
use common::flex;
use common::grads::{assert_abs, assert_rel, f64s, grad, value};
use driftlab::rl::loss::opd::{OpdKlConfig, jsd};
use driftlab::util::tensors::floats;

fn log_softmax(z: &[f64]) -> Vec<f64> {
    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = m + z.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
    z.iter().map(|x| x - lse).collect()
}

/// TRL's generalised JSD of one token in f64.
fn jsd_ref(zs: &[f64], zt: &[f64], beta: f64, temp: f64) -> f64 {
    let ls = log_softmax(&zs.iter().map(|z| z / temp).collect::<Vec<_>>());
    let lt = log_softmax(&zt.iter().map(|z| z / temp).collect::<Vec<_>>());
    let kl = |p: &[f64], q: &[f64]| p.iter().zip(q).map(|(a, b)| a.exp() * (a - b)).sum::<f64>();
    if beta == 1.0 {
        return kl(&ls, &lt);
    }
    if beta == 0.0 {
        return kl(&lt, &ls);
    }
    let lm: Vec<f64> = (ls.iter().zip(&lt))
        .map(|(s, t)| ((1.0 - beta) * s.exp() + beta * t.exp()).ln())
        .collect();
    beta * kl(&lt, &lm) + (1.0 - beta) * kl(&ls, &lm)
}

/// ∂/∂z_S of `jsd_ref` by central differences (h = 1e-6).
fn jsd_ref_grad(zs: &[f64], zt: &[f64], beta: f64, temp: f64) -> Vec<f64> {
    (0..zs.len())
        .map(|k| {
            let mut up = zs.to_vec();
            let mut down = zs.to_vec();
            up[k] += 1e-6;
            down[k] -= 1e-6;
            (jsd_ref(&up, zt, beta, temp) - jsd_ref(&down, zt, beta, temp)) / 2e-6
        })
        .collect()
}

/// The loss and ∂L/∂z_S of `jsd::loss` on rows of `vocab` logits.
fn jsd_autograd(c: &OpdKlConfig, zs: &[f32], zt: &[f32], vocab: usize) -> (f64, Vec<f64>) {
    let n = zs.len() / vocab;
    let leaf = floats(zs.to_vec(), [n, vocab], &flex())
        .autodiff()
        .require_grad();
    let teacher = floats(zt.to_vec(), [n, vocab], &flex()).autodiff();
    let loss = jsd::loss(c, leaf.clone(), teacher);
    (value(&loss), f64s(&grad(loss, &leaf)))
}

#[test]
fn jsd_matches_the_checked_vectors() {
    // §7.3: z_S = [1, 0, −1], p_T = [0.2, 0.5, 0.3]; (β, T, loss, ∂L/∂z_S).
    let pt = [0.2f64, 0.5, 0.3];
    let zs = [1.0, 0.0, -1.0];
    let rows = [
        (1.0, 1.0, 0.516296, [0.456047, -0.301201, -0.154846]),
        (0.0, 1.0, 0.477953, [0.465241, -0.255272, -0.209969]),
        (0.5, 1.0, 0.118105, [0.105224, -0.065301, -0.039923]),
        (0.1, 1.0, 0.042564, [0.040369, -0.022972, -0.017397]),
        (0.9, 1.0, 0.045179, [0.039659, -0.025906, -0.013753]),
        (1.0, 2.0, 0.232218, [0.176496, -0.110489, -0.066007]),
    ];
    for (beta, temp, l, g) in rows {
        // The teacher's tempered distribution is p_T: its logits are T·ln p_T.
        let zt: Vec<f64> = pt.iter().map(|p| temp * p.ln()).collect();
        let rl = jsd_ref(&zs, &zt, beta, temp);
        let rg = jsd_ref_grad(&zs, &zt, beta, temp);
        assert_abs(&[rl], &[l], 1e-6, "reference loss vs table");
        assert_abs(&rg, &g, 1e-6, "reference gradient vs table");
        let c = OpdKlConfig {
            beta,
            temperature: temp,
        };
        let zt32: Vec<f32> = zt.iter().map(|&x| x as f32).collect();
        let (al, ag) = jsd_autograd(&c, &[1.0, 0.0, -1.0], &zt32, 3);
        assert_rel(al, rl, 1e-6, "autograd loss");
        assert_abs(&ag, &rg, 1e-6, "autograd gradient");
    }
}

#[test]
fn jsd_ends_have_closed_form_gradients() {
    // Reverse KL: p_k(ℓ_k − Σ_j p_j ℓ_j), ℓ = log p_S − log p_T; forward KL: p_S − p_T.
    let zs = [0.3f64, -1.1, 2.0, 0.0];
    let zt = [1.0f64, 0.5, -0.5, 0.2];
    let (ls, lt) = (log_softmax(&zs), log_softmax(&zt));
    let ell: Vec<f64> = ls.iter().zip(&lt).map(|(s, t)| s - t).collect();
    let mean_ell: f64 = ls.iter().zip(&ell).map(|(s, e)| s.exp() * e).sum();
    let rkl: Vec<f64> = ls
        .iter()
        .zip(&ell)
        .map(|(s, e)| s.exp() * (e - mean_ell))
        .collect();
    let fkl: Vec<f64> = ls.iter().zip(&lt).map(|(s, t)| s.exp() - t.exp()).collect();
    let (zs32, zt32) = (zs.map(|x| x as f32), zt.map(|x| x as f32));
    for (beta, want) in [(1.0, rkl), (0.0, fkl)] {
        let c = OpdKlConfig {
            beta,
            temperature: 1.0,
        };
        let (l, g) = jsd_autograd(&c, &zs32, &zt32, 4);
        assert_rel(l, jsd_ref(&zs, &zt, beta, 1.0), 1e-6, "loss");
        assert_abs(&g, &want, 1e-6, "closed-form gradient");
    }
}

#[test]
fn jsd_is_a_token_mean_over_rows() {
    // Two tokens, vocabulary 5, T = 0.7: the loss is the mean of the rows' divergences.
    let zs = [0.3f64, -1.1, 2.0, 0.0, 0.4, -0.2, 0.9, -1.5, 0.1, 1.2];
    let zt = [1.0f64, 0.5, -0.5, 0.2, -0.3, 0.0, 1.4, -1.0, -0.6, 0.8];
    for beta in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let (rl, rg): (Vec<f64>, Vec<Vec<f64>>) = (0..2)
            .map(|r| {
                let (s, t) = (&zs[r * 5..r * 5 + 5], &zt[r * 5..r * 5 + 5]);
                (
                    jsd_ref(s, t, beta, 0.7) / 2.0,
                    jsd_ref_grad(s, t, beta, 0.7),
                )
            })
            .unzip();
        let rg: Vec<f64> = rg.concat().iter().map(|g| g / 2.0).collect();
        let c = OpdKlConfig {
            beta,
            temperature: 0.7,
        };
        let (al, ag) = jsd_autograd(&c, &zs.map(|x| x as f32), &zt.map(|x| x as f32), 5);
        assert_rel(al, rl.iter().sum(), 1e-6, "loss");
        assert_abs(&ag, &rg, 1e-6, "gradient");
    }
}

#[test]
fn jsd_tends_to_zero_at_both_ends_which_are_the_unscaled_kls() {
    let pt = [0.2f64, 0.5, 0.3];
    let zs = [1.0, 0.0, -1.0];
    let zt: Vec<f64> = pt.iter().map(|p| p.ln()).collect();
    // §7.3's limits: JSD_β / β → KL(p_T ‖ p_S) as β → 0, JSD_β / (1 − β) → KL(p_S ‖ p_T) as β → 1.
    assert_abs(
        &[jsd_ref(&zs, &zt, 1e-4, 1.0) / 1e-4],
        &[0.477899],
        1e-6,
        "β → 0",
    );
    assert_abs(
        &[jsd_ref(&zs, &zt, 1.0 - 1e-4, 1.0) / 1e-4],
        &[0.516228],
        1e-6,
        "β → 1",
    );
    // The f32 loss shows the same discontinuity: a thousandth of a KL beside the whole KL.
    let zt32: Vec<f32> = zt.iter().map(|&x| x as f32).collect();
    let at = |beta: f64| {
        jsd_autograd(
            &OpdKlConfig {
                beta,
                temperature: 1.0,
            },
            &[1.0, 0.0, -1.0],
            &zt32,
            3,
        )
        .0
    };
    assert_rel(at(1e-3) / 1e-3, at(0.0), 1e-2, "near forward KL");
    assert_rel(at(1.0 - 1e-3) / 1e-3, at(1.0), 1e-2, "near reverse KL");
}

#[test]
fn jsd_gives_the_teacher_no_gradient() {
    let leaf = floats(vec![1.0, 0.0, -1.0], [1, 3], &flex())
        .autodiff()
        .require_grad();
    let teacher = floats(vec![0.2, -0.4, 0.1], [1, 3], &flex())
        .autodiff()
        .require_grad();
    let loss = jsd::loss(
        &OpdKlConfig {
            beta: 0.5,
            temperature: 1.0,
        },
        leaf.clone(),
        teacher.clone(),
    );
    let grads = loss.backward();
    assert!(leaf.grad(&grads).is_some());
    assert!(teacher.grad(&grads).is_none(), "the teacher is frozen");
}

#[test]
#[should_panic(expected = "share a tokenizer")]
fn jsd_refuses_a_teacher_with_another_vocabulary() {
    let s = floats(vec![0.0; 6], [2, 3], &flex());
    let t = floats(vec![0.0; 8], [2, 4], &flex());
    let _ = jsd::loss(&OpdKlConfig::default(), s, t);
}
