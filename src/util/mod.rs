//! Utilities with no simulation in them: files, hashes, locks, names, progress output, parallel
//! maps, the host's description, host/device tensor conversions and fast elementwise maths.

pub mod fastmath;
pub mod hash;
pub mod host;
pub mod io;
pub mod lock;
pub mod names;
pub mod parallel;
pub mod progress;
pub mod tensors;
pub mod transpose;
