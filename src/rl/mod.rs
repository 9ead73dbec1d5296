//! The RL engine: rollouts, advantages, objectives, routing modes, drift knobs, the update loop.

pub mod advantage;
pub mod algorithm;
pub mod config;
pub mod correct;
pub mod drift;
pub mod engine_router;
pub mod fix_settings;
pub mod fixes;
pub mod loss;
pub mod micro;
mod old;
pub mod predictor;
mod predictor_step;
pub mod record;
pub mod rollout;
pub mod router_shift;
pub mod step;
pub mod teacher;

pub use config::{
    AdvantageMode, Aggregation, Algorithm, AlgorithmKind, CispoConfig, DriftInjection, GmpoConfig,
    GrpoConfig, GspoConfig, GvpdConfig, GvpoConfig, IcePopConfig, LrSchedule, MisConfig, MisLevel,
    Mismatch, OldLogp, OpdKlConfig, OpdPgConfig, OpsmConfig, Pr2Config, Pr2Gates, Precision,
    ReplayThresholdConfig, RlConfig, RouterPrecision, RouterShiftConfig, RoutingMode, TisConfig,
};
pub use step::{StepOutput, Trainer, UpdateRecord};
pub use teacher::TeacherConfig;
