//! The six frames' columns: the steps, updates, layers, lengths, prefixes and events frames
//! (their identity columns are [`super::IDENTITY`]).

use super::{Col, FrameSchema, f, i, s};
use crate::rl::fixes;

pub static STEPS: FrameSchema = FrameSchema {
    name: "steps",
    grain: "one row per cell and RL step",
    keys: &[],
    metrics: &[
        f("reward_mean", "mean reward of the rollout batch"),
        f(
            "reward_std",
            "population std of the rollout batch's rewards",
        ),
        f("accuracy", "share of exactly correct sampled responses"),
        f(
            "eval_accuracy",
            "greedy exact-match accuracy on the held-out set (null between evals)",
        ),
        f(
            "resp_len_mean",
            "mean response length in tokens (incl. <eos>)",
        ),
        f(
            "entropy",
            "mean full-vocabulary entropy of π_old on the sampled positions",
        )
        .unread(),
        f(
            "frac_zero_adv_groups",
            "share of prompt groups whose rewards are all equal",
        )
        .unread(),
        f(
            "mismatch_kl_k3",
            "mean of ρ − 1 − ln ρ, ρ = exp(logp_old − logp_mu), logp_old the trainer's recompute: \
             the k3 estimate of KL(μ ‖ π_θ) of the behaviour policy (the rollout engine, running \
             the policy of `staleness` steps before, with its mismatch) to the current policy",
        ),
        f(
            "mismatch_extreme_frac",
            "share of tokens with max(ρ, 1/ρ) > 2",
        ),
        f(
            "mismatch_route_frac",
            "share of rollout (token, layer, slot) routes that differ from π_old's native routes (null for dense)",
        ),
        f(
            "mismatch_router_frac",
            "share of rollout (token, layer) routers whose expert set differs from π_old's native one: the R3 paper's share of routers (null for dense)",
        ),
        f(
            "mismatch_token_frac",
            "share of rollout tokens whose expert set differs from π_old's in at least one layer: the R3 paper's share of tokens (null for dense)",
        ),
        // The rest of the mismatch suite: for readers of the frames; no report reads them.
        f(
            "mismatch_abs_logp",
            "mean over tokens of |ln ρ| (ρ as in mismatch_kl_k3)",
        )
        .unread(),
        f("mismatch_sq_logp", "mean over tokens of (ln ρ)²").unread(),
        f(
            "mismatch_beyond5_frac",
            "share of tokens with max(ρ, 1/ρ) > 5",
        )
        .unread(),
        f(
            "load_max_violation",
            "max over layers of max_e load_e / uniform − 1 (null for dense)",
        )
        .unread(),
        i(
            "dead_experts",
            "experts with less than 1% of the uniform load, summed over layers",
        )
        .unread(),
        i(
            "staleness",
            "steps between the sampling policy and the current one: min(step, rollout_staleness)",
        )
        .unread(),
        f("t_rollout", "seconds in the rollout engine"),
        f("t_update", "seconds in π_old recompute and updates"),
        f("t_probe", "seconds in the drift probe"),
        i("n_tokens", "response tokens of the rollout batch"),
        f(
            "teacher_kl",
            "mean over the rollout batch's response tokens of log π_old − log π_T, the student's \
             log-prob (the trainer's recompute before the step) minus the frozen teacher's: a \
             sampled estimate of KL(π_S ‖ π_T) per token (null without rl.teacher)",
        ),
        f(
            "teacher_eval",
            "the frozen teacher's greedy eval accuracy, by the same evaluation as \
             `eval_accuracy` (a constant of the cell; on the steps that evaluate, null \
             elsewhere and without rl.teacher)",
        ),
        f(
            "teacher_route_top1",
            "share of the rollout batch's (token, layer) where the teacher's first expert is \
             π_old's first (null without a MoE teacher of the student's layers, experts and k)",
        )
        .unread(),
        f(
            "teacher_route_topk",
            "mean share of π_old's k experts per (token, layer) that the teacher also routes to \
             (null as teacher_route_top1)",
        )
        .unread(),
        f(
            "teacher_router_mass",
            "the teacher router's mass on its own k experts, mean over the rollout batch's \
             (token, layer) (null without a MoE teacher)",
        )
        .unread(),
        // Read by claim (r)'s line (src/report/claims/precision.rs): slim keeps them.
        ROUTER_DISAGREE,
        ROUTER_BF16_TIE,
        ROUTER_BF16_TIE_FLIP,
    ],
};

