//! Shards of a run: `--shard i/n` runs the cells whose index in the spec's canonical order is
//! ≡ i (mod n), into `<out>/shards/<i>-of-<n>/`, so no two shards write the same file and any
//! scheduler (a Slurm job array, a shell loop over machines) can run them.

use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

impl std::str::FromStr for Shard {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        let Some((i, n)) = s.split_once('/') else {
            bail!("--shard wants i/n (shard i of n, 0 ≤ i < n), not '{s}'");
        };
        let parse = |x: &str, what: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| anyhow::anyhow!("--shard {s}: {what} '{x}' is not a whole number"))
        };
        let (index, count) = (parse(i, "index")?, parse(n, "count")?);
        if count == 0 || index >= count {
            bail!("--shard {s}: the index must be in 0..{count} and the count at least 1");
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// Where the shards of a run live under its output folder.
pub const SHARDS_DIR: &str = "shards";

impl Shard {
    /// Whether the cell at canonical index `cell` belongs to this shard.
    pub fn selects(&self, cell: usize) -> bool {
        cell % self.count == self.index
    }

    /// This shard's folder under the run's output folder.
    pub fn dir(&self, out: &Path) -> PathBuf {
        out.join(SHARDS_DIR)
            .join(format!("{}-of-{}", self.index, self.count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_partition_the_cells() {
        let s: Shard = "1/3".parse().unwrap();
        assert_eq!(s, Shard { index: 1, count: 3 });
        let picked: Vec<usize> = (0..8).filter(|&c| s.selects(c)).collect();
        assert_eq!(picked, vec![1, 4, 7]);
        for bad in ["3/3", "1", "a/2", "0/0", "-1/2"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
        // Every cell is in exactly one shard.
        let n = 4;
        for c in 0..20 {
            let owners = (0..n)
                .filter(|&i| Shard { index: i, count: n }.selects(c))
                .count();
            assert_eq!(owners, 1);
        }
        assert_eq!(
            s.dir(Path::new("r")),
            Path::new("r").join("shards").join("1-of-3")
        );
    }
}
