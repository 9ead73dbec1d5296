//! The RL engine: rollouts, advantages, objectives, routing modes, drift knobs, the update loop.

pub mod advantage;
pub mod config;
pub mod drift;
pub mod loss;
pub mod micro;
pub mod rollout;
pub mod step;

pub use config::{
    AdvantageMode, Aggregation, Algorithm, AlgorithmKind, DriftInjection, GrpoConfig, GspoConfig,
    GvpoConfig, LrSchedule, Mismatch, RlConfig, RoutingMode, TisConfig,
};
pub use step::{StepOutput, Trainer, UpdateRecord};