/// The router check's columns (`rl.router_check`, once a step on the rollout engine): in the
/// steps frame pooled over the MoE layers (counts summed), in the layers frame per layer on
/// minibatch 0's rows (null on the others).
const ROUTER_DISAGREE: Col = f(
    "router_disagree_frac",
    "share of the rollout engine's expert choices (valid token × slot) that an f64 router with the \
     policy's fp32 weights, on the engine's own router inputs, does not make: the engine router's \
     precision error (null unless rl.router_check)",
);
const ROUTER_BF16_TIE: Col = f(
    "router_bf16_tie_frac",
    "share of valid tokens whose f64 k-th and (k+1)-th router scores are within one bf16 spacing \
     of each other (null unless rl.router_check)",
);
const ROUTER_BF16_TIE_FLIP: Col = f(
    "router_bf16_tie_flip_frac",
    "share of those near-tie tokens whose engine expert set differs from the f64 router's \
     (null unless rl.router_check, or without a near-tie)",
);

/// The drift columns the updates and layers frames share.
const DRIFT_EXPERT_FRAC: Col = f(
    "drift_expert_frac",
    "share of activated expert slots that changed in the update (probe after the step vs the update forward)",
);
const ROUTER_TOPK_MASS: Col = f(
    "router_topk_mass",
    "mean over tokens of the router probability mass of the k most likely experts, before the step",
);
const ROUTER_TOPK_GAP: Col = f(
    "router_topk_gap",
    "mean over tokens of ln p_k − ln p_(k+1), the k-th and (k+1)-th router probabilities before the step (the logit gap for softmax)",
);
const ROUTER_NEAR_TIE: Col = f(
    "router_near_tie_frac",
    "share of tokens whose ln p_k − ln p_(k+1) is below 0.1 nats, before the step",
);
const DRIFT_TOKEN_FRAC: Col = f(
    "drift_token_frac",
    "share of tokens whose expert set changed",
);
const DRIFT_SINCE_ROLLOUT: Col = f(
    "drift_since_rollout_frac",
    "the same share, updated policy vs π_old's routes of the rollout batch",
);
const ROUTER_JS: Col = f(
    "router_js",
    "mean Jensen–Shannon divergence of the router distributions before and after the step",
);
const MINIBATCH: Col = i(
    "minibatch",
    "minibatch index within the step (0 is on-policy)",
);

