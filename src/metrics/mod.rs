//! Measurements derived from the RL engine's outputs: drift, ratios, rows, collapse events.

pub mod collapse;
pub mod drift;
pub mod frames;
pub mod mismatch;
pub mod ratio;
pub mod responses;
pub mod router_check;
pub mod rows;
pub mod schema;
pub mod teacher;
