//! Measurements derived from the RL engine's outputs: drift, ratios, rows, collapse events.

pub mod collapse;
pub mod drift;
pub mod frames;
pub mod ratio;
pub mod responses;
pub mod rows;
pub mod schema;
pub mod teacher;