/// The updates frame's metrics before the stability fixes' logged shares.
const UPDATES_HEAD: &[Col] = &[
    f(
        "ratio_tok_mean",
        "mean of the token ratios w = exp(logp − logp_old) before the step",
    ).unread(),
    f("ratio_tok_var", "variance of the token ratios"),
    f("ratio_tok_max", "largest token ratio"),
    f("ratio_tok_min", "smallest token ratio").unread(),
    f("logratio_tok_var", "variance of log w").unread(),
    f(
        "ratio_seq_var",
        "variance of the sequence ratios s_i (GSPO's length-normalised ratio)",
    ),
    f(
        "logratio_within_seq_var",
        "mean over responses of the variance of log w within the response",
    ).unread(),
    f("ess", "effective sample size (Σw)²/(n·Σw²)").unread(),
    f(
        "clip_frac_tok",
        "share of clipped tokens (a clipped GSPO response counts all its tokens)",
    ),
    f("clip_frac_low", "share of tokens clipped at 1 − ε_low").unread(),
    f("clip_frac_high", "share of tokens clipped at 1 + ε_high").unread(),
    f(
        "clip_frac_seq",
        "share of responses with any clipped token (clipped as a whole for GSPO)",
    ).unread(),
    f("kl_old", "mean(logp_old − logp) (k1)").unread(),
    f(
        "kl_ref",
        "k3 KL to the cold-start reference (null when not measured)",
    ).unread(),
    f("grad_norm", "global gradient norm before clipping").unread(),
    f("loss_policy", "policy loss (incl. its KL term)").unread(),
    f("loss_aux", "load-balancing loss").unread(),
    f("loss_total", "weighted total loss").unread(),
    i(
        "applied",
        "1 when the optimizer step was taken, 0 when skipped (non-finite, or every token masked by the corrections)",
    ).unread(),
    f("lr", "learning rate of the step"),
    f("resp_len_mean", "mean response length of the minibatch"),
    i("n_tokens", "response tokens of the minibatch"),
    f(
        "router_shift_mean",
        "mean router-shift weight γ̃ over the minibatch's tokens (null when off)",
    ).unread(),
    f(
        "router_shift_floored",
        "share of tokens whose γ̃ sits at the floor (null when off)",
    ).unread(),
];

/// The stability fixes' logged shares, one column per fix that masks, in registry order
/// ([`crate::rl::fixes::SHARES`]).
const FIX_SHARES: [Col; fixes::SHARES.len()] = {
    let mut out = [f("", ""); fixes::SHARES.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = f(fixes::SHARES[i].column, fixes::SHARES[i].doc);
        i += 1;
    }
    out
};

/// The updates frame's metrics after the fixes' shares.
const UPDATES_TAIL: &[Col] = &[
    f(
        "pr2_loss",
        "PR²: KL(live router ‖ predicted routing distribution), mean over tokens, summed over layers, on this minibatch (null when pr2 is off and on a step's first minibatch)",
    ),
    f(
        "replay_replaced_frac",
        "share of the update forward's replayed expert slots that replay_threshold replaced with a live choice (null when off)",
    ),
    DRIFT_EXPERT_FRAC,
    DRIFT_TOKEN_FRAC,
    f(
        "drift_flips_per_token",
        "mean number of layers whose expert set changed, per token",
    )
    .unread(),
    f(
        "drift_router_frac",
        "share of (token, layer) routers whose expert set changed in the update: drift_flips_per_token / layers",
    ),
    f(
        "replay_stale_frac",
        "r2/r3: share of the expert slots the update forward replayed that are not in the live router's top-k (null for native routing)",
    ),
    DRIFT_SINCE_ROLLOUT,
    ROUTER_JS.unread(),
    ROUTER_TOPK_MASS,
    ROUTER_TOPK_GAP,
    ROUTER_NEAR_TIE,
    f(
        "drift_bias_expert_frac",
        "sigmoid_bias router: share of activated expert slots the bias update alone changed \
         (pre-step weights with the new bias vs the update forward); null otherwise",
    )
    .unread(),
    f("t_update", "seconds in the update").unread(),
    f("t_probe", "seconds in the drift probe").unread(),
];

const UPDATES_METRICS: [Col; UPDATES_HEAD.len() + FIX_SHARES.len() + UPDATES_TAIL.len()] =
    joined(&[UPDATES_HEAD, &FIX_SHARES, UPDATES_TAIL]);

/// `parts` one after the other (`N` columns in all), at compile time.
const fn joined<const N: usize>(parts: &[&[Col]]) -> [Col; N] {
    let mut out = [f("", ""); N];
    let (mut p, mut n) = (0, 0);
    while p < parts.len() {
        let mut i = 0;
        while i < parts[p].len() {
            out[n] = parts[p][i];
            (i, n) = (i + 1, n + 1);
        }
        p += 1;
    }
    assert!(n == N, "the parts hold N columns");
    out
}

