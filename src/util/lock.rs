//! A lock file for work that several processes (shards of a sweep, on one machine or on a
//! cluster's shared file system) may want to do at once: the first creates it exclusively,
//! the others wait. The holder refreshes its modification time while it works, so a lock left
//! by a process that died (killed, node lost) is taken over once it is `STALE` old.

use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, SystemTime};

/// How often the holder refreshes the lock.
const HEARTBEAT: Duration = Duration::from_secs(20);
/// A lock not refreshed for this long belongs to a process that is gone.
const STALE: Duration = Duration::from_secs(180);

/// An empty lock is one being written this instant, unless it stays empty this long.
const EMPTY_GRACE: Duration = Duration::from_secs(10);

/// A held lock; dropping it removes the file (if it is still this holder's).
pub struct Lock {
    path: PathBuf,
    /// What this holder wrote into it: `host pid nonce`.
    mine: String,
    stop: Option<mpsc::Sender<()>>,
    beat: Option<std::thread::JoinHandle<()>>,
}

/// What `try_acquire` found.
pub enum Attempt {
    Acquired(Lock),
    /// Someone else holds it; their `host pid` line.
    Held(String),
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into())
}

/// Whether the holder of a lock with this content and age is gone: not refreshed for
/// `STALE`, or a process of this host that no longer exists.
fn is_stale(holder: &str, age: Duration) -> bool {
    if age > STALE {
        return true;
    }
    let mut parts = holder.split_whitespace();
    match (
        parts.next(),
        parts.next().and_then(|p| p.parse::<u32>().ok()),
    ) {
        (Some(h), Some(pid)) if h == hostname() => !Path::new(&format!("/proc/{pid}")).exists(),
        _ => false,
    }
}

impl Lock {
    /// Take `path` if nobody holds it (or its holder is gone).
    pub fn try_acquire(path: &Path) -> Result<Attempt> {
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)
        {
            Ok(mut f) => {
                static NONCE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let nonce = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
                    ^ NONCE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let mine = format!("{} {} {nonce:x}", hostname(), std::process::id());
                writeln!(f, "{mine}")
                    .with_context(|| format!("writing lock {}", path.display()))?;
                Ok(Attempt::Acquired(Lock::hold(path.to_path_buf(), mine)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let holder = std::fs::read_to_string(path).unwrap_or_default();
                let age = std::fs::metadata(path)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| SystemTime::now().duration_since(t).ok())
                    .unwrap_or_default();
                let stale = if holder.trim().is_empty() {
                    age > EMPTY_GRACE
                } else {
                    is_stale(&holder, age)
                };
                // Remove it only if it is still the lock judged stale (another waiter may have
                // taken it over in between).
                if stale && std::fs::read_to_string(path).unwrap_or_default() == holder {
                    eprintln!(
                        "warning: taking over the lock {} (held by '{}', gone)",
                        path.display(),
                        holder.trim()
                    );
                    let _ = std::fs::remove_file(path);
                    return Lock::try_acquire(path);
                }
                Ok(Attempt::Held(holder.trim().to_string()))
            }
            Err(e) => Err(e).with_context(|| format!("creating lock {}", path.display())),
        }
    }

