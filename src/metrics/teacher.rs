//! The teacher's numbers of one RL step (on-policy distillation): the sampled teacher KL per
//! token and the teacher's routing beside the student's, each a column of the steps frame.

use crate::rl::StepOutput;

/// The teacher's routing beside the student's, over the rollout batch's real tokens and every
/// MoE layer: the share of (token, layer) whose first expert is π_old's first, the mean share
/// of π_old's k experts the teacher also picks (both only where the teacher has the student's
/// layers, experts and k), and the teacher router's mass on its own k experts; None without a
/// MoE teacher.
pub fn teacher_routing(out: &StepOutput) -> [Option<f64>; 3] {
    let mut mass = (0.0, 0usize);
    for l in &out.teacher_mass {
        for (m, _) in l.iter().zip(&out.valid).filter(|(_, v)| **v) {
            mass.0 += f64::from(*m);
            mass.1 += 1;
        }
    }
    let mass = (mass.1 > 0).then(|| mass.0 / mass.1 as f64);
    let (mut top1, mut topk, mut n) = (0usize, 0.0f64, 0usize);
    let tokens = out.valid.len().max(1);
    for (s, t) in out.routes_old.iter().zip(&out.routes_teacher) {
        let k = s.len() / tokens;
        if k == 0 || t.len() != s.len() {
            continue;
        }
        let pairs = s.chunks_exact(k).zip(t.chunks_exact(k)).zip(&out.valid);
        for ((a, b), _) in pairs.filter(|(_, v)| **v) {
            top1 += usize::from(a[0] == b[0]);
            topk += a.iter().filter(|x| b.contains(x)).count() as f64 / k as f64;
            n += 1;
        }
    }
    let share = |x: f64| (n > 0).then(|| x / n as f64);
    [share(top1 as f64), share(topk), mass]
}

/// Mean over the rollout batch's tokens of log π_old − log π_T (none without a teacher).
pub fn teacher_kl(out: &StepOutput) -> Option<f64> {
    let t = out.logp_teacher.as_ref()?;
    let n = t.len().max(1) as f64;
    let sum: f64 = (out.logp_old.iter().zip(t))
        .map(|(&s, &t)| f64::from(s) - f64::from(t))
        .sum();
    Some(sum / n)
}