pub static UPDATES: FrameSchema = FrameSchema {
    name: "updates",
    grain: "one row per cell, step and minibatch (one optimizer step)",
    keys: &[MINIBATCH],
    metrics: &UPDATES_METRICS,
};

pub static LAYERS: FrameSchema = FrameSchema {
    name: "layers",
    grain: "one row per cell, step, minibatch and MoE layer",
    keys: &[MINIBATCH, i("layer", "MoE layer index, from 0")],
    metrics: &[
        DRIFT_EXPERT_FRAC,
        DRIFT_TOKEN_FRAC.unread(),
        DRIFT_SINCE_ROLLOUT,
        ROUTER_JS.unread(),
        f(
            "router_entropy",
            "mean entropy of the router distribution before the step",
        )
        .unread(),
        ROUTER_TOPK_MASS,
        ROUTER_TOPK_GAP,
        ROUTER_NEAR_TIE,
        f(
            "load_max_violation",
            "max_e load_e / uniform − 1 of the update forward's routes",
        )
        .unread(),
        i(
            "dead_experts",
            "experts with less than 1% of the uniform load",
        )
        .unread(),
        ROUTER_DISAGREE.unread(),
        ROUTER_BF16_TIE.unread(),
        ROUTER_BF16_TIE_FLIP.unread(),
    ],
};

pub static LENGTHS: FrameSchema = FrameSchema {
    name: "lengths",
    grain: "one row per cell, step and response-length bin (4 tokens wide: 1–4, 5–8, …), the \
            step's off-policy updates pooled (every minibatch after the first; the first too when \
            π_old is the engine's or a stale policy's); variances are within (update, exact length)",
    keys: &[
        i("len_lo", "shortest response length of the bin"),
        i("len_hi", "longest response length of the bin"),
    ],
    metrics: &[
        i("n_resp", "responses in the bin over the pooled updates"),
        i(
            "df",
            "degrees of freedom of the pooled variances: Σ over (update, exact length) groups of \
             (responses − 1)",
        ),
        f("len_mean", "mean response length in the bin"),
        f(
            "logw_sum_var",
            "pooled variance of Σ_t log w over a response (the log of the token ratios' \
             product); null when df = 0",
        ),
        f(
            "logw_mean_var",
            "pooled variance of mean_t log w (GSPO's length-normalised log-ratio); null when df = 0",
        ),
    ],
};

pub static PREFIXES: FrameSchema = FrameSchema {
    name: "prefixes",
    grain: "one row per cell, step and prefix length ℓ (1, 2, 4, 8, …): the first ℓ tokens of \
            every response at least ℓ long, the step's off-policy updates pooled (as in the \
            lengths frame); variances are within (update, exact response length), so every ℓ \
            reads the same responses of the same prompts and length does not bring difficulty \
            with it",
    keys: &[i("prefix", "prefix length ℓ in tokens")],
    metrics: &[
        i(
            "n_resp",
            "responses at least ℓ tokens long over the pooled updates",
        ),
        i(
            "df",
            "degrees of freedom of the pooled variances: Σ over (update, exact length) groups of \
             (responses − 1)",
        ),
        f(
            "prefix_sum_var",
            "pooled variance of Σ_{t<ℓ} log w_t over responses; null when df = 0",
        ),
        f(
            "pos_var_sum",
            "Σ_{t<ℓ} of the pooled variance of log w_t at position t: what prefix_sum_var \
             would be if the tokens' log-ratios were uncorrelated; null when df = 0",
        ),
    ],
};

pub static EVENTS: FrameSchema = FrameSchema {
    name: "events",
    grain: "one row per collapse or warning event",
    keys: &[],
    metrics: &[
        s(
            "kind",
            "non_finite | reward_collapse | entropy_collapse | ratio_explosion | grad_spike | expert_collapse | all_masked | length_collapse | entropy_inflation | teacher_divergence",
        ),
        f(
            "value",
            "the value that crossed the threshold (null when not finite)",
        ),
        f("threshold", "the threshold it crossed"),
        s("detail", "what happened, in words"),
    ],
};
