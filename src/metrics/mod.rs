//! Measurements derived from the RL engine's outputs.

pub mod drift;