    fn hold(path: PathBuf, mine: String) -> Lock {
        let (tx, rx) = mpsc::channel::<()>();
        let p = path.clone();
        let beat = std::thread::spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(HEARTBEAT) {
                if let Ok(f) = std::fs::File::options().write(true).open(&p) {
                    let _ = f.set_modified(SystemTime::now());
                }
            }
        });
        Lock {
            path,
            mine,
            stop: Some(tx),
            beat: Some(beat),
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(b) = self.beat.take() {
            let _ = b.join();
        }
        if std::fs::read_to_string(&self.path).is_ok_and(|s| s.trim() == self.mine) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The lock file a run holds in its output folder.
pub const FOLDER_LOCK: &str = ".driftlab.lock";

/// The folders this process holds, with how many holds each has (a run holds its folder, and
/// the command around it holds it again across the report).
static FOLDERS: std::sync::Mutex<Vec<(PathBuf, usize, Option<Lock>)>> =
    std::sync::Mutex::new(Vec::new());

/// A hold on an output folder; the last hold of this process dropped releases the lock.
pub struct FolderHold(PathBuf);

/// Hold `dir` (which must exist) for this process: another process that tries while it is
/// held fails at once with an error naming the holder (`host pid`), and a holder that died
/// (killed) is taken over. Holds within one process nest.
pub fn hold_folder(dir: &Path) -> Result<FolderHold> {
    let key = dir
        .canonicalize()
        .with_context(|| format!("locating {}", dir.display()))?;
    let mut held = FOLDERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(h) = held.iter_mut().find(|h| h.0 == key) {
        h.1 += 1;
        return Ok(FolderHold(key));
    }
    match Lock::try_acquire(&key.join(FOLDER_LOCK))? {
        Attempt::Acquired(l) => {
            held.push((key.clone(), 1, Some(l)));
            Ok(FolderHold(key))
        }
        Attempt::Held(by) => anyhow::bail!(
            "{} is in use by another run (process '{by}' holds {}); wait for it to end, or \
             choose another --out",
            dir.display(),
            key.join(FOLDER_LOCK).display()
        ),
    }
}

impl Drop for FolderHold {
    fn drop(&mut self) {
        let mut held = FOLDERS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(i) = held.iter().position(|h| h.0 == self.0) {
            held[i].1 -= 1;
            if held[i].1 == 0 {
                held.remove(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_dead_holders_are_taken_over() {
        let dir = std::env::temp_dir().join(format!("driftlab-lock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.lock");
        let first = match Lock::try_acquire(&path).unwrap() {
            Attempt::Acquired(l) => l,
            Attempt::Held(h) => panic!("free lock held by {h}"),
        };
        match Lock::try_acquire(&path).unwrap() {
            Attempt::Held(h) => assert!(
                h.starts_with(&format!("{} {} ", hostname(), std::process::id())),
                "{h}"
            ),
            Attempt::Acquired(_) => panic!("a held lock was acquired twice"),
        }
        drop(first);
        assert!(!path.exists(), "dropping the lock removes its file");
        // A lock of a process of this host that no longer exists is taken over.
        std::fs::write(&path, format!("{} 4194303999\n", hostname())).unwrap();
        assert!(matches!(
            Lock::try_acquire(&path).unwrap(),
            Attempt::Acquired(_)
        ));
        // A lock someone else took over is not removed by the old holder.
        let taken = match Lock::try_acquire(&path).unwrap() {
            Attempt::Acquired(l) => l,
            Attempt::Held(h) => panic!("a free lock held by {h}"),
        };
        std::fs::write(&path, "elsewhere 1 0\n").unwrap();
        drop(taken);
        assert!(path.exists(), "a lock that is no longer ours stays");
        std::fs::remove_file(&path).unwrap();
        // Another host's lock is stale only once it is old.
        assert!(!is_stale("elsewhere 1", Duration::from_secs(5)));
        assert!(is_stale("elsewhere 1", STALE + Duration::from_secs(1)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_folder_hold_nests_within_a_process_and_releases_with_the_last() {
        let dir = std::env::temp_dir().join(format!("driftlab-hold-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let outer = hold_folder(&dir).unwrap();
        let inner = hold_folder(&dir).unwrap();
        drop(inner);
        assert!(
            dir.join(FOLDER_LOCK).exists(),
            "still held by the outer hold"
        );
        drop(outer);
        assert!(
            !dir.join(FOLDER_LOCK).exists(),
            "released with the last hold"
        );
        // A live holder of another process (this host's pid 1) is refused, named.
        std::fs::write(dir.join(FOLDER_LOCK), format!("{} 1 0\n", hostname())).unwrap();
        let e = hold_folder(&dir).err().expect("held by pid 1").to_string();
        assert!(
            e.contains("in use by another run") && e.contains(" 1 0"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
