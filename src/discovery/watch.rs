//! The file watcher: every directory a snapshot read, the deepest existing ancestor of every path
//! whose creation would change a snapshot, and the plugin registry. A relevant event bumps a
//! generation counter; snapshots built at an older generation are rebuilt on next use.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use notify::{
    RecursiveMode, Watcher as _,
    event::{AccessKind, AccessMode},
};

use super::sources::{SourceDir, WatchPlan};

#[derive(Default)]
struct Interest {
    /// Directories read at their top level only: an event for one of their entries matters.
    flat: HashSet<PathBuf>,
    /// Directories read recursively: any event below them matters.
    deep: HashSet<PathBuf>,
    /// Missing paths and watched files: an event on them or on an ancestor matters.
    targets: HashSet<PathBuf>,
    /// Paths currently registered with the OS watcher.
    watched: HashSet<PathBuf>,
}

impl Interest {
    fn matters(&self, p: &Path) -> bool {
        self.flat
            .iter()
            .any(|d| p.parent() == Some(d.as_path()) || d.starts_with(p))
            || self
                .deep
                .iter()
                .any(|d| p.starts_with(d) || d.starts_with(p))
            || self
                .targets
                .iter()
                .any(|t| t.starts_with(p) || p.starts_with(t))
    }
}

/// Owns the OS watcher and the generation counter.
pub(super) struct Watcher {
    os: Mutex<notify::RecommendedWatcher>,
    interest: Arc<Mutex<Interest>>,
    generation: Arc<AtomicU64>,
    /// The generation, for those who wait for a change (the console's catalog, docs §14.3).
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Watcher {
    pub(super) fn new() -> notify::Result<Self> {
        let interest: Arc<Mutex<Interest>> = Arc::default();
        let generation = Arc::new(AtomicU64::new(1));
        let changes = Arc::new(tokio::sync::watch::Sender::new(1));
        let (i, g, c) = (interest.clone(), generation.clone(), changes.clone());
        let os = notify::RecommendedWatcher::new(
            move |res: notify::Result<notify::Event>| {
                let relevant = match &res {
                    Ok(ev) if ev.need_rescan() => true,
                    // Reads (ours included: every build opens the files) change nothing; only a
                    // close after writing does.
                    Ok(ev)
                        if matches!(ev.kind, notify::EventKind::Access(a)
                            if a != AccessKind::Close(AccessMode::Write)) =>
                    {
                        false
                    }
                    Ok(ev) => {
                        let mut interest = i.lock().expect("watch interest poisoned");
                        if ev.kind.is_remove() {
                            // A removed watched directory loses its OS watch; re-add it later.
                            for p in &ev.paths {
                                interest.watched.retain(|w| !w.starts_with(p));
                            }
                        }
                        ev.paths.iter().any(|p| interest.matters(p))
                    }
                    Err(_) => true,
                };
                if relevant {
                    c.send_replace(g.fetch_add(1, Ordering::SeqCst) + 1);
                }
            },
            notify::Config::default().with_follow_symlinks(false),
        )?;
        Ok(Self {
            os: Mutex::new(os),
            interest,
            generation,
            changes,
        })
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub(super) fn bump(&self) {
        self.changes
            .send_replace(self.generation.fetch_add(1, Ordering::SeqCst) + 1);
    }

    /// Follows the generation: changes whenever a snapshot may have become stale.
    pub(super) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Registers interest and OS watches for one snapshot's directories, before they are read, so
    /// no change between reading and watching is lost.
    pub(super) fn register(&self, dirs: &[SourceDir], plan: &WatchPlan) {
        let mut want: Vec<(PathBuf, RecursiveMode)> = Vec::new();
        {
            let mut interest = self.interest.lock().expect("watch interest poisoned");
            for d in dirs {
                // `.codex` agent dirs read their TOML files at any depth.
                if d.recursive || d.toml {
                    interest.deep.insert(d.path.clone());
                    want.push((d.path.clone(), RecursiveMode::Recursive));
                } else {
                    interest.flat.insert(d.path.clone());
                    want.push((d.path.clone(), RecursiveMode::NonRecursive));
                }
            }
            for t in plan.targets.iter().chain(&plan.files) {
                interest.targets.insert(t.clone());
                if let Some(anc) = t.ancestors().skip(1).find(|a| a.is_dir()) {
                    want.push((anc.to_path_buf(), RecursiveMode::NonRecursive));
                }
            }
            want.retain(|(p, _)| p.is_dir() && !interest.watched.contains(p));
            for (p, _) in &want {
                interest.watched.insert(p.clone());
            }
        }
        if want.is_empty() {
            return;
        }
        let mut os = self.os.lock().expect("os watcher poisoned");
        for (p, mode) in want {
            if let Err(e) = os.watch(&p, mode) {
                tracing::warn!(path = %p.display(), error = %e, "cannot watch directory");
                self.interest
                    .lock()
                    .expect("watch interest poisoned")
                    .watched
                    .remove(&p);
            }
        }
    }
}
